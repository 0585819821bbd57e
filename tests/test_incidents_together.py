"""Issue 19: an incident's writes that follow each other with nothing done to the host between
them are one SQLite transaction (`Store.together`): one commit, all of them or none, on disk when
it returns; through DurableStore a batch that met a lock is retried whole, never half twice."""

from __future__ import annotations

import sqlite3

import pytest
from test_incidents_support import FOUNDING_MATCH, FOUNDING_SIGNATURE, Holder, founding_crashes

from ddtreed.incidents import Store, StoreError, database_path
from ddtreed.incidents.durable import DurableStore


def commits(store: Store) -> list[str]:
    """Every write transaction the store's connection begins, as it runs."""
    begun: list[str] = []
    store.db.conn.set_trace_callback(lambda sql: begun.append(sql) if sql.startswith("BEGIN IMMEDIATE") else None)
    return begun


def steps_of(path, incident_id: int) -> list[tuple[str, str]]:
    """What another connection (a reader, after a crash of ours) finds on disk."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("SELECT step, detail FROM steps WHERE incident_id = ? ORDER BY id", [incident_id]).fetchall()


def status_of(path, incident_id: int) -> tuple[str, str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("SELECT status, outcome FROM incidents WHERE id = ?", [incident_id]).fetchone()


@pytest.fixture
def store(tmp_path):
    with Store(database_path(tmp_path / "state")) as opened:
        yield opened


def test_a_step_and_the_status_it_leads_to_are_one_commit(store):
    incident = store.open_incident("crash", founding_crashes(2), FOUNDING_SIGNATURE, FOUNDING_MATCH)
    begun = commits(store)

    def record(batch: Store) -> str:
        batch.freeze(FOUNDING_SIGNATURE.fingerprint, "no remediation left to try", incident)
        batch.add_step(incident, "escalated", "no remediation left to try; auto-remediation frozen")
        batch.finish(incident, "escalated", "no remediation left to try")
        return "done"

    assert store.together(record) == "done"
    assert len(begun) == 1  # one transaction, one commit
    assert [step for step, _ in steps_of(store.path, incident)] == ["detected", "escalated"]
    assert status_of(store.path, incident) == ("escalated", "no remediation left to try")
    assert store.is_frozen(FOUNDING_SIGNATURE.fingerprint)


def test_a_batch_that_fails_midway_leaves_nothing(store):
    incident = store.open_incident("crash", founding_crashes(1))
    with pytest.raises(StoreError) as missing:
        store.together(lambda batch: (batch.add_step(incident, "not-remediated", "policy off"),
                                      batch.finish(incident + 1, "open", "policy off")))
    assert missing.value.reason == "missing"
    assert [step for step, _ in steps_of(store.path, incident)] == ["detected"]
    store.add_step(incident, "not-remediated", "policy off")  # the store is usable afterwards
    assert [step for step, _ in steps_of(store.path, incident)] == ["detected", "not-remediated"]


def test_a_new_incident_and_its_steps_in_one_commit_return_its_id(store):
    begun = commits(store)

    def record(batch: Store) -> int:
        opened = batch.open_incident("crash", founding_crashes(1), FOUNDING_SIGNATURE, FOUNDING_MATCH)
        batch.add_step(opened, "observed", "the service stayed up and healthy")
        batch.finish(opened, "observed", "the service stayed up and healthy")
        return opened

    incident = store.together(record)
    assert len(begun) == 1
    assert status_of(store.path, incident)[0] == "observed"
    assert store.get(incident)["steps"][-1]["step"] == "observed"


def test_a_locked_batch_is_retried_whole_by_the_durable_store(tmp_path):
    """Another process holds the write lock past the busy timeout: the batch is rolled back,
    waited out and run again from its start, so each step is there exactly once."""
    path = database_path(tmp_path / "state")
    with Store(path) as plain:
        incident = plain.open_incident("crash", founding_crashes(1))
    holder = Holder(path, "write")
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 1:
            holder.release()

    try:
        durable = DurableStore(Store(path, busy_timeout_s=0.2), wait=wait)
        durable.together(lambda batch: (batch.add_step(incident, "not-remediated", "policy off"),
                                        batch.finish(incident, "open", "policy off")))
    finally:
        holder.kill()
    assert len(waits) == 1  # it met the lock once, then went through
    assert steps_of(path, incident)[1:] == [("not-remediated", "policy off")]
    assert status_of(path, incident) == ("open", "policy off")
    durable.current.close()
