"""Records to JSON columns and back, and epoch seconds to ISO-8601 UTC text.

Everything the store writes passes through here, so this is where secrets are redacted
(`--api-key X`, `HF_TOKEN`, `api_key='…'` in a printed ServerArgs): the database, `incidents
--json` and support bundles never hold them.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from ..records import Crash, Frame, ServiceContext
from ..ops.redact import redact, redact_text
from .reads import loads  # noqa: F401 - JSON columns back: the readers' one function

# A device-side assert floods thousands of identical lines; the head and tail tell the story.
EXCERPT_HEAD_LINES = 60
EXCERPT_TAIL_LINES = 60
MAX_FRAMES = 80
# Crashes stored per incident: every rank of a large TP×DP job, not all of a flood's repeats.
MAX_STORED_CRASHES = 256


class Redacted(str):
    """JSON text from `dumps`: every string in it (keys too) already went through `redact`."""


def dumps(value: Any) -> str | None:
    if value is None:
        return None
    return Redacted(json.dumps(redact(_plain(value)), sort_keys=True, default=str))


def text(value: str | None) -> str | None:
    """A free-text column (a step's detail, a message, an outcome) with its secrets redacted."""
    return redact_text(value) if isinstance(value, str) and type(value) is not Redacted else value


def clean_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row about to be written: JSON columns (`dumps`) are already redacted, text columns are now.

    (The JSON columns were redacted a second time as text: ~1 ms of the 1.5 ms an incident row
    cost, the three free-text patterns over a 4.5 KB tracebacks column, on the way to the
    incident row. Element by element is the stronger pass: a quoted `api_key="…"` inside a
    string is escaped in the JSON text, where the text patterns no longer see it.)"""
    return {key: text(value) if isinstance(value, str) else value for key, value in row.items()}


def _key(key: Any) -> str:
    """A mapping key as text, with the free-text redaction (`redact` looks only at values)."""
    return redact_text(str(key))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """Dataclasses, mappings and tuples as JSON-ready dicts and lists."""
    kind = type(value)
    if kind in _SCALARS:  # most of a crash record: returned before the dataclass and ABC checks
        return value
    if kind is dict:
        return {_key(key): _plain(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {_key(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(item) for item in value]
    return value


def crash_records(crashes: Iterable[Crash]) -> list[dict[str, Any]]:
    """The `tracebacks` column: the first MAX_STORED_CRASHES crashes (a flood repeats itself)."""
    return [crash_record(crash) for crash in list(crashes)[:MAX_STORED_CRASHES]]


def crash_record(crash: Crash) -> dict[str, Any]:
    """One rank's crash for the `tracebacks` column: the parsed fields and a trimmed excerpt."""
    return {
        "kind": crash.kind,
        "exception": crash.exception,
        "message": crash.message,
        "rank": crash.rank,
        "prefix": crash.prefix,
        "wrapper": crash.wrapper,
        "inner_exception": crash.inner_exception,
        "inner_message": crash.inner_message,
        "exit_code": crash.exit_code,
        "frames": [dataclasses.asdict(frame) for frame in crash.frames[-MAX_FRAMES:]],
        "frames_dropped": max(0, len(crash.frames) - MAX_FRAMES),
        "chained": [crash_record(cause) for cause in crash.chained],
        "source": crash.source,
        "first_line": crash.first_line,
        "last_line": crash.last_line,
        "excerpt": trim_lines(crash.excerpt),
    }


MAX_REBUILT_CHARS = 65536  # a rebuilt message or line: what any rule needs, not a hostile row's megabytes
MAX_REBUILT_CHAIN = 8  # causes kept under a rebuilt crash (a live chain is a few deep)


def crash_from_record(record: Mapping[str, Any], depth: int = 0) -> Crash:
    """A stored crash back (the inverse of `crash_record`, less what it does not keep: the lines
    printed before the crash, an excerpt's middle, frames beyond MAX_FRAMES), so a crash recorded
    by a daemon that died before its diagnosis can be diagnosed by the next one. A field the
    record lacks, or holds in another shape, is left empty rather than guessed; a record larger
    than any this version writes (a hostile or corrupted row) is cut to what it would have kept:
    MAX_FRAMES frames, the excerpt's head and tail, MAX_REBUILT_CHAIN causes, MAX_REBUILT_CHARS
    characters of text."""
    def string(key: str) -> str | None:
        value = record.get(key)
        return value[:MAX_REBUILT_CHARS] if isinstance(value, str) else None

    listed = record.get("frames")
    frames = []
    for frame in (listed[-MAX_FRAMES:] if isinstance(listed, list) else ()):
        if isinstance(frame, Mapping) and isinstance(frame.get("file"), str):
            line = frame.get("line")
            function = frame.get("function")
            frames.append(Frame(file=frame["file"][:MAX_REBUILT_CHARS], line=line if isinstance(line, int) else None,
                                function=function[:MAX_REBUILT_CHARS] if isinstance(function, str) else ""))
    chained = record.get("chained") if depth < MAX_REBUILT_CHAIN else None
    excerpt = record.get("excerpt")
    excerpt = trim_lines(excerpt) if isinstance(excerpt, list) else []
    exit_code = record.get("exit_code")
    return Crash(
        kind=string("kind") or "traceback", exception=string("exception"), message=string("message") or "",
        frames=tuple(frames), rank=string("rank"), prefix=string("prefix"), wrapper=string("wrapper"),
        inner_exception=string("inner_exception"), inner_message=string("inner_message"),
        chained=tuple(crash_from_record(cause, depth + 1) for cause in
                      (chained[:MAX_REBUILT_CHAIN] if isinstance(chained, list) else ()) if isinstance(cause, Mapping)),
        exit_code=exit_code if isinstance(exit_code, int) else None, source=string("source") or "",
        first_line=record.get("first_line") if isinstance(record.get("first_line"), int) else 0,
        last_line=record.get("last_line") if isinstance(record.get("last_line"), int) else 0,
        excerpt=tuple(line[:MAX_REBUILT_CHARS] for line in excerpt if isinstance(line, str)))


def context_from_record(record: Any) -> ServiceContext | None:
    """The launch context an incident was recorded with (its `context` column) back, None when the
    column holds none or not one this version can read. Fields this version does not know are
    dropped; a field of the wrong type makes the whole record unreadable (None): a verdict under a
    half-read context would be worse than one under none."""
    if not isinstance(record, Mapping) or not record:
        return None
    known = {field.name: field for field in dataclasses.fields(ServiceContext)}
    values: dict[str, Any] = {}
    for name, value in record.items():
        if name not in known:
            continue
        if name == "argv":
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                return None
            value = tuple(value)
        elif name in ("ddtree_options", "flags"):
            if not isinstance(value, Mapping):
                return None
        elif value is not None and not isinstance(value, (str, int, float, bool)):
            return None
        values[name] = value
    try:
        return ServiceContext(**values)
    except (TypeError, ValueError):
        return None


def trim_lines(lines: Iterable[str]) -> list[str]:
    lines = list(lines)
    if len(lines) <= EXCERPT_HEAD_LINES + EXCERPT_TAIL_LINES + 1:
        return lines
    hidden = len(lines) - EXCERPT_HEAD_LINES - EXCERPT_TAIL_LINES
    return (lines[:EXCERPT_HEAD_LINES] + [f"... {hidden} lines not kept ..."]
            + lines[-EXCERPT_TAIL_LINES:])


def ranks_of(crashes: Iterable[Crash]) -> list[str]:
    seen: list[str] = []
    for crash in crashes:
        if crash.rank and crash.rank not in seen:
            seen.append(crash.rank)
    return seen


def iso(epoch: float | None) -> str | None:
    """Epoch seconds as `2025-05-01T12:00:00.123Z`; None stays None."""
    if epoch is None:
        return None
    text = datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
