"""What the service itself said before it died, kept with the incident (bounded).

The daemon feeds every stderr line it follows into a `StderrTail`; when it opens an incident (or
a crash of the same signature recurs) it stores `evidence(...)`: the last error line, the tail
of stderr, how the process ended and the startup phase it was in. Bounded by line count and
bytes, so a flood costs nothing and an incident row stays small.
"""

from __future__ import annotations

import re
import signal as signals
from collections import deque
from collections.abc import Iterable, Mapping

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the readers start fast)
if TYPE_CHECKING:
    from typing import Any

TAIL_LINES = 40
TAIL_BYTES = 8 * 1024
LINE_CHARS = 500  # one line of a 10 MB garbage line is not evidence

# The line a person would quote: an exception line, an ERROR log line, a fatal message.
_ERROR_LINE = re.compile(
    r"(^|\s)([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Fault)\b:?)|"
    r"\b(ERROR|FATAL|CRITICAL|Fatal Python error|Segmentation fault|Aborted|core dumped)\b|"
    r"^\s*(error|fatal):", re.IGNORECASE | re.MULTILINE)
_NOT_AN_ERROR = re.compile(r"^\s*(Traceback \(most recent call last\)|File \"|\^+\s*$|~+\s*$)")


class StderrTail:
    """The newest stderr lines, at most TAIL_LINES and TAIL_BYTES.

    `feed` only appends the lines as they came to a deque bounded by the line count (no per-line
    Python: the daemon feeds it on every read, ~50 times a second in a flood); the bounds by
    characters and bytes are applied to those few lines when `lines()` asks. The same lines as
    trimming at every feed would keep: the kept lines are always the longest run of newest lines
    within both bounds (at least one), and a run only ends later when lines come after it."""

    def __init__(self, max_lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES):
        self.max_bytes = max_bytes
        self._lines: deque[str] = deque(maxlen=max_lines)

    def feed(self, lines: Iterable[str]) -> None:
        self._lines.extend(lines)

    def feed_text(self, text: str) -> None:
        self.feed(text.splitlines())

    def lines(self) -> list[str]:
        kept: list[str] = []
        total = 0
        for line in reversed(self._lines):
            line = line.rstrip("\r\n")
            if len(line) > LINE_CHARS:
                line = line[:LINE_CHARS] + "…"
            total += len(line.encode())
            if kept and total > self.max_bytes:
                break
            kept.append(line)
        kept.reverse()
        return kept

    def clear(self) -> None:
        self._lines.clear()


class ServiceOutput:
    """The tails of the service's stderr and stdout, fed with the follower's chunks.

    The daemon makes one per launch (`feed` every chunk it reads), then `evidence(...)` when the
    service fails: stderr first (where Python and SGLang print errors), stdout when stderr said
    nothing.
    """

    def __init__(self, stderr_paths: Iterable[str] = (), stdout_paths: Iterable[str] = ()):
        self.stderr_paths = set(stderr_paths)
        self.stdout_paths = set(stdout_paths)
        self.stderr = StderrTail()
        self.stdout = StderrTail()

    def feed(self, chunk) -> None:
        if chunk.source in self.stderr_paths:
            self.stderr.feed(chunk.lines)
        elif chunk.source in self.stdout_paths or not self.stderr_paths:
            self.stdout.feed(chunk.lines)

    def evidence(self, *, exit_code: int | None = None, signal: int | None = None,
                 phase: str | None = None) -> dict[str, Any]:
        lines, path = self.stderr.lines(), next(iter(self.stderr_paths), None)
        if not lines or last_error_line(lines) is None and last_error_line(self.stdout.lines()):
            lines, path = (self.stdout.lines() or lines), next(iter(self.stdout_paths), path)
        return evidence(lines, exit_code=exit_code, signal=signal, phase=phase, stderr_path=path)


def last_error_line(lines: Iterable[str]) -> str | None:
    """The last line that reads as an error (`ModuleNotFoundError: No module named 'sglang'`).
    Read from the newest line back, so a tail that ends in its exception line (a crash's) costs
    one search, not one per line: the crash path computes this before the incident's row."""
    for line in reversed(lines if isinstance(lines, (list, tuple)) else list(lines)):
        if line.strip() and not _NOT_AN_ERROR.match(line) and _ERROR_LINE.search(line):
            return line.strip()
    return None


def signal_name(number: int | None) -> str | None:
    if number is None:
        return None
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


def evidence(tail: Iterable[str], *, exit_code: int | None = None, signal: int | None = None,
             phase: str | None = None, stderr_path: str | None = None) -> dict[str, Any]:
    """The evidence record stored with an incident (the `detected` / `recurred` step's data)."""
    lines = list(tail)[-TAIL_LINES:]
    return {"last_error": last_error_line(lines), "stderr_tail": lines, "exit_code": exit_code,
            "signal": signal, "signal_name": signal_name(signal), "phase": phase,
            "stderr_path": stderr_path}


def describe_exit(record: Mapping[str, Any]) -> str | None:
    """`exit code 1`, `killed by SIGKILL (9)`, or None when unknown."""
    if record.get("signal") is not None:
        return f"killed by {record.get('signal_name') or signal_name(record['signal'])} ({record['signal']})"
    if record.get("exit_code") is not None:
        return f"exit code {record['exit_code']}"
    return None
