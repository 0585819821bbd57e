"""What `ddtreed status` reads, with the standard library only (it must start fast: issue 19.4).

- `process_started_at(pid)`: a process's start time, as psutil computes it on Linux
  (`/proc/<pid>/stat` starttime / CLK_TCK + `/proc/stat` btime); psutil elsewhere.
- `pid_exists(pid)`: signal 0.
- `incident_counts(path)`: the same totals as `Store.counts()` (what the metrics endpoint
  serves), read with `sqlite3` in read-only mode: never a write, never a migration, and it works
  on a read-only copy of a state dir (a reviewer's copy from another host, a read-only mount).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from typing import Any

from ..vocabulary import counts_summary
from ..sqlite_readonly import open_read_only  # ddtreed.ops.status imports the vocabulary anyway

BUSY_TIMEOUT_S = 5.0


def process_started_at(pid: int) -> float | None:
    """Epoch seconds the process `pid` started; None when there is none (or only its zombie)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()  # the name before ")" may hold spaces
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ESRCH):
            return None
        return _psutil_started_at(pid)
    if fields[0] in (b"Z", b"X"):  # exited, waiting for its parent: not running
        return None
    return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    with open("/proc/stat", "rb") as stat:
        for line in stat:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError(errno.EIO, "/proc/stat has no btime line")


def _psutil_started_at(pid: int) -> float | None:
    import psutil  # no /proc (not Linux): psutil knows this system's way

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


class CountsError(Exception):
    """The database could not be read: one line naming the file and why."""


def incident_counts(path: Path) -> dict[str, Any]:
    """`Store.counts()` of the database at `path`, read-only (CountsError when unreadable)."""
    try:
        connection = open_read_only(path, BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as error:
        raise CountsError(_why(path, error)) from None
    try:
        with connection:
            connection.execute("BEGIN")  # one snapshot for all three reads
            tables = {row[0] for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "incident_counts" in tables:  # kept by triggers (migration 0009): no table scan
                rows = connection.execute("SELECT category, status, outcome, count FROM incident_counts "
                                          "ORDER BY category, status, outcome").fetchall()
            elif "incidents" in tables:  # a database from before 0009
                rows = connection.execute(
                    "SELECT category, status, COALESCE(outcome, '') AS outcome, COUNT(*) FROM incidents "
                    "GROUP BY category, status, outcome ORDER BY category, status, outcome").fetchall()
            else:
                rows = []
            applied = dict(connection.execute("SELECT status, COUNT(*) FROM applications GROUP BY status")
                           .fetchall()) if "applications" in tables else {}
            frozen = connection.execute("SELECT COUNT(*) FROM frozen_signatures").fetchone()[0] \
                if "frozen_signatures" in tables else 0
    except sqlite3.Error as error:
        raise CountsError(_why(path, error)) from None
    finally:
        connection.close()
    incidents = [{"category": category, "status": status, "outcome": outcome, "count": count}
                 for category, status, outcome, count in rows]
    return counts_summary(incidents, applied, frozen)


def _why(path: Path, error: sqlite3.Error) -> str:
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    detail = {5: f"database is locked by another connection (waited {BUSY_TIMEOUT_S:g} s); retry later",
              6: "database is locked", 11: "not a valid ddtreed database (corrupt, or another program's file)",
              14: "cannot open the database file",
              26: "not a valid ddtreed database (corrupt, or another program's file)"}.get(primary or 0)
    return f"{path}: cannot read: {detail or error}"
