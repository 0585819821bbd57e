"""Incidents and their steps: open, add steps, finish, list, read back with durations."""

from __future__ import annotations

import re
import time
from typing import Any, Mapping, Sequence

from ..records import INCIDENT_STATUSES, Crash, RuleMatch, ServiceContext, Signature
from . import encode, reads
from .base import StoreBase
from .errors import StoreError
from .reads import SUMMARY_COLUMNS, application as _application, durations  # noqa: F401 - named here too
from .reads import with_duration as _with_duration

SOURCES = ("crash", "preflight", "canary")
# records.STEPS is the vocabulary the daemon writes; other lower-case names are accepted for new stages.
_STEP_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


class IncidentsMixin(StoreBase):
    def open_incident(self, source: str, crashes: Sequence[Crash] = (),
                      signature: Signature | None = None, match: RuleMatch | None = None,
                      context: ServiceContext | Mapping[str, Any] | None = None,
                      detected_at: float | None = None, service: str = "",
                      message: str | None = None,
                      evidence: Mapping[str, Any] | None = None, durable: bool = True) -> int:
        """Record a new incident and its `detected` step; the caller adds `diagnosed` and after.

        `evidence` (see `incidents.evidence`): the service's last error line, stderr tail, exit
        code or signal and phase, kept in the `detected` step's data. `durable=False`: committed
        without the fsync (`atomic`); the caller makes it durable (`make_durable`) before acting.
        """
        if source not in SOURCES:
            raise ValueError(f"incident source must be one of {', '.join(SOURCES)}, got {source!r}")
        detected_at = time.time() if detected_at is None else detected_at
        row = _incident_row(source, tuple(crashes), signature, match, context, message)
        row.update(service=service, status="open", started_at=detected_at)
        summary = f"{row['exception'] or source}: {row['message'] or ''}".strip()
        with self.atomic(durable) as db:
            incident_id = _insert(db, "incidents", encode.clean_row(row))
            data = {"ranks": encode.loads(row["ranks"], [])}
            if evidence:
                data["evidence"] = dict(evidence)
            self._insert_step(db, incident_id, "detected", summary[:300], data, detected_at)
        return incident_id

    def record_recurrence(self, incident_id: int, detail: str = "",
                          evidence: Mapping[str, Any] | None = None, at: float | None = None,
                          durable: bool = True) -> int:
        """The same crash again after a restart: a `recurred` step; returns the count so far.
        `durable=False` as for `open_incident`."""
        data = {"evidence": dict(evidence)} if evidence else None
        with self.atomic(durable) as db:
            self._require(db, "incident", incident_id)
            self._insert_step(db, incident_id, "recurred", detail or "the same crash again",
                              data, time.time() if at is None else at)
            return int(db.execute("SELECT COUNT(*) FROM steps WHERE incident_id = ? AND step = 'recurred'",
                                  [incident_id]).fetchone()[0])

    def amend_recurrence(self, incident_id: int, detail: str = "",
                         evidence: Mapping[str, Any] | None = None) -> None:
        """The newest `recurred` step of the incident, told again: it is recorded when the crash is
        read, and how the service ended (exit code, the last lines) is known only after the stop."""
        data = {"evidence": dict(evidence)} if evidence else None
        with self.atomic() as db:
            self._require(db, "incident", incident_id)
            db.execute("UPDATE steps SET detail = ?, data = ? WHERE id = (SELECT MAX(id) FROM steps "
                       "WHERE incident_id = ? AND step = 'recurred')",
                       [encode.text(detail or "the same crash again"), encode.dumps(data), incident_id])

    def add_step(self, incident_id: int, step: str, detail: str = "",
                 data: Mapping[str, Any] | None = None, at: float | None = None) -> None:
        if not _STEP_NAME.match(step):
            raise ValueError(f"step name must be lower-case words joined by '-', got {step!r}")
        with self.atomic() as db:
            self._require(db, "incident", incident_id)
            self._insert_step(db, incident_id, step, detail, data, time.time() if at is None else at)

    def set_diagnosis(self, incident_id: int, crashes: Sequence[Crash], signature: Signature,
                      match: RuleMatch, durable: bool = True, keep_records: bool = False) -> None:
        """Replace the crashes and the diagnosis: the rules' verdict on a crash recorded before
        they ran, or ranks that failed a moment later, diagnosed anew. `durable=False` as for
        `open_incident`. `keep_records`: only the verdict is written; the recorded crashes and the
        signature they were recorded under stay (a verdict on crashes rebuilt from those records,
        whose redacted text would hash to a fingerprint no live crash has)."""
        row = _incident_row("crash", tuple(crashes), signature, match, None, None)
        del row["source"], row["context"]
        if keep_records:
            for column in ("tracebacks", "ranks", "message", "fingerprint", "normalized_message", "exception"):
                del row[column]
        self._update(incident_id, durable, **row)

    def set_remediation(self, incident_id: int, remediation_id: str | None,
                        application_id: str | None = None) -> None:
        """Name the remediation now being tried (the latest one wins)."""
        self._update(incident_id, remediation_id=remediation_id, application_id=application_id)

    def finish(self, incident_id: int, status: str, outcome: str = "",
               at: float | None = None) -> None:
        """Set the final status and outcome; `open` keeps it open (e.g. restarted unchanged)."""
        if status not in INCIDENT_STATUSES:
            raise ValueError(f"incident status must be one of {', '.join(INCIDENT_STATUSES)}, "
                             f"got {status!r}")
        resolved_at = None if status == "open" else (time.time() if at is None else at)
        self._update(incident_id, status=status, outcome=outcome, resolved_at=resolved_at)

    def list_incidents(self, limit: int = 50, status: str | Sequence[str] | None = None,
                       since: float | None = None) -> list[dict[str, Any]]:
        """Summaries, newest first (no tracebacks; `duration_s` while closed; `recurrences`)."""
        with self.reading() as db:
            return reads.list_incidents(db.conn, limit, status, since)

    def find_recent(self, fingerprint: str, since: float | None = None,
                    limit: int = 10) -> list[dict[str, Any]]:
        """Incidents with this signature, newest first (optionally only those started `since`)."""
        sql = (f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM incidents WHERE fingerprint = ? "
               "AND started_at >= ? ORDER BY started_at DESC, id DESC LIMIT ?")
        with self.reading() as db:
            rows = db.query(sql, [fingerprint, -1.0 if since is None else since, int(limit)])
            return [_with_duration(row) for row in rows]

    def open_incident_for(self, fingerprint: str | None, active_since: float) -> int | None:
        """The open incident of this signature with a step since `active_since`: a crash loop's
        next crash is a recurrence of it, not a new incident."""
        if not fingerprint:
            return None
        sql = ("SELECT i.id FROM incidents i WHERE i.fingerprint = ? AND i.status = 'open' AND "
               "(SELECT MAX(s.at) FROM steps s WHERE s.incident_id = i.id) >= ? "
               "ORDER BY i.started_at DESC, i.id DESC LIMIT 1")
        with self.reading() as db:
            row = db.execute(sql, [fingerprint, float(active_since)]).fetchone()
        return int(row[0]) if row else None

    def verified_fix_for(self, fingerprint: str) -> dict[str, Any] | None:
        """The newest verified application made for an incident of this signature, not reverted
        by ddtreed (one undone from outside, by a reinstall, still counts: its crash recurring is news)."""
        sql = ("SELECT a.application_id, a.remediation_id, a.incident_id, a.applied_at "
               "FROM applications a JOIN incidents i ON a.incident_id = i.id "
               "WHERE i.fingerprint = ? AND a.verified_at IS NOT NULL AND a.status != 'reverted' "
               "ORDER BY a.applied_at DESC LIMIT 1")
        with self.reading() as db:
            rows = list(db.query(sql, [fingerprint]))
        return rows[0] if rows else None

    def get(self, incident_id: int) -> dict[str, Any]:
        """The whole incident: JSON columns decoded, steps, applications, durations."""
        with self.reading() as db:
            incident = reads.get_incident(db.conn, incident_id)
        if incident is None:
            raise StoreError(f"{self.path}: no incident {incident_id}", "missing")
        return incident

    def prune(self, keep: int = 1000, max_age_s: float | None = None,
              now: float | None = None) -> int:
        """Delete closed incidents beyond the newest `keep`, and (with `max_age_s`) closed ones
        that started longer ago than that, so a crash loop cannot fill the disk. Open incidents,
        and incidents an application refers to (their patch hashes), are always kept."""
        cutoff = None if max_age_s is None else (time.time() if now is None else now) - max_age_s
        with self.atomic() as db:
            doomed = [row[0] for row in db.execute(
                "SELECT id FROM incidents WHERE status != 'open' AND id NOT IN "
                "(SELECT incident_id FROM applications WHERE incident_id IS NOT NULL) "
                "AND (id NOT IN (SELECT id FROM incidents ORDER BY started_at DESC, id DESC LIMIT ?)"
                " OR started_at < ?)",
                [int(keep), -1e300 if cutoff is None else cutoff]).fetchall()]
            for start in range(0, len(doomed), 500):  # SQLite caps the number of parameters
                chunk = doomed[start:start + 500]
                marks = ", ".join("?" * len(chunk))
                db.execute(f"DELETE FROM steps WHERE incident_id IN ({marks})", chunk)
                db.execute(f"DELETE FROM incidents WHERE id IN ({marks})", chunk)
        return len(doomed)

    def _update(self, incident_id: int, durable: bool = True, **values: Any) -> None:
        with self.atomic(durable) as db:
            self._require(db, "incident", incident_id)
            db["incidents"].update(incident_id, encode.clean_row(values))

    @staticmethod
    def _insert_step(db, incident_id: int, step: str, detail: str,
                     data: Mapping[str, Any] | None, at: float) -> None:
        _insert(db, "steps", {"incident_id": incident_id, "step": step, "detail": encode.text(detail),
                              "data": encode.dumps(data), "at": at})


def _insert(db, table: str, row: Mapping[str, Any]) -> int:
    """One plain INSERT; the new row's id. (sqlite-utils' `insert` also reads `sqlite_master`
    three times and wraps a savepoint around it: 8 statements instead of 1 on the way to the
    incident row.) Every value here is already text, a number or NULL."""
    names = sorted(row)  # sqlite-utils' order: tools that read the SQL trace find `step` last
    columns = ", ".join(f'"{name}"' for name in names)
    marks = ", ".join("?" for _ in names)
    cursor = db.conn.execute(f'INSERT INTO "{table}" ({columns}) VALUES ({marks})', [row[name] for name in names])
    return int(cursor.lastrowid)


def _incident_row(source: str, crashes: tuple[Crash, ...], signature: Signature | None,
                  match: RuleMatch | None, context: Any, message: str | None) -> dict[str, Any]:
    first = crashes[0] if crashes else None
    params = dict(signature.params) if signature else {}
    params.update(match.params if match else {})
    return {
        "source": source,
        "category": match.category if match else "unknown",
        "rule_id": match.rule_id if match else None,
        "title": match.title if match else None,
        "diagnosis": match.diagnosis if match else None,
        "advice": match.advice if match else None,
        "remediations": encode.dumps(list(match.remediations) if match else []),
        "fingerprint": signature.fingerprint if signature else None,
        "normalized_message": signature.normalized_message if signature else None,
        "exception": (signature.exception if signature else None) or (first.exception if first else None),
        "message": message if message is not None else (first.message if first else None),
        "params": encode.dumps(params),
        "ranks": encode.dumps(encode.ranks_of(crashes)),
        "tracebacks": encode.dumps(encode.crash_records(crashes)),
        "context": encode.dumps(context if context is not None else {}),
    }
