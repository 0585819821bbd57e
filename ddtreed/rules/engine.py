"""A loaded rule set and the diagnosis of one group of crashes (the ranks that failed together)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Collection, Iterable

from ..records import Crash, Explanation, RuleMatch, ServiceContext, Signature
from .loader import parse_files, rule_files
from .model import CrashView, Rule, RuleIndex

UNKNOWN_CATEGORY = "unknown"


@dataclass(frozen=True)
class Diagnosis:
    """What the rules concluded about one incident, and why."""

    match: RuleMatch
    signature: Signature
    crash: Crash  # the representative crash: the most informative one, the one the match is on
    crashes: tuple[Crash, ...] = ()
    explanations: list[Explanation] = field(default_factory=list)

    @property
    def ranks(self) -> list[str]:
        return sorted({crash.rank for crash in self.crashes if crash.rank})


def load_rules(dirs: Iterable[str | os.PathLike[str]],
               remediation_ids: Collection[str] | None = None) -> "RuleSet":
    """Every `*.toml` rule file in `dirs`; RuleError ("file:line: field: problem") when invalid.

    With `remediation_ids`, a rule naming a remediation outside that catalog is an error too.
    """
    dirs = list(dirs)
    return RuleSet(parse_files(rule_files(dirs), remediation_ids, dirs))


def informativeness(crash: Crash) -> tuple[int, int, int]:
    """Rank crashes: a real traceback over a bare death; a wrapped inner error; more frames."""
    tier = {"traceback": 3, "nccl-watchdog": 2, "watchdog-timeout": 2}.get(crash.kind, 0)
    if crash.exception:
        tier = max(tier, 1)
    return tier, int(bool(crash.inner_message or crash.chained)), len(crash.frames)


class RuleSet:
    """Rules indexed by exception type; `diagnose` picks the best match across a crash group."""

    def __init__(self, rules: Iterable[Rule]):
        self.rules: tuple[Rule, ...] = tuple(rules)
        self._order = {rule.id: position for position, rule in enumerate(self.rules)}
        self._by_id = {rule.id: rule for rule in self.rules}
        self._index = RuleIndex()
        for rule in self.rules:
            self._index.add(rule)

    def __len__(self) -> int:
        return len(self.rules)

    def get(self, rule_id: str) -> Rule | None:
        return self._by_id.get(rule_id)

    def diagnose(self, crashes: tuple[Crash, ...], context: ServiceContext | None = None) -> Diagnosis:
        """The best rule match over all crashes of the group, or category `unknown`."""
        from ..signature import signature_of

        if not crashes:
            raise ValueError("diagnose needs at least one crash")
        best: tuple | None = None
        seen: dict[tuple, tuple] = {}
        for crash in crashes:
            key = (crash.kind, crash.exception, crash.message, crash.inner_message, crash.frames)
            if key not in seen:
                # Ranks usually print the same error: evaluate each distinct one once.
                seen[key] = self._best_for(crash, signature_of(crash), context)
            signature, match, rule = seen[key]
            score = self._score(match, rule, crash)
            if best is None or score > best[0]:
                best = (score, crash, signature, match)
        _, crash, signature, match = best
        explanations = self.explain(crash, signature, context)
        if match is None:
            match = _unknown(signature)
        return Diagnosis(match=match, signature=signature, crash=crash, crashes=tuple(crashes),
                         explanations=explanations)

    def _best_for(self, crash: Crash, signature: Signature, context: ServiceContext | None):
        view = CrashView.of(crash)
        best_match, best_rule = None, None
        for rule_id in self._index.candidates(view):
            rule = self._by_id[rule_id]
            match, _ = rule.evaluate(view, signature.params, context)
            if match is not None and (best_rule is None or self._rank(rule, match) > self._rank(best_rule, best_match)):
                best_match, best_rule = match, rule
        return signature, best_match, best_rule

    def _rank(self, rule: Rule, match: RuleMatch) -> tuple:
        # Priority first; then a context-precise match; then the more specific rule; then file order.
        return rule.priority, match.precise, rule.conditions.weight, -self._order[rule.id]

    def _score(self, match: RuleMatch | None, rule: Rule | None, crash: Crash) -> tuple:
        if match is None:
            return (0, (), informativeness(crash))
        return (1, self._rank(rule, match), informativeness(crash))

    def explain(self, crash: Crash, signature: Signature,
                context: ServiceContext | None = None) -> list[Explanation]:
        """Why each rule did or did not match this crash, candidates first."""
        view = CrashView.of(crash)
        candidates = self._index.candidates(view)
        explanations: list[Explanation] = []
        for rule in self.rules:
            if rule.id in candidates:
                explanations.append(rule.evaluate(view, signature.params, context)[1])
            else:
                types = sorted(str(name) for name in view.exception_keys)
                explanations.append(Explanation(rule.id, False, (
                    f"not a candidate: exception {types} not in {list(rule.conditions.exceptions)}",)))
        explanations.sort(key=lambda e: (e.rule_id not in candidates, not e.matched))
        return explanations


def _unknown(signature: Signature) -> RuleMatch:
    return RuleMatch(
        rule_id="", category=UNKNOWN_CATEGORY, title="No rule matched",
        diagnosis=(f"no rule recognises {signature.exception or 'this failure'}: "
                   f"{signature.normalized_message[:200]}"),
        remediations=(), params=dict(signature.params),
    )
