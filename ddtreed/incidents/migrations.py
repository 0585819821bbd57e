"""Named schema migrations, applied once each, in order, each in its own transaction."""

from __future__ import annotations

import time
from typing import Callable

import structlog

from .connection import transaction
from .lite import Database

log = structlog.get_logger(__name__)

Migration = Callable[[Database], None]


def _incidents(db: Database) -> None:
    db["incidents"].create({
        "id": int, "source": str, "service": str, "category": str, "rule_id": str, "title": str,
        "diagnosis": str, "advice": str, "fingerprint": str, "exception": str, "message": str,
        "normalized_message": str, "params": str, "ranks": str, "tracebacks": str,
        "context": str, "remediations": str, "status": str, "remediation_id": str,
        "application_id": str, "outcome": str, "started_at": float, "resolved_at": float,
    }, pk="id", not_null={"source", "category", "status", "started_at"},
        defaults={"status": "open", "service": "", "category": "unknown"})
    db["incidents"].create_index(["fingerprint", "started_at"], index_name="incidents_fingerprint")
    db["incidents"].create_index(["status"], index_name="incidents_status")
    db["steps"].create({
        "id": int, "incident_id": int, "step": str, "detail": str, "data": str, "at": float,
    }, pk="id", not_null={"incident_id", "step", "at"}, foreign_keys=[("incident_id", "incidents", "id")])
    db["steps"].create_index(["incident_id", "at"], index_name="steps_incident")


def _applications(db: Database) -> None:
    db["applications"].create({
        "application_id": str, "incident_id": int, "remediation_id": str, "kind": str,
        "target": str, "summary": str, "files": str, "launch": str, "status": str,
        "applied_at": float, "updated_at": float,
    }, pk="application_id", not_null={"remediation_id", "kind", "status"},
        foreign_keys=[("incident_id", "incidents", "id")])
    db["applications"].create_index(["incident_id"], index_name="applications_incident")


def _frozen(db: Database) -> None:
    db["frozen_signatures"].create({
        "fingerprint": str, "reason": str, "incident_id": int, "frozen_at": float,
    }, pk="fingerprint")


def _baselines(db: Database) -> None:
    db["accept_samples"].create({
        "id": int, "key": str, "accept_length": float, "healthy": int, "incident_id": int,
        "at": float,
    }, pk="id", not_null={"key", "accept_length", "at"})
    db["accept_samples"].create_index(["key", "healthy", "at"], index_name="accept_samples_key")


def _goldens(db: Database) -> None:
    db["goldens"].create({
        "id": int, "model": str, "draft_model": str, "sglang_version": str, "prompt": str,
        "output_tokens": str, "output_text": str, "trusted": int, "recorded_at": float,
    }, pk="id", not_null={"model", "draft_model", "sglang_version", "prompt"})
    db["goldens"].create_index(["model", "draft_model", "sglang_version", "prompt"],
                               index_name="goldens_key", unique=True)


def _degraded(db: Database) -> None:
    db["degraded"].create({
        "service_key": str, "step": int, "step_id": str, "better": str, "incident_id": int,
        "updated_at": float,
    }, pk="service_key")


def _canary_runs(db: Database) -> None:
    db["canary_runs"].create({
        "id": int, "model": str, "draft_model": str, "sglang_version": str, "passed": int,
        "detail": str, "accept_length": float, "data": str, "incident_id": int, "at": float,
    }, pk="id", not_null={"passed", "at"})
    db["canary_runs"].create_index(["at"], index_name="canary_runs_at")


def _application_engine_fields(db: Database) -> None:
    """The remediation engine writes here too (one source of truth): what it needs to undo a change."""
    for column, kind in (("layout", str), ("version", str), ("previous", str), ("reverted_at", float),
                         ("verified_at", float)):
        db["applications"].add_column(column, kind)
    db.execute("UPDATE applications SET verified_at = updated_at WHERE status = 'verified'")


def _scale(db: Database) -> None:
    """What keeps a store of 100,000 incidents fast: the list's order and filter as indexes, and
    the metrics totals kept by triggers in `incident_counts` (a scrape reads a few rows instead of
    grouping the whole table). The triggers see every write path, the CLI's included."""
    db["incidents"].create_index(["started_at", "id"], index_name="incidents_started")
    db["incidents"].create_index(["status", "started_at", "id"], index_name="incidents_status_started")
    db.execute("CREATE TABLE incident_counts (category TEXT NOT NULL, status TEXT NOT NULL, "
               "outcome TEXT NOT NULL, count INTEGER NOT NULL, "
               "PRIMARY KEY (category, status, outcome)) WITHOUT ROWID")
    db.execute("INSERT INTO incident_counts SELECT category, status, COALESCE(outcome, ''), "
               "COUNT(*) FROM incidents GROUP BY category, status, COALESCE(outcome, '')")
    add = ("INSERT INTO incident_counts VALUES ({row}.category, {row}.status, "
           "COALESCE({row}.outcome, ''), 1) ON CONFLICT (category, status, outcome) "
           "DO UPDATE SET count = count + 1;")
    remove = ("UPDATE incident_counts SET count = count - 1 WHERE category = {row}.category "
              "AND status = {row}.status AND outcome = COALESCE({row}.outcome, ''); "
              "DELETE FROM incident_counts WHERE count <= 0;")
    db.execute("CREATE TRIGGER incident_counts_insert AFTER INSERT ON incidents BEGIN "
               + add.format(row="NEW") + " END")
    db.execute("CREATE TRIGGER incident_counts_delete AFTER DELETE ON incidents BEGIN "
               + remove.format(row="OLD") + " END")
    db.execute("CREATE TRIGGER incident_counts_update AFTER UPDATE OF category, status, outcome "
               "ON incidents BEGIN " + remove.format(row="OLD") + " " + add.format(row="NEW")
               + " END")


# Append only: a released migration is never edited or reordered, only followed by new ones.
MIGRATIONS: tuple[tuple[str, Migration], ...] = (
    ("0001_incidents_and_steps", _incidents),
    ("0002_applications", _applications),
    ("0003_frozen_signatures", _frozen),
    ("0004_accept_baselines", _baselines),
    ("0005_canary_goldens", _goldens),
    ("0006_degraded_state", _degraded),
    ("0007_canary_runs", _canary_runs),
    ("0008_application_engine_fields", _application_engine_fields),
    ("0009_scale_indexes_and_counts", _scale),
)


def applied(db: Database) -> list[str]:
    if "_migrations" not in db.table_names():
        return []
    return [row["name"] for row in db.query("SELECT name FROM _migrations ORDER BY id")]


def migrate(db: Database, migrations=MIGRATIONS) -> list[str]:
    """Apply the pending migrations; return the names applied now."""
    if len(applied(db)) == len(migrations):
        return []  # the common case: no write lock needed, so the CLI never waits on the daemon
    done_now = []
    for name, function in migrations:
        with transaction(db):
            # Re-checked under the write lock: the daemon and a CLI may start at the same moment.
            if not db["_migrations"].exists():
                db["_migrations"].create({"id": int, "name": str, "applied_at": float}, pk="id")
                db["_migrations"].create_index(["name"], unique=True)
            if name in applied(db):
                continue
            function(db)
            db["_migrations"].insert({"name": name, "applied_at": time.time()})
        done_now.append(name)
        log.info("incidents.migration_applied", migration=name)
    return done_now
