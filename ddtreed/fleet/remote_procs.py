"""The remote process table (`ps`), parsed here, for SshHost's sweep and session queries."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass

from ..service.host import CommandResult

TOKEN_VARIABLE = "DDTREED_SERVICE_TOKEN"  # the same variable LocalHost's sweep looks for
COMM_LENGTH = 15  # Linux truncates process names (comm) to 15 bytes
ANCESTRY_LIMIT = 64

# Fixed widths, so a comm or args with spaces cannot shift the columns; ps separates by one space.
PS_ARGV = ["ps", "-e", "-o", "pid:10=,ppid:10=,sid:10=,stat:6=,comm:20=,args="]
_COLUMNS = ((0, 10), (11, 21), (22, 32), (33, 39), (40, 60))


@dataclass(frozen=True)
class Row:
    pid: int
    ppid: int
    sid: int
    stat: str
    comm: str
    args: str

    @property
    def zombie(self) -> bool:
        return self.stat.startswith("Z")


def parse_ps(result: CommandResult) -> list[Row]:
    if result.returncode != 0:
        raise OSError(f"ps exited {result.returncode}: {result.stderr.strip()[-200:]}")
    rows = []
    for line in result.stdout.splitlines():
        fields = [line[start:end].strip() for start, end in _COLUMNS]
        if not all(value.isdigit() for value in fields[:3]):
            continue
        rows.append(Row(int(fields[0]), int(fields[1]), int(fields[2]), fields[3], fields[4], line[61:]))
    return rows


def session_pids(rows: list[Row], session_id: int) -> list[int]:
    return sorted(row.pid for row in rows if row.sid == session_id and not row.zombie)


def named_like(row: Row, patterns: tuple[str, ...]) -> bool:
    argv0 = row.args.split(" ", 1)[0] if row.args else ""
    candidates = [row.comm, row.args, os.path.basename(argv0)]
    for pattern in patterns:
        if any(fnmatch.fnmatchcase(text, pattern) for text in candidates):
            return True
        # A name set with prctl is cut to 15 bytes: `sglang::scheduler_TP0` reads `sglang::schedul`.
        if len(row.comm) == COMM_LENGTH and fnmatch.fnmatchcase(row.comm, pattern[:COMM_LENGTH] + "*"):
            return True
    return False


def descended(rows: list[Row], row: Row, session_id: int) -> bool:
    """An ancestor is the service's leader or in its session (while the ancestry lasts)."""
    by_pid = {each.pid: each for each in rows}
    current = by_pid.get(row.ppid)
    for _ in range(ANCESTRY_LIMIT):
        if current is None or current.pid <= 1:
            return False
        if current.pid == session_id or current.sid == session_id:
            return True
        current = by_pid.get(current.ppid)
    return False


def sweep_candidates(rows: list[Row], session_id: int, patterns: tuple[str, ...]) -> tuple[set[int], set[int]]:
    """(certain victims, named-like processes whose environment token decides)."""
    certain, undecided = set(), set()
    for row in rows:
        if row.zombie:
            continue
        if row.sid == session_id:
            certain.add(row.pid)
        elif named_like(row, patterns):
            (certain if descended(rows, row, session_id) else undecided).add(row.pid)
    return certain, undecided


def carries_token(environ: bytes, token: str) -> bool:
    return f"{TOKEN_VARIABLE}={token}".encode() in environ.split(b"\0")
