"""Which rules can still match a crash, from one filtered pass of every message pattern over
each of its error messages.

Nearly every rule names its error by message patterns (`[rule.match] message`), and a rule whose
patterns match none of the crash's errors fails `Conditions._error` whatever else it says. The
daemon used to find that out rule by rule: a `search` per pattern per error, ~120 candidate rules
for a `RuntimeError`, most of the diagnosis's time. `MessagePrefilter` hands every distinct message
pattern of the rule set to RE2's FilteredRE2 (`re2.Filter`): it extracts the literal strings each
pattern cannot match without ("atoms") and finds the atoms present in a text with one automaton
over it. `Match(text, potential=True)` returns the patterns whose atoms are all there (and the few
patterns without atoms): a superset of the patterns that match, since a pattern cannot match
without its atoms. A rule stays a candidate when one of its patterns is such a potential match on
an error its `exceptions` accept; the rules dropped are rules none of whose patterns can match an
accepted error, so `_error` would have returned no match for them. The survivors are evaluated in
full as before: their own `search` decides (captured parameters, `when`, the templates); rules
without message patterns are never dropped.

The filter's own programs never run (only its atoms are used), so they are built with a small
memory budget (`FILTER_MAX_MEM`): RE2 then skips the one-pass tables and DFA room it would keep
for matching, ~2 MiB over the shipped rules. The rules' own programs are compiled in full, when a
crash first needs them (`regex.RulePattern`); the patterns without atoms, potential for every
crash, are compiled with the filter.

(A single `re2.Set` of all the patterns was tried first: its many-match automaton over ~200
patterns with counted repeats thrashes, up to a second per 700-byte message on this box.)

Without RE2, or with a pattern the filter refuses, the filter is off and every candidate is
evaluated. `tests/test_rules_prefilter.py` checks the equivalence: the filter never leaves out a
pattern whose own `search` matches, on every error text of the corpus and the phrasing tests, and
the diagnoses are identical with and without the filter.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from .model import CrashView, Rule
from .regex import _options, _re2

# The filter's copies of the patterns are only read for their atoms, never run: a budget this small
# leaves out RE2's matching tables; a pattern too large for it is added with the default budget.
FILTER_MAX_MEM = 256 << 10


def _add(matcher, text: str, small) -> int:
    try:
        return matcher.Add(text, small)
    except _re2.error:
        return matcher.Add(text, _options())


class MessagePrefilter:
    """Rule ids that may match a crash, by one filtered match per distinct error message."""

    def __init__(self, rules: Iterable[Rule]):
        self.enabled = False
        self._users: dict[int, list[tuple[str, frozenset[str]]]] = {}  # pattern -> (rule id, exceptions)
        self.filtered: frozenset[str] = frozenset()  # rules that name message patterns
        self.patterns: list = []  # the rules' message patterns, by their index in the filter
        self.catch_alls: frozenset[str] = frozenset()  # texts of the patterns without atoms
        if _re2 is None:  # pragma: no cover - google-re2 is a declared dependency
            return
        small = _options()
        small.max_mem = FILTER_MAX_MEM
        matcher = _re2.Filter()
        try:
            index_of: dict[str, int] = {}
            filtered = set()
            for rule in rules:
                messages = rule.conditions.messages
                if not messages:
                    continue
                filtered.add(rule.id)
                for pattern in messages:
                    text = pattern.pattern
                    if text not in index_of:
                        index_of[text] = _add(matcher, text, small)
                        self.patterns.append(pattern)
                    self._users.setdefault(index_of[text], []).append(
                        (rule.id, frozenset(rule.conditions.exceptions)))
            if not index_of:
                return
            matcher.Compile()
        except _re2.error:
            self._users, self.patterns = {}, []
            return
        self._matcher = matcher
        self.filtered = frozenset(filtered)
        self.enabled = True
        catch_alls = set()
        for index in self.matching(""):  # no atoms: potential for every crash, so compiled now
            self.patterns[index].compile_now()
            catch_alls.add(self.patterns[index].pattern)
        self.catch_alls = frozenset(catch_alls)

    def matching(self, text: str) -> Sequence[int]:
        """Indices of the patterns that may match `text`: every pattern whose own search finds
        it is among them (and a few that do not)."""
        return self._matcher.Match(text, potential=True) or ()

    def possible(self, view: CrashView) -> set[str] | None:
        """Ids of the rules with message patterns that one of the view's errors satisfies (its
        message matches one of the rule's patterns, its type is one the rule names, if any);
        None when the filter is off: then every rule is possible."""
        found = self.narrowed(view)
        return found[0] if found is not None else None

    def narrowed(self, view: CrashView) -> tuple[set[str], dict[str, frozenset[str]]] | None:
        """`possible(view)`, and per error message the texts of the message patterns that may
        match it (`CrashView.potential`: a candidate rule's other patterns are not searched);
        None when the filter is off."""
        if not self.enabled:
            return None
        found: set[str] = set()
        hits_by_message: dict[str, Sequence[int]] = {}
        for error in view.errors:
            hits = hits_by_message.get(error.message)
            if hits is None:
                hits = hits_by_message[error.message] = self.matching(error.message)
            for index in hits:
                for rule_id, exceptions in self._users.get(index, ()):
                    if not exceptions or error.short in exceptions:
                        found.add(rule_id)
        potential = {message: frozenset(self.patterns[index].pattern for index in hits)
                     for message, hits in hits_by_message.items()}
        return found, potential
