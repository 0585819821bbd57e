"""structlog setup: JSON lines for journald by default, readable lines on a terminal.

Every line carries an ISO-8601 UTC timestamp, the level and the event name; inside an incident
(`bind_incident` / `incident_context`) it also carries `incident_id`, so
`journalctl -u ddtreed@main -o cat | jq 'select(.incident_id == 12)'` shows one incident.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import structlog

from . import redact

# journald reads a `<N>` syslog priority at the start of a stdout line (SyslogLevelPrefix=, on by
# default), so `journalctl -p warning` works although ddtreed only writes to stdout.
_SYSLOG_PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "exception": 3, "critical": 2}


class _CurrentStream:
    """Writes to whatever sys.stdout / sys.stderr is at write time, not at configure time.

    Tests (and embedding programs) swap and close those streams; a logger bound to the old object
    would raise "I/O operation on closed file" on its next line.
    """

    def __init__(self, name: str):
        self.name = name

    def write(self, text: str) -> int:
        return getattr(sys, self.name).write(text)

    def flush(self) -> None:
        getattr(sys, self.name).flush()

    def isatty(self) -> bool:
        return getattr(sys, self.name).isatty()

    def fileno(self) -> int:
        return getattr(sys, self.name).fileno()


CURRENT_STDOUT = _CurrentStream("stdout")
CURRENT_STDERR = _CurrentStream("stderr")


def configure(json_output: bool | None = None, level: str = "info", stream: TextIO | None = None) -> None:
    """Set up structlog (and the stdlib loggers of libraries) to write to `stream` (stdout).

    json_output None: JSON unless the stream is a terminal. An unknown level is a ValueError.
    """
    stream = CURRENT_STDOUT if stream is None else stream
    level_number = _level_number(level)
    if json_output is None:
        json_output = not _is_terminal(stream)
    renderer = _renderer(json_output, stream)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    tail: list[Any] = [structlog.processors.StackInfoRenderer()]
    if json_output:
        # The console renderer formats exceptions itself; JSON needs them as a string field.
        tail += [structlog.processors.format_exc_info, _lead_keys]
    tail.append(redact.structlog_processor)  # last before rendering: exc_info text included
    structlog.configure(
        processors=shared + tail + [renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level_number),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=False,  # configure() may run again (tests, --verbose)
    )
    _route_stdlib_logging(shared, tail, renderer, stream, level_number)


def bind_incident(incident_id: int) -> None:
    """From now on, every log line of this thread/task carries `incident_id`."""
    structlog.contextvars.bind_contextvars(incident_id=incident_id)


def unbind_incident() -> None:
    structlog.contextvars.unbind_contextvars("incident_id")


@contextmanager
def incident_context(incident_id: int) -> Iterator[None]:
    """Lines logged inside the block carry `incident_id`; the previous binding comes back after."""
    with structlog.contextvars.bound_contextvars(incident_id=incident_id):
        yield


_LEAD_KEYS = ("timestamp", "level", "event", "incident_id")


def _lead_keys(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """When, how bad and what first: journal lines are read left to right."""
    lead = {key: event.pop(key) for key in _LEAD_KEYS if key in event}
    return lead | event


def _level_number(level: str) -> int:
    number = logging.getLevelNamesMapping().get(level.upper())
    if number is None or level.upper() in ("NOTSET", "WARN", "FATAL"):
        raise ValueError(f"log level must be one of debug, info, warning, error, critical, got {level!r}")
    return number


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream is not a terminal
        return False


def _renderer(json_output: bool, stream: TextIO) -> Any:
    if not json_output:
        return structlog.dev.ConsoleRenderer(colors=_is_terminal(stream))
    render_json = structlog.processors.JSONRenderer(sort_keys=False)
    if not _is_journal(stream):
        return render_json

    def render_for_journal(logger: Any, method: str, event: dict[str, Any]) -> str:
        priority = _SYSLOG_PRIORITY.get(str(event.get("level", "info")), 6)
        return f"<{priority}>{render_json(logger, method, event)}"

    return render_for_journal


def _is_journal(stream: TextIO) -> bool:
    """True when systemd connected `stream` to journald (JOURNAL_STREAM names its device:inode)."""
    expected = os.environ.get("JOURNAL_STREAM", "")
    try:
        info = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return expected == f"{info.st_dev}:{info.st_ino}"


def _route_stdlib_logging(shared: list[Any], tail: list[Any], renderer: Any, stream: TextIO,
                          level_number: int) -> None:
    """paramiko, watchdog and other libraries log through `logging`: render them the same way."""
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name] + shared + tail,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_number)
