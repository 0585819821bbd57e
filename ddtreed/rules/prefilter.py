"""Which rules can still match a crash, from one filtered pass of every message pattern over
each of its error messages.

Nearly every rule names its error by message patterns (`[rule.match] message`), and a rule whose
patterns match none of the crash's errors fails `Conditions._error` whatever else it says. The
daemon used to find that out rule by rule: a `search` per pattern per error, ~120 candidate rules
for a `RuntimeError`, most of the diagnosis's time. `MessagePrefilter` hands every distinct message
pattern of the rule set to RE2's FilteredRE2 (`re2.Filter`): it extracts the literal strings each
pattern cannot match without ("atoms"), finds the atoms present in a text with one automaton over
it, and runs only the patterns whose atoms are there; `Match` returns the patterns that really
match (each by its own RE2 search), so the verdict per pattern is its own `search`'s. A rule stays a
candidate only when one of its patterns matched an error its `exceptions` accept: exactly the test
`_error` makes, so the rules dropped are rules whose evaluation would have returned no match. The
survivors are evaluated in full as before (captured parameters, `when`, the templates); rules
without message patterns are never dropped.

(A single `re2.Set` of all the patterns was tried first: its many-match automaton over ~200
patterns with counted repeats thrashes, up to a second per 700-byte message on this box.)

Without RE2, or with a pattern the filter refuses, the filter is off and every candidate is
evaluated. `tests/test_rules_prefilter.py` checks the equivalence: each pattern's verdict through
the filter equals its own `search` on every error text of the corpus and the phrasing tests, and the
diagnoses are identical with and without the filter.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from .model import CrashView, Rule
from .regex import _options, _re2



class MessagePrefilter:
    """Rule ids that may match a crash, by one filtered match per distinct error message."""

    def __init__(self, rules: Iterable[Rule]):
        self.enabled = False
        self._users: dict[int, list[tuple[str, frozenset[str]]]] = {}  # pattern -> (rule id, exceptions)
        self.filtered: frozenset[str] = frozenset()  # rules that name message patterns
        self.patterns: list = []  # the rules' compiled message patterns, by their index in the filter
        if _re2 is None:  # pragma: no cover - google-re2 is a declared dependency
            return
        options = _options()
        matcher = _re2.Filter()
        try:
            index_of: dict[str, int] = {}
            filtered = set()
            holders: list = []  # (index, pattern): every rule pattern object of each text
            for rule in rules:
                messages = rule.conditions.messages
                if not messages:
                    continue
                filtered.add(rule.id)
                for pattern in messages:
                    text = pattern.pattern
                    if text not in index_of:
                        index_of[text] = matcher.Add(text, options)
                        self.patterns.append(pattern)
                    holders.append((index_of[text], pattern))
                    self._users.setdefault(index_of[text], []).append(
                        (rule.id, frozenset(rule.conditions.exceptions)))
            if not index_of:
                return
            matcher.Compile()
        except _re2.error:
            self._users, self.patterns = {}, []
            return
        # The filter compiled each message pattern (its `Match` runs them): the rules search with
        # those programs rather than with a second compile of the same text each.
        for index, pattern in holders:
            adopt = getattr(pattern, "adopt", None)
            if adopt is not None:
                adopt(matcher.re(index))
        self._matcher = matcher
        self.filtered = frozenset(filtered)
        self.enabled = True

    def matching(self, text: str) -> Sequence[int]:
        """Indices of the patterns whose own search finds `text`."""
        return self._matcher.Match(text) or ()

    def possible(self, view: CrashView) -> set[str] | None:
        """Ids of the rules with message patterns that one of the view's errors satisfies (its
        message matches one of the rule's patterns, its type is one the rule names, if any);
        None when the filter is off: then every rule is possible."""
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
        return found
