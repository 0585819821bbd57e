"""`fleet status` without a Python start on the host: the snapshot and /proc over SFTP, the incident
counts through `sqlite3` when the host has an incident database, else `ddtreed status --json`.

The answer is the one `ddtreed status --json` gives (ddtreed/cli/service_cmd.py `_report`): the same
keys, values and exit code. Whatever this module cannot answer exactly (no snapshot, an unreadable
or invalid one, instance subdirectories, no `sqlite3` on the host, a database that needs migrating
or fails to open) goes to the remote `ddtreed status --json`, which words it as before.

What the host runs on the fast path: nothing when there is no incident database (the SFTP server
reads the files); one fixed, quoted `sqlite3 -readonly` query when there is one.
"""

from __future__ import annotations

import json
import posixpath
import time
from pathlib import PurePosixPath
from typing import Any, Callable

import paramiko
import structlog

from .ssh import Connection, FleetError

log = structlog.get_logger(__name__)

STATUS_FILE = "daemon-state.json"  # ddtreed.ops.status.STATUS_FILE
DATABASE_NAME = "incidents.sqlite3"  # ddtreed.incidents.connection.DATABASE_NAME
GAVE_UP = "gave-up"
RUNNING, STALE, NOT_RUNNING = 0, 1, 3  # `ddtreed status` exit codes (LSB)
SNAPSHOT_LIMIT = 4 * 1024 * 1024  # a larger snapshot is not the daemon's: the remote ddtreed says so
PROC_LIMIT = 64 * 1024
# USER_HZ, what sysconf(_SC_CLK_TCK) returns: 100 on every architecture Linux still ships
# (x86-64, arm64, ppc64le, s390x; only alpha and the removed ia64 used 1024).
CLOCK_TICKS = 100

# One row of JSON: the migrations applied, the counts `Store.counts()` reads, in its order.
COUNTS_QUERY = (
    "SELECT json_object("
    "'migrations', (SELECT json_group_array(name) FROM (SELECT name FROM _migrations ORDER BY id)), "
    "'incidents', (SELECT json_group_array(json_object('category', category, 'status', status, "
    "'outcome', outcome, 'count', count)) FROM (SELECT category, status, outcome, count "
    "FROM incident_counts ORDER BY category, status, outcome)), "
    "'applied', (SELECT json_group_array(json_array(status, n)) FROM "
    "(SELECT status, COUNT(*) AS n FROM applications GROUP BY status)), "
    "'frozen', (SELECT COUNT(*) FROM frozen_signatures))"
)


class _Fallback(Exception):
    """This host needs the remote `ddtreed status`; the message says why (logged, never shown)."""


def status(connection: Connection, by_command: Callable[[Connection], Any]) -> Any:
    """The host's `ddtreed status --json` answer, read without starting Python there where possible."""
    connection.client()  # connect and authenticate first: those failures are the host's answer
    try:
        answer, via = read_status(connection)
    except _Fallback as reason:
        log.info("fleet.status_fallback", host=connection.entry.name, reason=str(reason))
        return by_command(connection)
    log.debug("fleet.status_read", host=connection.entry.name, via=via)
    return answer


def read_status(connection: Connection) -> tuple[dict[str, Any], str]:
    """(the report, "sftp" or "sftp+sqlite3"); _Fallback when only the remote ddtreed can answer."""
    state_dir = connection.entry.state_dir
    try:
        sftp = connection.sftp()
    except FleetError:
        raise
    except (paramiko.SSHException, EOFError, OSError) as error:
        raise _Fallback(f"no SFTP: {error}") from None
    snapshot = _snapshot(sftp, posixpath.join(state_dir, STATUS_FILE))
    now = time.time()
    report: dict[str, Any] = {"state_dir": str(PurePosixPath(state_dir)),
                              "daemon": None, "alive": False, "stale": False,
                              "incidents": None, "incidents_error": None}
    alive = _alive(sftp, snapshot)
    gave_up = snapshot["state"] == GAVE_UP
    report.update(daemon=snapshot, alive=alive, gave_up=gave_up,
                  stale=not alive and snapshot["state"] not in ("stopped", GAVE_UP),
                  service_uptime_s=_since(now, snapshot["service_started_at"] if snapshot["service_pid"] else None),
                  seconds_since_last_healthy=_since(now, snapshot["last_healthy_at"]),
                  seconds_since_update=_since(now, snapshot["updated_at"]))
    via = "sftp"
    database = posixpath.join(state_dir, DATABASE_NAME)
    if _exists(sftp, database):
        report["incidents"] = _counts(connection, database)
        via = "sftp+sqlite3"
    dead = report["stale"] or report.get("gave_up")
    report["exit_code"] = RUNNING if report["alive"] else STALE if dead else NOT_RUNNING
    from ..incidents.views import as_json

    return as_json(report), via


def _snapshot(sftp: paramiko.SFTPClient, path: str) -> dict[str, Any]:
    """The snapshot as `DaemonStatus.to_dict()` gives it; _Fallback for anything but a valid one."""

    from ..ops.status import DaemonStatus

    data = _read(sftp, path, SNAPSHOT_LIMIT)
    if data is None or not data.strip():
        raise _Fallback("no snapshot")  # the remote ddtreed also looks for instance subdirectories
    if len(data) >= SNAPSHOT_LIMIT:
        raise _Fallback("snapshot too large")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _Fallback("snapshot is not JSON") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("pid"), int) or "state" not in raw:
        raise _Fallback("snapshot lacks pid or state")
    known = DaemonStatus.FIELDS
    try:  # keys from a newer daemon are ignored, as `read_status` does
        return DaemonStatus(**{key: value for key, value in raw.items() if key in known}).to_dict()
    except (TypeError, ValueError):
        raise _Fallback("snapshot does not validate") from None


def _read(sftp: paramiko.SFTPClient, path: str, limit: int) -> bytes | None:
    """The file's bytes (at most `limit`), None when it does not exist; _Fallback when unreadable."""
    try:
        with sftp.open(path, "rb") as handle:
            return handle.read(limit)
    except FileNotFoundError:
        return None
    except (OSError, paramiko.SSHException, EOFError) as error:
        raise _Fallback(f"{path}: {error}") from None


def _read_line(sftp: paramiko.SFTPClient, path: str, starting: bytes = b"") -> bytes | None:
    """The first line of a /proc file that starts with `starting`; b"" when none does, None when the
    file does not exist; _Fallback when unreadable. A line read ends at its newline, so no request is
    spent on the read that finds the end of the file (`read()` takes one more per file)."""
    try:
        with sftp.open(path, "rb") as handle:
            taken = 0
            while taken < PROC_LIMIT:
                line = handle.readline(PROC_LIMIT - taken)
                if not line:
                    break
                taken += len(line)
                if line.startswith(starting):
                    return line
            return b""
    except FileNotFoundError:
        return None
    except (OSError, paramiko.SSHException, EOFError) as error:
        raise _Fallback(f"{path}: {error}") from None


def _exists(sftp: paramiko.SFTPClient, path: str) -> bool:
    try:
        sftp.stat(path)
        return True
    except FileNotFoundError:
        return False
    except (OSError, paramiko.SSHException, EOFError) as error:
        raise _Fallback(f"{path}: {error}") from None


def _alive(sftp: paramiko.SFTPClient, snapshot: dict[str, Any]) -> bool:
    """`ddtreed status`'s test: the pid runs and started no later than the snapshot (+1 s).

    psutil's create_time is /proc/PID/stat's start (field 22, in clock ticks) plus /proc/stat's
    btime; the same two files are read here over SFTP.
    """
    if snapshot["pid"] <= 0:
        raise _Fallback("pid is not positive")  # psutil's own answer for those is the remote's to give
    if snapshot["state"] in ("stopped", GAVE_UP):
        return False
    stat = _read_line(sftp, f"/proc/{snapshot['pid']}/stat")
    if stat is None:
        return False  # no such process
    fields = stat.decode("ascii", "replace").rpartition(")")[2].split()
    boot = _boot_time(_read_line(sftp, "/proc/stat", starting=b"btime") or b"")
    if len(fields) < 20 or boot is None or not fields[19].isdigit():
        raise _Fallback("unexpected /proc format")
    started = boot + int(fields[19]) / CLOCK_TICKS
    return started <= (snapshot["updated_at"] or 0.0) + 1.0


def _boot_time(text: bytes) -> float | None:
    for line in text.splitlines():
        if line.startswith(b"btime"):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def _counts(connection: Connection, database: str) -> dict[str, Any]:
    """`Store.counts()` through the host's `sqlite3`, read-only; _Fallback when that cannot be exact."""
    from ..incidents.reads import SCHEMA  # the migrations' names, without the store (sqlite-utils)
    from ..records import counts_summary

    path = database if database.startswith("/") else "./" + database  # never read as an option
    argv = ["sqlite3", "-readonly", "-batch", "-bail", "-init", "/dev/null", "-noheader", "-list",
            "-cmd", ".timeout 5000", path, COUNTS_QUERY]
    result = connection.run(argv, connection.remaining())
    if result.returncode != 0:
        raise _Fallback(f"sqlite3 exited {result.returncode}")
    try:
        raw = json.loads(result.stdout.strip().splitlines()[-1])
        migrations = json.loads(raw["migrations"]) if isinstance(raw["migrations"], str) else raw["migrations"]
        incidents = _json_list(raw["incidents"])
        applied = {str(status): int(count) for status, count in _json_list(raw["applied"])}
        frozen = int(raw["frozen"])
    except (IndexError, KeyError, TypeError, ValueError):
        raise _Fallback("sqlite3 printed something else") from None
    if migrations != list(SCHEMA):
        raise _Fallback("the database's schema is not this version's")  # the remote migrates it
    if not all(isinstance(row, dict) and set(row) == {"category", "status", "outcome", "count"}
               for row in incidents):
        raise _Fallback("unexpected incident_counts rows")
    return counts_summary(incidents, applied, frozen)


def _json_list(value: Any) -> list[Any]:
    """json_group_array nested in json_object is JSON already; NULL (no rows) reads as []."""
    if value is None:
        return []
    parsed = json.loads(value) if isinstance(value, str) else value
    if not isinstance(parsed, list):
        raise ValueError("not a list")
    return parsed


def _since(now: float, then: float | None) -> float | None:
    return None if not then else max(0.0, round(now - then, 1))
