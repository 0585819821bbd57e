"""Reading incidents with the standard library alone: the list, one incident's whole story.

`Store.list_incidents` / `Store.get` run these functions on the store's own connection, and the
CLI readers (`ddtreed incidents`, `incidents show`) run them through `Reader`, which opens the
file read-only (`sqlite_readonly.open_read_only`) without importing sqlite-utils or structlog:
one query and one row shape for both, so the CLI prints what the store returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path
from collections.abc import Iterator, Mapping, Sequence

from ..sqlite_readonly import open_read_only
from .errors import StoreError, translate

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the readers start fast)
if TYPE_CHECKING:
    from typing import Any

DATABASE_NAME = "incidents.sqlite3"
DEFAULT_BUSY_TIMEOUT_S = 5.0
# The names of `migrations.MIGRATIONS`, in order (tests/test_incidents_reads.py checks they
# agree): a reader refuses a database that has not had them all, as `Store(read_only=True)` does.
SCHEMA = ("0001_incidents_and_steps", "0002_applications", "0003_frozen_signatures",
          "0004_accept_baselines", "0005_canary_goldens", "0006_degraded_state", "0007_canary_runs",
          "0008_application_engine_fields", "0009_scale_indexes_and_counts")

_JSON_COLUMNS: dict[str, Any] = {"params": {}, "ranks": [], "tracebacks": [], "context": {}, "remediations": []}
SUMMARY_COLUMNS = ("id", "source", "service", "category", "rule_id", "title", "fingerprint",
                   "exception", "message", "status", "remediation_id", "application_id",
                   "outcome", "started_at", "resolved_at")
# Restarts that ended in the same crash: one incident with a count, not one per restart.
RECURRENCES = ("(SELECT COUNT(*) FROM steps WHERE steps.incident_id = incidents.id "
               "AND steps.step = 'recurred') AS recurrences")


def database_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / DATABASE_NAME


def loads(text: str | None, empty: Any = None) -> Any:
    """A JSON column back to its value (`empty` for NULL or '')."""
    if text is None or text == "":
        return empty
    return json.loads(text)


def _rows(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    keys = [column[0] for column in cursor.description]
    return [dict(zip(keys, row)) for row in cursor]


def list_incidents(connection: sqlite3.Connection, limit: int = 50,
                   status: str | Sequence[str] | None = None,
                   since: float | None = None) -> list[dict[str, Any]]:
    """Summaries, newest first (no tracebacks; `duration_s` while closed; `recurrences`)."""
    clauses: list[str] = []
    params: list[Any] = []
    if status:
        statuses = [status] if isinstance(status, str) else list(status)
        clauses.append(f"status IN ({', '.join('?' * len(statuses))})")
        params += statuses
    if since is not None:
        clauses.append("started_at >= ?")
        params.append(float(since))
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    sql = (f"SELECT {', '.join(SUMMARY_COLUMNS)}, {RECURRENCES} FROM incidents {where} "
           "ORDER BY started_at DESC, id DESC LIMIT ?")
    return [with_duration(row) for row in _rows(connection.execute(sql, params + [int(limit)]))]


def get_incident(connection: sqlite3.Connection, incident_id: int) -> dict[str, Any] | None:
    """The whole incident (JSON columns decoded, steps, applications, durations), None when
    there is none. Run it inside one read transaction: the parts are read as of one moment."""
    found = _rows(connection.execute("SELECT * FROM incidents WHERE id = ?", [incident_id]))
    if not found:
        return None
    row = found[0]
    steps = _rows(connection.execute("SELECT step, detail, data, at FROM steps WHERE incident_id = ? "
                                     "ORDER BY at, id", [incident_id]))
    applications = _rows(connection.execute("SELECT * FROM applications WHERE incident_id = ? "
                                            "ORDER BY applied_at", [incident_id]))
    frozen = connection.execute("SELECT 1 FROM frozen_signatures WHERE fingerprint = ?",
                                [row["fingerprint"]]).fetchone() is not None
    unreadable = []  # a corrupted or hostile column (torn write, hand edit): read as empty, named, kept on disk
    for column, empty in _JSON_COLUMNS.items():
        try:
            row[column] = loads(row[column], empty)
        except (ValueError, RecursionError):
            row[column] = empty
            unreadable.append(column)
    for step in steps:
        try:
            step["data"] = loads(step["data"])
        except (ValueError, RecursionError):
            step["data"] = None
            unreadable.append(f"steps.{step['step']}.data")
        step["since_detection_s"] = round(step["at"] - row["started_at"], 6)
    if unreadable:
        row["unreadable"] = unreadable
    recurred = [s for s in steps if s["step"] == "recurred"]
    said = [s["data"]["evidence"] for s in steps
            if isinstance(s["data"], dict) and s["data"].get("evidence")]
    row.update(steps=steps, applications=[application(a) for a in applications],
               frozen=frozen, durations=durations(row, steps),
               evidence=said[-1] if said else None, recurrences=len(recurred),
               last_recurred_at=recurred[-1]["at"] if recurred else None)
    return with_duration(row)


def durations(incident: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """detected→diagnosed, diagnosed→applied (first try), restart→healthy (the last try), total."""
    def first(name: str) -> float | None:
        return next((s["at"] for s in steps if s["step"] == name), None)

    def span(start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else round(end - start, 6)

    healthy = [s["at"] for s in steps if s["step"] == "healthy"]
    restart = None
    if healthy:
        restarts = [s["at"] for s in steps if s["step"] == "restarting" and s["at"] <= healthy[-1]]
        restart = restarts[-1] if restarts else None
    return {
        "detect_to_diagnose_s": span(first("detected"), first("diagnosed")),
        "diagnose_to_apply_s": span(first("diagnosed"), first("applied")),
        "restart_to_healthy_s": span(restart, healthy[-1] if healthy else None),
        "total_s": span(incident["started_at"], incident["resolved_at"]),
    }


def with_duration(row: Mapping[str, Any]) -> dict[str, Any]:
    row = dict(row)
    end = row.get("resolved_at")
    row["duration_s"] = None if end is None else round(end - row["started_at"], 6)
    return row


def application(row: Mapping[str, Any]) -> dict[str, Any]:
    """An `applications` row with its JSON columns decoded."""
    row = dict(row)
    row["files"] = loads(row["files"], [])
    row["launch"] = loads(row["launch"])
    return row


class Reader:
    """The incident database opened read-only with the standard library: never a write, never a
    migration, no lock on the file (a read-only copy of a state dir works). Raises the store's
    errors: StoreError `missing` (no file, no such incident), `outdated` (an older schema: the
    daemon migrates it; `Store(path)` would too), else what `translate` says."""

    def __init__(self, path: str | os.PathLike[str], busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S):
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        if not self.path.exists():
            raise StoreError(f"{self.path}: no incident database here (nothing recorded yet)", "missing")
        try:
            self.connection = open_read_only(self.path, busy_timeout_s, isolation_level=None)
        except sqlite3.Error as error:
            raise translate(error, self.path, "open the incident database", busy_timeout_s) from error
        try:
            pending = len(self._applied()) < len(SCHEMA)
        except sqlite3.Error as error:
            self.connection.close()
            raise translate(error, self.path, "open the incident database", busy_timeout_s) from error
        if pending:
            self.connection.close()
            raise StoreError(f"{self.path}: written by an older ddtreed; start this version's daemon "
                             "on it once (it migrates the schema) before reading it", "outdated")

    def _applied(self) -> list[str]:
        tables = {row[0] for row in self.connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "_migrations" not in tables:
            return []
        return [row[0] for row in self.connection.execute("SELECT name FROM _migrations ORDER BY id")]

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction, so an incident and its steps are read as of the same moment."""
        try:
            self.connection.execute("BEGIN")
            try:
                yield self.connection
            finally:
                if self.connection.in_transaction:
                    self.connection.execute("COMMIT")
        except sqlite3.Error as error:
            raise translate(error, self.path, "read", self.busy_timeout_s) from error

    def list_incidents(self, limit: int = 50, status: str | Sequence[str] | None = None,
                       since: float | None = None) -> list[dict[str, Any]]:
        with self._snapshot() as connection:
            return list_incidents(connection, limit, status, since)

    def get(self, incident_id: int) -> dict[str, Any]:
        with self._snapshot() as connection:
            incident = get_incident(connection, incident_id)
        if incident is None:
            raise StoreError(f"{self.path}: no incident {incident_id}", "missing")
        return incident
