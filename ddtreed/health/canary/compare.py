"""Golden against fresh output: agreement over a leading window, emptiness, degenerate repetition.

Why a window and not every token: real SGLang 0.5.16 does not reproduce its own greedy output
(docs/canary.md, "What the real server taught"): the same prompt, greedy, on the same healthy server
diverged at token 10 of 32 (radix-cache reuse) and at tokens 38-69 of 256 (NGRAM history, batch
shape). What a broken verify width emits is wrong from the first verify step, so the leading
tokens decide; past them an output must still be non-degenerate.
"""

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
    window: int = 0  # leading tokens that had to agree (the whole golden when exact)

    @property
    def varied(self) -> bool:
        """Passed, but differs from the golden past the agreement window (run-to-run variation)."""
        return self.problem is None and self.first_divergence is not None

    def describe(self) -> str:
        if self.problem == "empty":
            return "empty output"
        if self.problem == "repetition":
            return f"degenerate repetition of {self.repeated!r}"
        if self.first_divergence is None:
            return f"{self.length} {self.compared_as} match the golden"
        if self.varied:
            return (f"agrees with the golden for {self.first_divergence} {self.compared_as} "
                    f"({self.window} required), varies from token {self.first_divergence + 1}")
        return (f"output diverged at token {self.first_divergence + 1} of {self.golden_length} "
                f"({self.divergent} differ)")


def output_tokens(ids: Sequence[int] | None, text: str | None) -> tuple[str, list[Any]]:
    """("ids", ids) when the service returned token ids, else ("words", text split on whitespace)."""
    if ids:
        return "ids", list(ids)
    return "words", (text or "").split()


def compare(golden_ids: Sequence[int], golden_text: str, ids: Sequence[int] | None,
            text: str | None, max_divergent: int, repetition_limit: int,
            loop: "LoopLimit | None" = None, agree_tokens: int = 0) -> Comparison:
    """Compare as ids when both sides have them, else as whitespace-split words.

    The first `agree_tokens` tokens (0: all of them, the exact test) must match but for
    `max_divergent` positions (a missing token counts); past them an output may differ, but not
    be degenerate. An output identical to its golden is never degenerate: the golden passed the
    same test."""
    if golden_ids and ids:
        kind, expected, got = "ids", list(golden_ids), list(ids)
    else:
        kind, expected, got = "words", golden_text.split(), (text or "").split()
    window = min(agree_tokens, len(expected)) if agree_tokens > 0 else len(expected)
    if not got:
        return Comparison("empty", kind, 0, len(expected), window=window)
    first, divergent = divergence(expected, got)
    if agree_tokens <= 0:
        in_window = divergent  # exact: a length difference counts too
    else:
        in_window = divergence(expected[:window], got[:window])[1]
    repeated = None
    if divergent:
        repeated = degenerate_repetition(got, repetition_limit)
        if repeated is None and loop is not None:
            found = degenerate_loop(got, loop)
            if found is None and first:  # what follows the divergence: agreed, then stuck
                found = degenerate_loop(got[first:], loop)
            repeated = None if found is None else " ".join(map(str, found))
    diff = render_diff(expected, got, first) if first is not None else ()
    problem = None
    if in_window > max_divergent:
        problem = "diverged"
    elif repeated is not None:
        problem = "repetition"
    return Comparison(problem, kind, len(got), len(expected), divergent, first,
                      None if repeated is None else str(repeated), diff, window)


def best_comparison(found: Sequence[Comparison]) -> Comparison:
    """The comparison against the golden variant that fits best: a pass before a failure, then
    the longest agreement (an exact match has agreement `inf`)."""
    def rank(comparison: Comparison) -> tuple[bool, float]:
        agreed = float("inf") if comparison.first_divergence is None else comparison.first_divergence
        return comparison.problem is None, agreed
    return max(found, key=rank)


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


@dataclass(frozen=True)
class LoopLimit:
    """Degenerate output: from near its start to its end, one short loop.

    Why not a run length: real SGLang 0.5.16's legitimate greedy outputs repeat a token 14 times in
    a 32-token canary answer and 57 times in a 256-token one (a random model; real models repeat
    in lists and code too), so any run limit either passes garbage or fails healthy services.
    What broken numerics produce instead (NaN logits -> one argmax forever, a stuck cache -> the
    same few tokens) is an output that one loop of at most `max_period` tokens covers almost
    entirely. The recorded real outputs are covered at most 62% by such a loop (the share of an
    output whose tail repeats with period <= 4); garbage is covered 100%.
    """

    share: float = 0.9  # at least this share of the output is one loop ...
    max_period: int = 4  # ... of at most this many tokens
    min_tokens: int = 16  # shorter outputs are not judged (a 4-token loop twice is no evidence)


def degenerate_loop(tokens: Sequence[Any], limit: LoopLimit) -> tuple[Any, ...] | None:
    """The loop that covers at least `limit.share` of the output up to its end, else None."""
    n = len(tokens)
    if n < max(limit.min_tokens, 2) or limit.share <= 0:
        return None
    for period in range(1, max(1, limit.max_period) + 1):
        if period * 2 > n:
            break
        start = n - period  # walk back while the output keeps repeating with this period
        while start > 0 and tokens[start - 1] == tokens[start - 1 + period]:
            start -= 1
        if (n - start) / n >= limit.share:
            return tuple(tokens[start:start + period])
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
