"""What the daemon remembers between incidents: applications, frozen signatures, acceptance
baselines, canary goldens, the degraded configuration."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Mapping, Sequence

from ..records import APPLICATION_STATUSES, Application, checked, counts_summary
from . import encode
from .base import StoreBase
from .timeline import _application

_ENTRY_JSON = ("files", "launch", "previous")  # engine entry fields kept as JSON text
BASELINE_SAMPLES = 20  # enough healthy runs to shrug off one odd request, few enough to follow drift


def baseline_key(model: str | None, draft_model: str | None, flags: Mapping[str, Any]) -> str:
    """A short stable key for 'the same model, draft and flags' (order of flags ignored)."""
    text = json.dumps([model, draft_model, sorted((str(k), str(v)) for k, v in flags.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class StateMixin(StoreBase):
    # Applications ------------------------------------------------------------------------
    def record_application(self, incident_id: int | None, application: Application,
                           status: str = "applied") -> None:
        """Store (or replace) an application with its per-file before/after hashes."""
        checked(status, APPLICATION_STATUSES, "application status")
        row = {
            "application_id": application.application_id, "incident_id": incident_id,
            "remediation_id": application.remediation_id, "kind": application.kind,
            "target": application.target, "summary": application.summary,
            "files": encode.dumps(list(application.files)),
            "launch": encode.dumps(application.launch), "status": status,
            "applied_at": application.applied_at or time.time(), "updated_at": time.time(),
            "verified_at": time.time() if status == "verified" else None,
        }
        with self.atomic() as db:
            if incident_id is not None:
                self._require(db, "incident", incident_id)
            db["applications"].upsert(row, pk="application_id")

    def mark_application(self, application_id: str, status: str) -> None:
        checked(status, APPLICATION_STATUSES, "application status")
        now = time.time()
        changes: dict[str, Any] = {"status": status, "updated_at": now}
        changes.update({"verified": {"verified_at": now}, "reverted": {"reverted_at": now}}.get(status, {}))
        with self.atomic() as db:
            self._require(db, "application", application_id)
            db["applications"].update(application_id, changes)

    # The remediation engine's view of the same rows (ddtreed/remediation/applications.py) ---
    def application_entries(self) -> list[dict[str, Any]]:
        """Every application as the engine keeps it (JSON fields decoded), oldest first."""
        with self.reading() as db:
            rows = list(db.query("SELECT * FROM applications ORDER BY applied_at, application_id"))
        return [_entry(row) for row in rows]

    def application_entry(self, application_id: str) -> dict[str, Any] | None:
        with self.reading() as db:
            rows = list(db.query("SELECT * FROM applications WHERE application_id = ?", [application_id]))
        return _entry(rows[0]) if rows else None

    def put_application_entry(self, entry: Mapping[str, Any]) -> None:
        """Insert or replace one application as the engine describes it (status checked)."""
        checked(entry["status"], APPLICATION_STATUSES, "application status")
        row = {key: entry.get(key) for key in (
            "application_id", "incident_id", "remediation_id", "kind", "target", "summary", "status",
            "applied_at", "layout", "version", "reverted_at", "verified_at")}
        row.update({key: encode.dumps(entry.get(key)) for key in _ENTRY_JSON}, updated_at=time.time())
        with self.atomic() as db:
            known = row["incident_id"] is not None and db.execute(
                "SELECT 1 FROM incidents WHERE id = ?", [row["incident_id"]]).fetchone() is not None
            if not known:
                row["incident_id"] = None  # an apply outside any incident (CLI, tests): no link to keep
            db["applications"].upsert(row, pk="application_id")

    def applications(self, status: str | None = None) -> list[dict[str, Any]]:
        where, params = ("WHERE status = ?", [status]) if status else ("", [])
        with self.reading() as db:
            rows = db.query(f"SELECT * FROM applications {where} ORDER BY applied_at DESC", params)
            return [_application(row) for row in rows]

    # Frozen signatures -------------------------------------------------------------------
    def freeze(self, fingerprint: str, reason: str, incident_id: int | None = None) -> None:
        """Stop auto-remediation for this signature until `unfreeze`."""
        with self.atomic() as db:
            db["frozen_signatures"].upsert({"fingerprint": fingerprint, "reason": reason,
                                            "incident_id": incident_id, "frozen_at": time.time()},
                                           pk="fingerprint")

    def unfreeze(self, fingerprint: str) -> bool:
        """Lift a freeze; False when the signature was not frozen."""
        with self.atomic() as db:
            cursor = db.execute("DELETE FROM frozen_signatures WHERE fingerprint = ?", [fingerprint])
            return cursor.rowcount > 0

    def is_frozen(self, fingerprint: str) -> bool:
        with self.reading() as db:
            return db.execute("SELECT 1 FROM frozen_signatures WHERE fingerprint = ?",
                              [fingerprint]).fetchone() is not None

    def frozen(self) -> list[dict[str, Any]]:
        with self.reading() as db:
            return list(db.query("SELECT * FROM frozen_signatures ORDER BY frozen_at DESC"))

    # Acceptance baselines ----------------------------------------------------------------
    def add_accept_sample(self, key: str, accept_length: float, healthy: bool = True,
                          incident_id: int | None = None, at: float | None = None) -> None:
        with self.atomic() as db:
            db["accept_samples"].insert({"key": key, "accept_length": float(accept_length),
                                         "healthy": int(healthy), "incident_id": incident_id,
                                         "at": time.time() if at is None else at})

    def baseline(self, key: str, last: int = BASELINE_SAMPLES) -> float | None:
        """Median accept length of the last `last` healthy samples; None before the first."""
        with self.reading() as db:
            rows = db.execute("SELECT accept_length FROM accept_samples WHERE key = ? AND healthy = 1 "
                              "ORDER BY at DESC, id DESC LIMIT ?", [key, int(last)]).fetchall()
        return median([row[0] for row in rows]) if rows else None

    # Canary goldens ----------------------------------------------------------------------
    def save_golden(self, model: str, draft_model: str, sglang_version: str, prompt: str,
                    output_tokens: Sequence[int], output_text: str, trusted: bool = False,
                    at: float | None = None) -> None:
        """Record (or replace) the golden output of one prompt for this model/draft/version."""
        row = {"model": model, "draft_model": draft_model, "sglang_version": sglang_version,
               "prompt": prompt, "output_tokens": encode.dumps(list(output_tokens)),
               "output_text": output_text, "trusted": int(trusted),
               "recorded_at": time.time() if at is None else at}
        with self.atomic() as db:
            db.execute("DELETE FROM goldens WHERE model = ? AND draft_model = ? AND "
                       "sglang_version = ? AND prompt = ?",
                       [model, draft_model, sglang_version, prompt])
            db["goldens"].insert(row)

    def goldens(self, model: str, draft_model: str, sglang_version: str) -> list[dict[str, Any]]:
        with self.reading() as db:
            rows = list(db.query("SELECT * FROM goldens WHERE model = ? AND draft_model = ? AND "
                                 "sglang_version = ? ORDER BY id",
                                 [model, draft_model, sglang_version]))
        for row in rows:
            row["output_tokens"] = encode.loads(row["output_tokens"], [])
            row["trusted"] = bool(row["trusted"])
        return rows

    def delete_goldens(self, model: str, draft_model: str, sglang_version: str) -> int:
        """Forget the goldens of one key (after an intended model change); return how many."""
        with self.atomic() as db:
            return db.execute("DELETE FROM goldens WHERE model = ? AND draft_model = ? AND "
                              "sglang_version = ?", [model, draft_model, sglang_version]).rowcount

    def record_canary_run(self, model: str, draft_model: str, sglang_version: str, passed: bool,
                          detail: str = "", accept_length: float | None = None,
                          data: Mapping[str, Any] | None = None, incident_id: int | None = None,
                          at: float | None = None) -> None:
        """One canary check (pass or fail), so `canary status` survives a daemon restart."""
        with self.atomic() as db:
            db["canary_runs"].insert({
                "model": model, "draft_model": draft_model, "sglang_version": sglang_version,
                "passed": int(passed), "detail": detail, "accept_length": accept_length,
                "data": encode.dumps(data), "incident_id": incident_id,
                "at": time.time() if at is None else at})

    def canary_runs(self, limit: int = 10) -> list[dict[str, Any]]:
        """The latest canary checks, newest first."""
        with self.reading() as db:
            rows = list(db.query("SELECT * FROM canary_runs ORDER BY at DESC, id DESC LIMIT ?",
                                 [int(limit)]))
        for row in rows:
            row["passed"] = bool(row["passed"])
            row["data"] = encode.loads(row["data"])
        return rows

    # Degraded configuration --------------------------------------------------------------
    def set_degraded(self, service_key: str, step: int, step_id: str,
                     better: Mapping[str, Any] | None = None, incident_id: int | None = None) -> None:
        """Remember the ladder step in force and the better configuration to promote to."""
        with self.atomic() as db:
            db["degraded"].upsert({"service_key": service_key, "step": int(step),
                                   "step_id": step_id, "better": encode.dumps(better),
                                   "incident_id": incident_id, "updated_at": time.time()},
                                  pk="service_key")

    def degraded(self, service_key: str) -> dict[str, Any] | None:
        with self.reading() as db:
            rows = list(db.query("SELECT * FROM degraded WHERE service_key = ?", [service_key]))
        if not rows:
            return None
        rows[0]["better"] = encode.loads(rows[0]["better"])
        return rows[0]

    def clear_degraded(self, service_key: str) -> bool:
        with self.atomic() as db:
            return db.execute("DELETE FROM degraded WHERE service_key = ?",
                              [service_key]).rowcount > 0

    # Metrics -----------------------------------------------------------------------------
    def counts(self) -> dict[str, Any]:
        """Totals for the metrics endpoint, read in one snapshot."""
        with self.reading() as db:
            # Kept by triggers (migration 0009): a scrape never scans the incidents table.
            incidents = list(db.query("SELECT category, status, outcome, count "
                                      "FROM incident_counts ORDER BY category, status, outcome"))
            applied = dict(db.execute("SELECT status, COUNT(*) FROM applications GROUP BY status")
                           .fetchall())
            frozen = db.execute("SELECT COUNT(*) FROM frozen_signatures").fetchone()[0]
        return counts_summary(incidents, applied, frozen)


def _entry(row: Mapping[str, Any]) -> dict[str, Any]:
    entry = dict(row)
    for key in _ENTRY_JSON:
        entry[key] = encode.loads(entry.get(key), [] if key == "files" else None)
    return entry


def median(values: list[float]) -> float:
    """`statistics.median(values)` (the middle value, or the mean of the two middle ones), without
    the statistics module: it brings fractions and decimal, ~0.9 MB of the daemon's RSS."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
