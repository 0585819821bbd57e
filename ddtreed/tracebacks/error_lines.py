"""Crash candidates from a log's error lines outside any traceback, for offline `diagnose` only.

Some failures are stated on one log line and nowhere else: SGLang's disaggregation schedulers log
`Decode transfer failed for request rank=0 … with exception KVTransferError(bootstrap_room=…): …`
(`logger.error` in disaggregation/decode.py, `logger.warning` for the prefill side) and carry on;
Mooncake's transfer engine writes glog records (`E0414 03:56:41.856248 77969 file.cpp:173] …`);
Python's logging and uvicorn print `ERROR:    …` / `… - ERROR - …`. A report made of such lines
has no traceback to assemble. Each error line here becomes a candidate crash (kind `error-line`:
its words, and the exception class it names inline); the rules judge them like any crash, and
the caller uses them only when nothing decisive was assembled.

The live daemon does not use this: an error line without a process death is not a crash there.
Only lines shaped like an error count (an error level, a glog E/F record, a failure that names
its exception, an exception's own `XError: …` line behind a log prefix); a request's HTTP status
line or a warning is never one.
"""

from __future__ import annotations

import re

from ..records import Crash
from . import grammar

MAX_CANDIDATES = 8
MAX_MESSAGE = 1500

# `… transfer failed for request … with exception KVTransferError(bootstrap_room=1): Request … timed out`;
# the exception's text may carry no class (`… with exception PD Disaggregation does NOT support …`).
_WITH_EXCEPTION = re.compile(r"\b(?:[Ff]ail(?:ed|ure)|[Ee]rror)\b[^\n]{0,400}? with exception (?P<rest>\S.*)$")
# A glog record at error or fatal level: Mooncake's `E0414 03:56:41.856248 77969 transfer_metadata.cpp:173] …`,
# torch's `[E1201 10:00:00.000000 ProcessGroupNCCL.cpp:1595] …` and the older `[E ProcessGroupGloo.cpp:138] …`.
_GLOG_ERROR = re.compile(r"\[?[EF]\d{4} \d\d:\d\d:\d\d\.\d+(?:\s+\d+)?\s+[\w.+-]+:\d+\] ?(?P<message>\S.*)$"
                         r"|\[[EF] [\w.+-]+\.\w+:\d+\] ?(?P<old>\S.*)$")
# A logging level word: `ERROR:    [Errno 98] …` (uvicorn), `ERROR:root:…`, `… - ERROR - …`, `[ERROR] …`,
# `| ERROR | …`, `CRITICAL …`. A level word inside the message itself is not one.
_LEVEL = re.compile(r"(?:^|[\s\]|-])(?:\[(?:ERROR|CRITICAL|FATAL)\]"
                    r"|(?:ERROR|CRITICAL|FATAL)(?::[\w.]*:|:|\s+-\s|\s+\|))\s*(?P<message>\S.*)$")
# The exception class a line names inline: `KVTransferError(bootstrap_room=1): message`, `OSError: …`.
_NAMED = re.compile(r"(?<![\w.])(?P<type>(?:[A-Za-z_]\w*\.){0,4}[A-Z]\w*(?:Error|Exception))"
                    r"(?:\([^()\n]{0,200}\))?(?::\s*(?P<message>\S.*))?")
# Lines shaped like an error that are not one: a request's status line (`"POST /v1/… HTTP/1.1" 400`),
# a retry or a fallback that works.
_NOT_A_FAILURE = re.compile(r'"(?:GET|POST|PUT|DELETE|HEAD|PATCH|OPTIONS) [^"]*HTTP/[\d.]+" \d{3}'
                            r"|[Rr]etrying|will retry|[Ff]alling back|is deprecated")
_MARKUP = "*`> "
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


def _body(raw: str) -> tuple[str | None, str]:
    """(rank, text) of a line without ANSI colours, a container's prefix, torchrun's `[rank3]:`,
    SGLang's `[time TP0] ` prefix, nor a reporter's Markdown around it (`**…**`, backticks)."""
    line = grammar.strip_ansi(raw).strip().strip(_MARKUP)
    end = grammar.container_end(line) if line[:1] != "[" else 0
    if end:
        line = line[end:].strip(_MARKUP)
    torchrun = grammar.TORCH_RANK_PREFIX.match(line)  # torchrun's `[rank3]:` before the line
    if torchrun:
        line = line[torchrun.end():]
    _, rank, body = grammar.parse_line(line)
    return rank or (torchrun.group("rank") if torchrun else None), body.strip().rstrip("*`").rstrip()


def error_line(body: str) -> tuple[str | None, str] | None:
    """(exception named inline or None, message) when a line outside a traceback states an error."""
    if _NOT_A_FAILURE.search(body):
        return None
    said = _WITH_EXCEPTION.search(body)
    if said:
        named = _NAMED.match(said.group("rest"))
        # The whole line speaks (`Decode transfer failed for request … with exception …`): its
        # words name what failed, the class inside it names how.
        return (named.group("type") if named else None), body
    glog = _GLOG_ERROR.match(body)
    if glog:
        return None, body  # the record's file name is evidence too (a transport's own source file)
    level = _LEVEL.search(body)
    if level and level.start() < 80:
        message = level.group("message")
        named = _NAMED.search(message)
        return (named.group("type") if named else None), message
    own = _NAMED.match(body)
    if own and own.group("message"):
        # An exception's own line behind a log prefix, its traceback not pasted or not printed
        # (`[2026-… TP0] torch.OutOfMemoryError: CUDA out of memory. …`).
        return own.group("type"), own.group("message")
    return None


def _has_needle(raw: str) -> bool:
    """Could this line be an error line? Cheap, for most of a 100,000-line log is not: an error
    word, a named exception, an error level, or (not on SGLang's own `[2026-…]` lines, which are
    never glog records) a glog E/F record."""
    if "rror" in raw or "RROR" in raw or "xception" in raw or "CRITICAL" in raw or "FATAL" in raw:
        return True
    if raw.startswith("[2"):
        return False
    return "E0" in raw or "E1" in raw or "F0" in raw or "F1" in raw or "[E " in raw or "[F " in raw


def error_line_crashes(lines: list[str], source: str = "<log>",
                       covered: tuple[tuple[int, int], ...] = ()) -> tuple[Crash, ...]:
    """The error lines of a log that lie outside every assembled crash (`covered`: their
    first-last line numbers, 1-based), first first, each distinct error once."""
    found: list[Crash] = []
    seen: set[tuple[str | None, str]] = set()
    for number, raw in enumerate(lines, 1):
        if not _has_needle(raw):
            continue
        if any(first <= number <= last for first, last in covered):
            continue  # already part of an assembled traceback: said once
        rank, body = _body(raw)
        if not body or body.startswith(grammar.TRACEBACK_HEADER):
            continue
        stated = error_line(body)
        if stated is None:
            continue
        exception, message = stated
        key = (exception, _NUMBERS.sub("<n>", message)[:200])  # each rank logs the same failure
        if key in seen:
            continue
        seen.add(key)
        found.append(Crash(kind="error-line", exception=exception, message=message[:MAX_MESSAGE],
                           rank=rank, prefix="error line", source=source, first_line=number,
                           last_line=number, excerpt=(raw,)))
        if len(found) >= MAX_CANDIDATES:
            break
    return tuple(found)
