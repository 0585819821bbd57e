"""Golden against fresh output, token by token: divergence, emptiness, degenerate repetition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

DIFF_CONTEXT = 4  # tokens shown on each side of the first divergence


@dataclass(frozen=True)
class Comparison:
    """How one output compares with its golden; `problem` is None when it passes."""

    problem: str | None  # "empty" | "diverged" | "repetition"
    compared_as: str  # "ids" (token ids from the service) or "words" (text split on whitespace)
    length: int  # tokens in the output
    golden_length: int
    divergent: int = 0  # positions that differ, a length difference included
    first_divergence: int | None = None  # 0-based position of the first difference
    repeated: str | None = None  # the token repeated past the limit
    diff: tuple[str, ...] = ()  # golden/output lines around the first divergence

    def describe(self) -> str:
        if self.problem == "empty":
            return "empty output"
        if self.problem == "repetition":
            return f"degenerate repetition of {self.repeated!r}"
        if self.first_divergence is None:
            return f"{self.length} {self.compared_as} match the golden"
        return (f"output diverged at token {self.first_divergence + 1} of {self.golden_length} "
                f"({self.divergent} differ)")


def output_tokens(ids: Sequence[int] | None, text: str | None) -> tuple[str, list[Any]]:
    """("ids", ids) when the service returned token ids, else ("words", text split on whitespace)."""
    if ids:
        return "ids", list(ids)
    return "words", (text or "").split()


def compare(golden_ids: Sequence[int], golden_text: str, ids: Sequence[int] | None,
            text: str | None, max_divergent: int, repetition_limit: int) -> Comparison:
    """Compare as ids when both sides have them (exact), else as whitespace-split words."""
    if golden_ids and ids:
        kind, expected, got = "ids", list(golden_ids), list(ids)
    else:
        kind, expected, got = "words", golden_text.split(), (text or "").split()
    if not got:
        return Comparison("empty", kind, 0, len(expected))
    repeated = degenerate_repetition(got, repetition_limit)
    first, divergent = divergence(expected, got)
    diff = render_diff(expected, got, first) if first is not None else ()
    problem = None
    if divergent > max_divergent:
        problem = "diverged"
    elif repeated is not None:
        problem = "repetition"
    return Comparison(problem, kind, len(got), len(expected), divergent, first,
                      None if repeated is None else str(repeated), diff)


def divergence(expected: Sequence[Any], got: Sequence[Any]) -> tuple[int | None, int]:
    """(first differing position or None, number of differing positions incl. extra/missing)."""
    differing = [i for i in range(max(len(expected), len(got)))
                 if i >= len(expected) or i >= len(got) or expected[i] != got[i]]
    return (differing[0] if differing else None), len(differing)


def degenerate_repetition(tokens: Sequence[Any], limit: int) -> Any | None:
    """The token repeated `limit` or more times in a row, else None (limit < 2 disables)."""
    if limit < 2:
        return None
    run, previous = 0, object()
    for token in tokens:
        run = run + 1 if token == previous else 1
        previous = token
        if run >= limit:
            return token
    return None


def render_diff(expected: Sequence[Any], got: Sequence[Any], at: int) -> tuple[str, ...]:
    """Two lines around position `at`, the first differing token in brackets on each."""
    start = max(0, at - DIFF_CONTEXT)
    return (f"golden: {_window(expected, start, at)}", f"output: {_window(got, start, at)}")


def _window(tokens: Sequence[Any], start: int, at: int) -> str:
    shown = []
    for i in range(start, min(len(tokens), at + DIFF_CONTEXT + 1)):
        shown.append(f"[{tokens[i]}]" if i == at else str(tokens[i]))
    if at >= len(tokens):
        shown.append("[<end>]")
    prefix = "… " if start > 0 else ""
    suffix = " …" if at + DIFF_CONTEXT + 1 < len(tokens) else ""
    return f"{prefix}{' '.join(shown)}{suffix}"
