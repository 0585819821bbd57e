"""Rule regexes run in linear time: compiled by RE2, and linted for shapes that would not be.

RE2 (google-re2) guarantees time linear in the text for every pattern it accepts, so a 64 KB
crash message costs a rule what a short one costs, times its length. It refuses what only a
backtracking engine can do (look-arounds, back-references); `rules check` names the field. The
lint also rejects nested quantifiers such as `(a+)+`: harmless under RE2, but the shape that
hangs every backtracking engine, so a rule that carries one is a rule copied somewhere unsafe.
"""

from __future__ import annotations

import re

try:  # pragma: no cover - the import itself is what is being chosen
    import re2 as _re2
except ImportError:  # pragma: no cover - google-re2 is a declared dependency
    _re2 = None

try:
    from re import _constants as _sre_constants
    from re import _parser as _sre_parse  # Python 3.11+
except ImportError:  # pragma: no cover
    import sre_constants as _sre_constants  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MAXREPEAT = _sre_constants.MAXREPEAT
_REPEATS = (_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT)
_POSSESSIVE = getattr(_sre_constants, "POSSESSIVE_REPEAT", None)
if _POSSESSIVE is not None:
    _REPEATS = _REPEATS + (_POSSESSIVE,)
ENGINE = "re2" if _re2 is not None else "re"


class PatternError(ValueError):
    """A rule pattern that is invalid, or not guaranteed to run in linear time."""


def _options():
    options = _re2.Options()
    options.log_errors = False  # RE2 would print its own parse errors on stderr
    return options


def lint(pattern: str) -> str | None:
    """Why `pattern` is not allowed in a rule (one sentence), or None when it is fine."""
    try:
        parsed = _sre_parse.parse(pattern)
    except re.error as error:
        return f"bad regular expression {pattern!r}: {error}"
    nested = _nested_quantifier(list(parsed), False)
    if nested:
        return (f"pattern {pattern!r} nests a quantifier inside a repeated group ({nested}): "
                f"it can take exponential time on a backtracking engine; rewrite it without "
                f"the outer repetition")
    return None


def _nested_quantifier(items: list, inside_repeat: bool) -> str | None:
    for op, arguments in items:
        if op in _REPEATS:
            _low, high, body = arguments
            repeats = high == MAXREPEAT or high > 1
            if repeats and inside_repeat:
                return "a repetition inside a repetition"
            found = _nested_quantifier(list(body), inside_repeat or repeats)
            if found:
                return found
        elif op == _sre_constants.SUBPATTERN:
            found = _nested_quantifier(list(arguments[-1]), inside_repeat)
            if found:
                return found
        elif op == _sre_constants.BRANCH:
            for branch in arguments[1]:
                found = _nested_quantifier(list(branch), inside_repeat)
                if found:
                    return found
        elif op in (_sre_constants.ASSERT, _sre_constants.ASSERT_NOT):
            found = _nested_quantifier(list(arguments[1]), inside_repeat)
            if found:
                return found
    return None


def compile_rule_pattern(pattern: str):
    """A compiled pattern (RE2 when available) with `.search`, `.pattern`, `.groupindex`."""
    problem = lint(pattern)
    if problem:
        raise PatternError(problem)
    return _program(pattern, cached=True)


def _program(pattern: str, cached: bool = False):
    if _re2 is None:  # pragma: no cover - only without the declared dependency
        return re.compile(pattern)
    try:
        program = _re2.compile(pattern, _options())
    except _re2.error as error:
        detail = error.args[0].decode("utf-8", "replace") if error.args and isinstance(
            error.args[0], bytes) else str(error)
        raise PatternError(
            f"pattern {pattern!r} is not supported by the linear-time engine (RE2): {detail} "
            f"(look-arounds and back-references are not allowed in rules)") from None
    if not cached:
        # re2.compile keeps each program it makes in its own cache (an lru_cache of 128): a
        # program checked and thrown away, or one a RulePattern holds, would also stay there.
        # Nothing in ddtreed compiles a pattern twice expecting that cache (every program is
        # held where it is used), so dropping it costs no recompile.
        _re2.purge()
    return program


def build_reverse(program) -> bool:
    """Build `program`'s reverse program now (RE2; False for another engine). RE2 builds it on a
    pattern's first match of an unanchored search, to find where that match began: for a large
    alternation that is most of the first match's cost (0.4 ms for the shape-mismatch family),
    paid once per pattern for the daemon's life, and its size is about the forward program's."""
    size = getattr(program, "reverseprogramsize", None)  # the property compiles it on first read
    return isinstance(size, int) and size > 0


class RulePattern:
    """A rule's pattern: its text and named groups from the start, its program on first use.

    A rule set holds ~400 distinct patterns and an RE2 program costs 4 – 25 KB, most of them
    never run by a given daemon (a crash meets a handful of candidate rules). The loader checks
    each pattern in full (`rule_pattern`), then keeps only the text; `search` compiles it the
    first time it is needed (the message prefilter keeps its own lean copies, for atoms only)."""

    __slots__ = ("pattern", "groupindex", "_program", "_warm")

    def __init__(self, pattern: str, groupindex: dict[str, int]):
        self.pattern = pattern
        self.groupindex = groupindex
        self._program = None
        self._warm = False

    @property
    def program(self):
        """The compiled pattern (RE2 when available), built on first use."""
        program = self._program
        if program is None:
            program = self._program = _program(self.pattern)
        return program

    @property
    def compiled(self) -> bool:
        return self._program is not None

    def compile_now(self) -> None:
        """Build the program now rather than at the first search."""
        if self._program is None:
            self._program = _program(self.pattern)

    def search(self, text: str):
        program = self._program
        if program is None:
            program = self.program
        return program.search(text)

    @property
    def warm(self) -> bool:
        """`warm_on` ran: the program, its reverse program and its automaton for one text exist."""
        return self._warm

    def warm_on(self, text: str) -> bool:
        """Compile, build the reverse program and search `text` once, now rather than at the
        first crash that needs them; the result is thrown away (a search changes nothing but
        RE2's caches). True when the reverse program was built (RE2 only)."""
        self.search(text)
        built = build_reverse(self.program)
        self._warm = True
        return built

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RulePattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"RulePattern({self.pattern!r})"


def rule_pattern(pattern: str) -> RulePattern:
    """`pattern` checked as `compile_rule_pattern` checks it (lint, then a full RE2 compile, whose
    program is dropped), kept uncompiled until used; PatternError naming the problem."""
    problem = lint(pattern)
    if problem:
        raise PatternError(problem)
    checked = _program(pattern)
    return RulePattern(pattern, dict(checked.groupindex))
