"""The SGLang log line grammar: prefixes, rank tags, traceback pieces and crash announcements."""

from __future__ import annotations

import re

# `[2026-07-28 10:00:00 DP0 TP3] body`, milliseconds with SGLANG_LOG_MS=1, optionally behind a
# Ray actor prefix `(SGLangHttpServer pid=41122) ` (the prefix repeats on every line).
_ACTOR = re.compile(r"\((?:[^()]*? )?pid=\d+[^()]*\) ")
_PREFIX = re.compile(
    r"\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,6})?)"
    r"(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] ?"
)

TRACEBACK_HEADER = "Traceback (most recent call last):"
CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
FRAME = re.compile(r'\s*File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<function>.*))?$')
PYSPY_FRAME = re.compile(r"\s+(?P<function>\S+) \((?P<file>[^()]+?):(?P<line>\d+)\)$")
# `ValueError: msg`, `zmq.error.ZMQError: msg`, `AssertionError` (inside a traceback any
# unindented line is the exception line; outside one only an Error/Exception name counts).
EXCEPTION = re.compile(r"(?P<type>[A-Za-z_][\w.]*(?:::\w+)*)(?::(?: (?P<message>.*))?)?$")
STANDALONE_EXCEPTION = re.compile(
    r"(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): (?P<message>.+)$"
)
WRAPPER = re.compile(r"(?P<wrapper>Capture (?:[\w ]+ )?cuda graph failed):\s*(?P<inner>.*)$",
                     re.IGNORECASE)
INNER_TYPE = re.compile(r"(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)):\s*(?P<message>.*)$")
WATCHDOG_TIMEOUT = re.compile(r"[Ww]atchdog timeout \(")
CHILD_DEATHS = (
    re.compile(r"Subprocess (?P<name>\S+) \(pid=(?P<pid>\d+)\) crashed with exit code (?P<code>-?\d+)"),
    re.compile(r"Rank (?P<name>\d+) scheduler died during initialization \(exit code: (?P<code>-?\d+)\)"),
)
SIGQUIT = re.compile(r"sigquit", re.IGNORECASE)
TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
WHAT = re.compile(r"\s*what\(\):\s+(?P<message>.*)$")
TORCH_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:")
NCCL_TIMEOUT = re.compile(r"\] (?P<message>\[(?:PG [^\]]*)?Rank \d+\] Watchdog caught collective operation timeout.*)$")
DEVICE_ASSERT = "Assertion `"
CONTEXT_WORDS = ("rror", "ailed", "arning", "xception")

# Needles whose presence in a chunk means a tagged line may matter; untagged lines are found
# separately (`UNTAGGED`). Long needles: CPython's substring search skips faster with them.
TAGGED_NEEDLES = (
    "Traceback (most recent call last):",  # every traceback header
    "It usually means",  # both SIGQUIT wordings of the main process
    "crashed with exit code",
    "died during initialization (exit code:",
    "atchdog timeout (self.watchdog_timeout=",
)
# Letters that decode/prefill progress lines and their `[2026-… DP0 TP3]` prefix never hold: for
# each needle the first of them it contains (its own first letter failing that). A chunk without
# any sentinel cannot hold a needle, and one memchr per sentinel is ~30x cheaper than the needles.
_RARE = "mxzjqvyIK"
NEEDLE_SENTINELS = tuple(sorted({next((c for c in _RARE if c in needle), needle[0])
                                 for needle in TAGGED_NEEDLES}))
# A line that does not start like `[2026-…`: continuation lines, frames, device asserts, C++
# aborts, NCCL `[rank3]:` lines, Ray-prefixed lines.
UNTAGGED = re.compile(r"\n(?!\[\d)")


def parse_line(text: str) -> tuple[str | None, str | None, str]:
    """`(timestamp, rank, body)`; timestamp and rank are None for continuation lines."""
    actor = _ACTOR.match(text)
    if actor:
        text = text[actor.end():]
    prefix = _PREFIX.match(text)
    if not prefix:
        return None, None, text
    tags = prefix.group("tags").strip()
    return prefix.group("ts"), tags or None, text[prefix.end():]


def split_exception(line: str, strict: bool) -> tuple[str | None, str] | None:
    """`(type, first message line)` of an exception line, or None when it is not one."""
    match = (STANDALONE_EXCEPTION if strict else EXCEPTION).match(line)
    if not match:
        return None if strict else (None, line)
    return match.group("type"), match.group("message") or ""


def split_wrapper(message: str) -> tuple[str | None, str | None, str | None]:
    """`(wrapper, inner_exception, inner_message)` for `Capture cuda graph failed: <inner>`."""
    match = WRAPPER.match(message)
    if not match:
        return None, None, None
    inner = match.group("inner")
    typed = INNER_TYPE.match(inner)
    if typed:
        return match.group("wrapper"), typed.group("type"), typed.group("message")
    return match.group("wrapper"), None, inner
