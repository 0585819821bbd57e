"""What a preflight check reports: one predicted failure, its numbers, and what prevents it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

WOULD_CRASH = "would-crash"
WARNING = "warning"
SEVERITIES = (WOULD_CRASH, WARNING)
FINDING = "finding"
CHECK_ERROR = "check-error"
SKIPPED = "skipped"


class Skipped(Exception):
    """Raised by a check that cannot decide (its input is unknown): the report lists it as skipped."""


@dataclass(frozen=True)
class Finding:
    """One predicted failure. `signature` is stable per check, for incidents and frozen lists."""

    check: str  # the check id, e.g. "ddtree-verify-width"
    severity: str  # would-crash | warning
    what: str  # what would crash, in one line
    why: str  # the reason, with the numbers
    category: str = "unsupported-config"  # the crash taxonomy class it pre-empts
    remediations: tuple[str, ...] = ()  # ids that prevent it, in order to try
    advice: str = ""  # what a person should do when no remediation applies
    params: Mapping[str, Any] = field(default_factory=dict)  # the numbers, by name
    kind: str = FINDING  # finding | check-error | skipped
    blocking: bool = False  # [preflight] block_on names this check (only would-crash blocks)
    rule_id: str | None = None  # the crash rule this pre-empts, when a rule set was given
    remediation_notes: tuple[str, ...] = ()  # remediations dropped because they do not apply

    @property
    def signature(self) -> str:
        return f"preflight:{self.check}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check, "signature": self.signature, "kind": self.kind,
            "severity": self.severity, "category": self.category, "blocking": self.blocking,
            "what": self.what, "why": self.why, "remediations": list(self.remediations),
            "remediation_notes": list(self.remediation_notes), "advice": self.advice,
            "rule_id": self.rule_id, "params": dict(self.params),
        }

    def render(self) -> str:
        """Several lines for a terminal: what, why, and what prevents it."""
        tag = "WOULD CRASH" if self.severity == WOULD_CRASH else self.severity.upper()
        if self.kind == CHECK_ERROR:
            tag = "CHECK ERROR"
        if self.kind == SKIPPED:
            return f"[SKIPPED] {self.check}: {self.why}"
        lines = [f"[{tag}] {self.check}{' (blocks launch)' if self.blocking else ''}",
                 f"  what: {self.what}", f"  why:  {self.why}"]
        if self.remediations:
            lines.append(f"  prevented by: {', '.join(self.remediations)}")
        for note in self.remediation_notes:
            lines.append(f"  note: {note}")
        if self.advice:
            lines.append(f"  advice: {self.advice}")
        return "\n".join(lines)
