"""A loaded rule set and the diagnosis of one group of crashes (the ranks that failed together)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Iterable

from ..records import Crash, Explanation, RuleMatch, ServiceContext, Signature
from ..signature import signature_of  # here, not at the first crash: its regexes compile on import
from .evidence import CrashEvidence, build_reverse_programs
from .loader import parse_files, rule_files
from .model import CrashView, Rule, RuleIndex
from .prefilter import MessagePrefilter
from .scorer import Scorer, Verdict, load_scorer

UNKNOWN_CATEGORY = "unknown"
# Rules at or below this priority only name the shape of a failure (a plain Python error in
# SGLang code, a bare child death): any other reading of the same text outranks them.
LAST_RESORT_PRIORITY = 1
BUDGET_S = 2.0  # per distinct crash: past it, the best match so far decides (issue 16.3)


@dataclass(frozen=True)
class Outvoted:
    """A rule that also matched but lost the decision, and why it lost."""

    rule_id: str
    category: str
    priority: int
    reason: str


@dataclass(frozen=True)
class Diagnosis:
    """What the rules concluded about one incident, and why."""

    match: RuleMatch
    signature: Signature
    crash: Crash  # the representative crash: the most informative one, the one the match is on
    crashes: tuple[Crash, ...] = ()
    explain_with: Callable[[], list[Explanation]] | None = field(default=None, repr=False, compare=False)
    evidence: CrashEvidence | None = None
    confidence: float = 0.0
    outvoted: tuple[Outvoted, ...] = ()
    notes: tuple[str, ...] = ()
    scored: Verdict | None = None  # the evidence scorer's reading, when the rules left it open
    decided_by: str = "rules"  # or "evidence-scorer": advice only, no remediation comes with it

    @property
    def scorer_decided(self) -> bool:
        return self.decided_by == "evidence-scorer"

    @property
    def explanations(self) -> list[Explanation]:
        """Why each rule did or did not match (built on request: it evaluates every rule)."""
        cached = self.__dict__.get("_explanations")
        if cached is None:
            cached = self.explain_with() if self.explain_with is not None else []
            object.__setattr__(self, "_explanations", cached)
        return cached

    @property
    def ranks(self) -> list[str]:
        return sorted({crash.rank for crash in self.crashes if crash.rank})

    @property
    def phase(self) -> str | None:
        return self.evidence.phase if self.evidence is not None else None

    @property
    def deciding(self) -> list:
        """The evidence that speaks for the chosen category."""
        if self.evidence is None:
            return []
        return self.evidence.support(self.match.category)


@dataclass(frozen=True)
class Warmed:
    """What `RuleSet.warm` built ahead of a crash."""

    catch_alls: tuple[str, ...]  # the texts of the catch-all message patterns searched
    reverse_programs: int  # evidence family patterns whose reverse program was built


def load_rules(dirs: Iterable[str | os.PathLike[str]],
               remediation_ids: Collection[str] | None = None, scorer: Scorer | bool = True) -> "RuleSet":
    """Every `*.toml` rule file in `dirs`; RuleError ("file:line: field: problem") when invalid.

    With `remediation_ids`, a rule naming a remediation outside that catalog is an error too.
    `scorer`: the evidence scorer consulted where the rules leave a crash open (True: the shipped
    model when the shipped rules are among `dirs`, since it was validated against what they leave
    open; `scorer.ScorerError` naming its file when it is unusable; False: rules alone).
    """
    dirs = list(dirs)
    if scorer is True:
        from ..paths import shipped

        home = Path(shipped("rules")).resolve()
        chosen = load_scorer() if any(Path(d).resolve() == home for d in dirs) else None
    else:
        chosen = scorer or None
    return RuleSet(parse_files(rule_files(dirs), remediation_ids, dirs), scorer=chosen)


def informativeness(crash: Crash) -> tuple[int, int, int]:
    """Rank crashes: a real traceback over a bare death; a wrapped inner error; more frames."""
    tier = {"traceback": 3, "nccl-watchdog": 2, "watchdog-timeout": 2}.get(crash.kind, 0)
    if crash.exception:
        tier = max(tier, 1)
    return tier, int(bool(crash.inner_message or crash.chained)), len(crash.frames)


class RuleSet:
    """Rules indexed by exception type; `diagnose` picks the best match across a crash group."""

    def __init__(self, rules: Iterable[Rule], prefilter: bool = True, scorer: Scorer | None = None):
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.scorer = scorer  # consulted only where no rule, or only a last-resort one, decided
        self.use_prefilter = prefilter  # False: every candidate is evaluated (the equivalence tests)
        # Built with the rules (~60 ms), not on the first crash: that one is the detection timed.
        self._prefilter = MessagePrefilter(self.rules) if prefilter else None
        self._order = {rule.id: position for position, rule in enumerate(self.rules)}
        self._by_id = {rule.id: rule for rule in self.rules}
        self._index = RuleIndex()
        # The last diagnosis and what it was of: a diagnosis depends on nothing else, so the same
        # crashes and context again (crash text read from a live service is diagnosed while the
        # settle wait runs, then its incident is opened) are not judged twice.
        self._last: tuple | None = None
        self.diagnosed = 0  # calls of `diagnose` (the daemon warm-up's included): one before it makes it moot
        # False (the daemon): a crash's candidates stop at the first priority below a match found.
        # The decision is the same (rank is priority first, and every rule of the match's priority
        # is still tried), only its rivals are not: `outvoted` and the confidence's rival penalty,
        # which `ddtreed diagnose` shows and the incident path never reads, see fewer rules.
        self.rank_rivals = True
        for rule in self.rules:
            self._index.add(rule)

    def __len__(self) -> int:
        return len(self.rules)

    def get(self, rule_id: str) -> Rule | None:
        return self._by_id.get(rule_id)

    def decisive(self, diagnosis: "Diagnosis") -> bool:
        """A diagnosis a real rule decided, not unknown and not a last-resort shape rule."""
        rule = self._by_id.get(diagnosis.match.rule_id) if diagnosis.match.rule_id else None
        return rule is not None and rule.priority > LAST_RESORT_PRIORITY

    def decides_live(self, diagnosis: "Diagnosis") -> bool:
        """Decisive for a traceback logged by a service that still runs: not a `hearsay` rule
        (another program's report of a death, whose words there are an echo)."""
        rule = self._by_id.get(diagnosis.match.rule_id) if diagnosis.match.rule_id else None
        return self.decisive(diagnosis) and rule is not None and not rule.hearsay

    def primary(self, diagnosis: "Diagnosis") -> bool:
        """Decisive and about a cause: not a secondary rule's notice that something else failed
        (`Rule.secondary`), which evidence printed elsewhere (an error the text quotes) outranks."""
        rule = self._by_id.get(diagnosis.match.rule_id) if diagnosis.match.rule_id else None
        return self.decisive(diagnosis) and rule is not None and not rule.secondary

    def diagnose(self, crashes: tuple[Crash, ...], context: ServiceContext | None = None,
                 budget_s: float = BUDGET_S) -> Diagnosis:
        """The best rule match over all crashes of the group, or category `unknown`.

        The first cause wins over its echoes: a child's death or a warm-up request's connection
        error that follow a real crash never decide while that crash is there."""
        if not crashes:
            raise ValueError("diagnose needs at least one crash")
        self.diagnosed += 1
        last = self._last
        if last is not None and last[0] == crashes and last[1] is context and last[2] == budget_s:
            return last[3]  # the same crashes again (the live-text check diagnosed them, then the incident)
        diagnosis = self._diagnose(crashes, context, budget_s)
        self._last = (crashes, context, budget_s, diagnosis)
        return diagnosis

    def _diagnose(self, crashes: tuple[Crash, ...], context: ServiceContext | None, budget_s: float) -> Diagnosis:
        best: tuple | None = None
        seen: dict[tuple, tuple] = {}
        echoes = _echo_test(crashes)
        judged = []
        for crash in crashes:
            key = (crash.kind, crash.exception, crash.message, crash.inner_message, crash.frames)
            if key not in seen:
                # Ranks usually print the same error: evaluate each distinct one once.
                seen[key] = self._best_for(crash, signature_of(crash), context, budget_s)
            signature, view, ranked, notes = seen[key]
            judged.append((crash, echoes(crash, view), seen[key]))
        # A secondary rule's notice (the scheduler is dead, the warm-up was refused) is the echo of
        # any other crash of the group that is no echo and no notice itself, before or after it: one
        # a rule knows, or one with an error line of its own; never a stack cut before its error
        # line that begins like another crash's stack (a cut copy of it, the notice's own included).
        causes: list[Crash] = []
        if any(ranked and ranked[0][1].secondary for _, _, (_, _, ranked, _) in judged):
            stacks = [tuple((f.file, f.function) for f in c.frames) for c in crashes if not _cut_off(c)]
            causes = [crash for crash, echo, (_, _, ranked, _) in judged
                      if not echo and crash.kind in _CAUSE_KINDS
                      and (not ranked[0][1].secondary if ranked else not _cut_off(crash))
                      and not _cut_copy(crash, stacks)]
        set_aside: list[tuple[Crash, Rule, str]] = []  # echoes a rule knew: shown as outvoted
        for crash, echo, (signature, view, ranked, notes) in judged:
            match, rule = ranked[0] if ranked else (None, None)
            if rule is not None and rule.secondary and any(other is not crash for other in causes):
                echo = "a notice that another failure happened (secondary rule)"
            if echo and rule is not None:
                set_aside.append((crash, rule, echo))
            score = (not echo,) + self._score(match, rule, crash)
            if best is None or score > best[0]:
                best = (score, crash, signature, view, ranked, notes)
        _, crash, signature, view, ranked, notes = best
        match, rule = ranked[0] if ranked else (None, None)
        if match is None:
            match = _unknown(signature)
        outvoted = tuple(_outvoted(rule, other_rule, other) for other, other_rule in ranked[1:]
                         if other_rule.category != match.category)
        outvoted += tuple(Outvoted(echo_rule.id, echo_rule.category, echo_rule.priority,
                                   f"echo of the first cause (lines {echo.first_line}-{echo.last_line}): {why}")
                          for echo, echo_rule, why in set_aside
                          if echo is not crash and echo_rule.category != match.category)
        confidence = _confidence(rule, match, view, ranked)
        verdict, decided_by = None, "rules"
        if self.scorer is not None and (rule is None or rule.priority <= LAST_RESORT_PRIORITY):
            # The rules left it open: the evidence scorer may name a category, as advice.
            verdict = self.scorer.verdict(crash, view.evidence)
            if verdict is not None and self.scorer.replaces(rule.category if rule else None, verdict):
                if rule is not None:
                    outvoted = (Outvoted(rule.id, rule.category, rule.priority,
                                         f"last-resort rule (priority {rule.priority}): the evidence scorer "
                                         f"reads {verdict.category}"),) + outvoted
                match, confidence, decided_by = verdict.match(match), verdict.confidence, "evidence-scorer"
        return Diagnosis(match=match, signature=signature, crash=crash, crashes=tuple(crashes),
                         explain_with=lambda: self.explain(crash, signature, context),
                         evidence=view.evidence, confidence=confidence,
                         outvoted=_unique(outvoted), notes=notes, scored=verdict,
                         decided_by=decided_by)

    def warm(self, crashes: Iterable[Crash]) -> Warmed:
        """Build now what any crash shaped like `crashes` (their exception types) meets whatever its
        text, so that the first real one does not build it on the crash path: each catch-all
        message pattern (one without atoms: the prefilter cannot rule it out, so it is searched
        for every crash a candidate rule's other conditions let through) of the candidate rules,
        searched once on the crashes' messages with its reverse program; the evidence families'
        reverse programs. Patterns specific to a wording still compile when a crash first needs
        them. Decides nothing, records nothing and changes no later diagnosis (a search only fills
        RE2's caches); does not count as a diagnosis (`diagnosed`)."""
        catch_alls = self._prefilter.catch_alls if self._prefilter is not None else frozenset()
        searched: dict[str, None] = {}
        for crash in crashes:
            view = CrashView.of(crash)
            messages = dict.fromkeys(error.message for error in view.errors)
            for rule_id in sorted(self._index.candidates(view)):
                for pattern in self._by_id[rule_id].conditions.messages:
                    if pattern.pattern in catch_alls and pattern.pattern not in searched:
                        for message in messages:
                            pattern.warm_on(message)
                        searched[pattern.pattern] = None
        return Warmed(tuple(searched), build_reverse_programs())

    def _best_for(self, crash: Crash, signature: Signature, context: ServiceContext | None,
                  budget_s: float = BUDGET_S):
        """(signature, view, [(match, rule)] best first, notes) for one crash."""
        view = CrashView.of(crash)
        matches: list[tuple[Any, Rule]] = []
        notes: tuple[str, ...] = ()
        deadline = time.monotonic() + budget_s
        possible, view = self._narrowed(view)
        candidates = sorted(possible, key=lambda rule_id: -self._by_id[rule_id].priority)
        for evaluated, rule_id in enumerate(candidates):
            if time.monotonic() > deadline:
                # Highest priorities were tried first, so what is decided is the best of them.
                notes = (f"diagnosis time budget ({budget_s:g} s) spent after {evaluated} of "
                         f"{len(candidates)} candidate rules; the best match so far decides",)
                break
            rule = self._by_id[rule_id]
            if matches and not self.rank_rivals and rule.priority < matches[0][1].priority:
                break  # candidates come by priority: none from here on can outrank the match
            match, _ = rule.evaluate(view, signature.params, context)
            if match is not None:
                matches.append((match, rule))
        matches.sort(key=lambda pair: self._rank(pair[1], pair[0]), reverse=True)
        return signature, view, matches, notes

    def _candidates(self, view: CrashView) -> set[str]:
        """The rules indexed under the view's exception types, less those whose message patterns
        match none of its errors (`prefilter.MessagePrefilter`: they could not match)."""
        return self._narrowed(view)[0]

    def _narrowed(self, view: CrashView) -> tuple[set[str], CrashView]:
        """`_candidates(view)`, and the view with its `potential` message patterns per error (a
        candidate's patterns the prefilter rules out are then not searched), when the filter is on."""
        candidates = self._index.candidates(view)
        if not self.use_prefilter:
            return candidates, view
        if self._prefilter is None:
            self._prefilter = MessagePrefilter(self.rules)
        narrowed = self._prefilter.narrowed(view)
        if narrowed is None:
            return candidates, view
        possible, potential = narrowed
        filtered = self._prefilter.filtered
        return ({rule_id for rule_id in candidates if rule_id not in filtered or rule_id in possible},
                replace(view, potential=potential))

    def _rank(self, rule: Rule, match: RuleMatch) -> tuple:
        # Priority first; then a context-precise match; then the more specific rule; then file order.
        return rule.priority, match.precise, rule.conditions.weight, -self._order[rule.id]

    def _score(self, match: RuleMatch | None, rule: Rule | None, crash: Crash) -> tuple:
        if match is None:
            return (0, 0, (), informativeness(crash))
        # A crash that printed its error line outranks a traceback cut off before it (another
        # rank's copy of the same failure, trimmed): the stack alone says where, not what.
        return (1, int(not _cut_off(crash)), self._rank(rule, match), informativeness(crash))

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


def _cut_off(crash: Crash) -> bool:
    return crash.kind == "traceback" and crash.exception is None and not crash.inner_message


_CAUSE_KINDS = ("traceback", "error-line", "nccl-watchdog", "watchdog-timeout")  # crashes with words of their own


def _echo_test(crashes: tuple[Crash, ...]):
    """Why this crash is an echo of another one in the group (not the first cause); "" if not."""
    causes = [c for c in crashes if c.kind in _CAUSE_KINDS]

    def echo(crash: Crash, view: CrashView) -> str:
        if crash.kind in ("child-death", "killed"):
            # the parent noticing a child that already printed why it died
            return "a death noticed after a crash that printed its error" if causes else ""
        evidence = view.evidence
        if evidence is None:
            return ""
        secondary = ("connection" in evidence.exception_families or "warm-up" in evidence.frame_families
                     or "connection" in evidence.message_families and not evidence.message_families - {
                         "connection", "timeout"})
        if secondary and any(other is not crash and other.kind in ("traceback", "error-line")
                             and (other.first_line or 0) <= (crash.first_line or 0) for other in causes):
            return "a connection error or the warm-up request after the crash"
        # When one rank dies the others wait on it in their next collective until NCCL's watchdog
        # (or the store) gives up: a communication failure printed after another rank's own
        # error, from another source or rank, is that error's echo.
        if _communication_only(crash, evidence):
            waited = any(other is not crash and other.kind == "traceback" and other.exception
                         and (other.first_line or 0) < (crash.first_line or 0)
                         and not _same_process(other, crash)
                         and not own_error_is_communication(other) for other in causes)
            return "a collective that failed after another rank's own error" if waited else ""
        # The same wait seen by SGLang's own watchdog: a rank whose step never finished (it sat in a
        # collective for the rank that died) after a rank's own error is that error's echo. Only a
        # rank's error counts (tagged, or SGLang's `… hit an exception` banner): a request's error
        # the HTTP side logged and answered kills no rank, so a later hang is a hang of its own.
        if crash.kind == "watchdog-timeout":
            waited = any(other is not crash and other.kind == "traceback" and other.exception
                         and (other.rank is not None or other.prefix)
                         and (other.first_line or 0) < (crash.first_line or 0)
                         and not _same_process(other, crash)
                         and not own_error_is_communication(other) for other in causes)
            return "a rank's watchdog after another rank's own error" if waited else ""
        return ""

    verdicts: dict[int, bool] = {}

    def own_error_is_communication(other: Crash) -> bool:
        if id(other) not in verdicts:  # one evidence gathering per crash, not per pair
            verdicts[id(other)] = _communication_only(other, None)
        return verdicts[id(other)]
    return echo


def _cut_copy(crash: Crash, stacks: list[tuple]) -> bool:
    """A traceback cut before its error line whose frames begin the stack of another crash that
    printed its error line (`stacks`: theirs, as (file, function) pairs)."""
    if not _cut_off(crash) or not crash.frames:
        return False
    mine = tuple((frame.file, frame.function) for frame in crash.frames)
    return any(stack[:len(mine)] == mine for stack in stacks)


def _same_process(one: Crash, other: Crash) -> bool:
    """Printed by one process: the same source and the same named rank. Untagged lines (a paste
    without rank prefixes, torchrun's plain output) cannot be told apart, so they are not."""
    return one.source == other.source and one.rank is not None and one.rank == other.rank


def _communication_only(crash: Crash, evidence) -> bool:
    """A crash that reports only a failed or timed-out collective (no error of its own)."""
    if crash.kind == "nccl-watchdog":
        return True
    if evidence is None:
        evidence = CrashView.of(crash).evidence
        if evidence is None:
            return False
    families = evidence.message_families - {"timeout"}
    return bool(families) and families <= {"comm-failure"}


def _confidence(rule: Rule | None, match: RuleMatch, view: CrashView, ranked) -> float:
    """How sure: the kind of rule that decided, the independent evidence that agrees, the
    strongest rival of another category."""
    if rule is None:
        return 0.0
    if match.precise:
        base = 0.9
    elif rule.conditions.messages or rule.conditions.inner_message or rule.conditions.wrapper:
        base = 0.7
    elif rule.conditions.family_only:
        base = 0.5
    else:
        base = 0.4  # frames, kinds or exit codes alone
    agreeing = {item.kind for item in view.evidence.support(match.category)} if view.evidence else set()
    score = base + 0.06 * len(agreeing)
    rival = next((other_rule for _, other_rule in ranked[1:] if other_rule.category != match.category), None)
    if rival is not None and rule.priority - rival.priority < 10:
        score -= 0.15
    return round(max(0.05, min(0.99, score)), 2)


def _outvoted(winner: Rule | None, rule: Rule, match: RuleMatch) -> Outvoted:
    if winner is None:
        reason = "lower rank"
    elif rule.priority < winner.priority:
        reason = f"priority {rule.priority} < {winner.priority} of {winner.id}"
    else:
        reason = f"less specific or later than {winner.id}"
    return Outvoted(rule.id, rule.category, rule.priority, reason)


def _unique(outvoted: tuple[Outvoted, ...]) -> tuple[Outvoted, ...]:
    seen: set[str] = set()
    kept = []
    for item in outvoted:
        if item.category not in seen:
            seen.add(item.category)
            kept.append(item)
    return tuple(kept)


def _unknown(signature: Signature) -> RuleMatch:
    return RuleMatch(
        rule_id="", category=UNKNOWN_CATEGORY, title="No rule matched",
        diagnosis=(f"no rule recognises {signature.exception or 'this failure'}: "
                   f"{signature.normalized_message[:200]}"),
        remediations=(), params=dict(signature.params),
    )
