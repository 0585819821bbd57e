"""Presenting a diagnosis: the JSON incident contract and the human text for `--explain`."""

from __future__ import annotations

from typing import Any

from ..records import Explanation
from .engine import Diagnosis


def incident_dict(diagnosis: Diagnosis) -> dict[str, Any]:
    """The `diagnose --json` incident object (keys scripts rely on come first)."""
    match, crash = diagnosis.match, diagnosis.crash
    return {
        "category": match.category,
        "rule_id": match.rule_id or None,
        "diagnosis": match.diagnosis,
        "params": dict(match.params),
        "remediations": list(match.remediations),
        "signature": diagnosis.signature.fingerprint,
        "exception": crash.exception,
        "message": first_line(crash.message),
        "ranks": diagnosis.ranks,
        "title": match.title,
        "precise": match.precise,
        "advice": match.advice,
        "references": list(match.references),
        "kind": crash.kind,
        "source": crash.source,
        "first_line": crash.first_line,
        "last_line": crash.last_line,
    }


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def incident_text(number: int, diagnosis: Diagnosis, explain: bool = False) -> list[str]:
    """A short readable block for one incident; with `explain`, the signature and rule reasoning."""
    match, crash = diagnosis.match, diagnosis.crash
    where = f"lines {crash.first_line}-{crash.last_line}" if crash.first_line else "no line numbers"
    ranks = ", ".join(diagnosis.ranks) or "untagged"
    lines = [
        f"incident {number}: {match.category}" + (f" (rule {match.rule_id}"
                                                  f"{', precise' if match.precise else ''})" if match.rule_id else ""),
        f"  crash:      {crash.exception or crash.kind}: {first_line(crash.message)[:200]}",
        f"  ranks:      {ranks} ({len(diagnosis.crashes)} crash(es), {where})",
        f"  diagnosis:  {match.diagnosis}",
    ]
    if match.remediations:
        lines.append(f"  would try:  {' -> '.join(match.remediations)} (offline: nothing applied)")
    else:
        lines.append("  would try:  no automatic remediation; advice only")
    if match.advice:
        lines.append(f"  advice:     {match.advice}")
    for reference in match.references:
        lines.append(f"  reference:  {reference}")
    if explain:
        lines.extend(signature_text(diagnosis))
        lines.extend(explanations_text(diagnosis.explanations))
    return lines


def signature_text(diagnosis: Diagnosis) -> list[str]:
    signature = diagnosis.signature
    lines = [
        "  signature:",
        f"    fingerprint: {signature.fingerprint}",
        f"    exception:   {signature.exception}",
        f"    message:     {first_line(signature.normalized_message)[:200]}",
        f"    frames:      {', '.join(signature.frames[-4:]) or '(none)'}",
        f"    params:      {dict(signature.params)}",
    ]
    lines.extend(f"    step: {hint}" for hint in signature.hints)
    return lines


def explanations_text(explanations: list[Explanation]) -> list[str]:
    """Candidates with their reasons; rules that were never candidates summarised in one line."""
    lines = ["  rules:"]
    skipped = []
    for explanation in explanations:
        if not explanation.matched and explanation.reasons and explanation.reasons[0].startswith("not a candidate"):
            skipped.append(explanation.rule_id)
            continue
        mark = "MATCH" if explanation.matched else "no   "
        lines.append(f"    {mark} {explanation.rule_id}")
        lines.extend(f"          - {reason}" for reason in explanation.reasons)
    if skipped:
        lines.append(f"    ({len(skipped)} rule(s) not candidates: their exception types differ: "
                     f"{', '.join(skipped)})")
    return lines
