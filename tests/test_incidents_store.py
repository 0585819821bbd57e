"""The incident store against real SQLite files: schema, migrations, API, durations, modes."""

from __future__ import annotations

import os
import sqlite3
import stat

import pytest
from test_incidents_support import (FOUNDING_MATCH, FOUNDING_MESSAGE, FOUNDING_SIGNATURE,
                                    founding_crashes, patch_application, record_founding)

from ddtreed.incidents import MIGRATIONS, Store, StoreError, baseline_key, database_path
from ddtreed.incidents import encode
from ddtreed.incidents.migrations import migrate
from ddtreed.records import Crash


@pytest.fixture
def store(tmp_path):
    with Store(database_path(tmp_path / "state")) as opened:
        yield opened


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_state_dir_and_database_are_private_even_with_an_open_umask(tmp_path):
    old = os.umask(0)
    try:
        path = database_path(tmp_path / "deep" / "state")
        with Store(path) as store:
            record_founding(store)
            assert mode(path.parent) == 0o700
            for suffix in ("", "-wal", "-shm"):
                assert mode(f"{path}{suffix}") == 0o600, suffix
    finally:
        os.umask(old)


def test_a_world_readable_database_is_tightened_to_0600(tmp_path):
    path = database_path(tmp_path)
    Store(path).close()
    os.chmod(path, 0o644)
    Store(path).close()
    assert mode(path) == 0o600


def test_migrations_are_recorded_in_order_and_applied_once(tmp_path):
    path = database_path(tmp_path)
    Store(path).close()
    with Store(path) as store:
        names = [row["name"] for row in store.db.query("SELECT name FROM _migrations ORDER BY id")]
        assert names == [name for name, _ in MIGRATIONS]
        assert migrate(store.db) == []
        assert store.db["_migrations"].count == len(MIGRATIONS)
        for table in ("incidents", "steps", "applications", "frozen_signatures", "accept_samples",
                      "goldens", "degraded", "canary_runs"):
            assert table in store.db.table_names()


def test_a_new_migration_applies_once_and_a_failing_one_leaves_nothing_behind(store):
    def add_notes(db):
        db["notes"].create({"id": int, "text": str}, pk="id")

    def broken(db):
        db["half"].create({"id": int}, pk="id")
        db.execute("INSERT INTO no_such_table VALUES (1)")

    assert migrate(store.db, MIGRATIONS + (("0100_notes", add_notes),)) == ["0100_notes"]
    assert migrate(store.db, MIGRATIONS + (("0100_notes", add_notes),)) == []
    with pytest.raises(sqlite3.OperationalError):
        migrate(store.db, MIGRATIONS + (("0100_notes", add_notes), ("0101_broken", broken)))
    assert "half" not in store.db.table_names()
    names = [row["name"] for row in store.db.query("SELECT name FROM _migrations")]
    assert "0101_broken" not in names and names.count("0100_notes") == 1


def test_the_founding_incident_reads_back_whole(store):
    incident_id = record_founding(store)
    incident = store.get(incident_id)
    assert incident["category"] == "cuda-graph-shape-mismatch"
    assert incident["rule_id"] == "ddtree-verify-graph-width"
    assert incident["status"] == "resolved" and incident["outcome"] == "ddtree-verify-graph-width held"
    assert incident["message"] == FOUNDING_MESSAGE and incident["exception"] == "RuntimeError"
    assert incident["fingerprint"] == FOUNDING_SIGNATURE.fingerprint
    assert incident["params"] == {"n0": 8, "n1": 33, "n2": 0, "a": 8, "b": 33}
    assert incident["ranks"] == [f"TP{rank}" for rank in range(8)]
    assert len(incident["tracebacks"]) == 8
    assert incident["tracebacks"][3]["frames"][-1]["function"] == "replay_prepare"
    assert incident["context"]["ddtree_budget"] == 32 and incident["context"]["tp_size"] == 8
    assert incident["remediations"] == list(FOUNDING_MATCH.remediations)
    assert [s["step"] for s in incident["steps"]] == [
        "detected", "diagnosed", "applied", "restarting", "restarted", "healthy"]
    assert incident["steps"][-1]["data"] == {"accept_length": 3.1}
    assert incident["steps"][-1]["since_detection_s"] == pytest.approx(62.0)
    assert incident["durations"] == {"detect_to_diagnose_s": 0.25, "diagnose_to_apply_s": 0.75,
                                     "restart_to_healthy_s": 60.0, "total_s": 70.0}
    [application] = incident["applications"]
    assert application["status"] == "verified"
    assert application["files"][0]["before_sha256"] == "a" * 64
    assert application["files"][0]["after_sha256"] == "b" * 64


def test_restart_to_healthy_measures_the_try_that_worked(store):
    incident_id = store.open_incident("crash", founding_crashes(1), detected_at=0.0)
    for step, at in (("restarting", 10.0), ("failed", 20.0), ("reverted", 21.0),
                     ("restarting", 30.0), ("healthy", 45.0)):
        store.add_step(incident_id, step, at=at)
    assert store.get(incident_id)["durations"]["restart_to_healthy_s"] == 15.0


def test_a_device_assert_flood_is_trimmed_but_keeps_head_and_tail(store):
    flood = tuple(f"assert line {n}" for n in range(5000))
    crash = Crash(kind="traceback", exception="torch.AcceleratorError", message="device-side assert",
                  excerpt=flood)
    incident_id = store.open_incident("crash", (crash,))
    excerpt = store.get(incident_id)["tracebacks"][0]["excerpt"]
    assert excerpt[0] == "assert line 0" and excerpt[-1] == "assert line 4999"
    assert len(excerpt) == encode.EXCERPT_HEAD_LINES + encode.EXCERPT_TAIL_LINES + 1
    assert "lines not kept" in excerpt[encode.EXCERPT_HEAD_LINES]


def test_list_is_newest_first_and_filters_by_status(store):
    first = record_founding(store, detected_at=1000.0)
    second = store.open_incident("preflight", (), None, FOUNDING_MATCH, detected_at=2000.0)
    store.finish(second, "prevented", "launch refused: the width would be 8")
    third = store.open_incident("canary", (), message="output diverged at token 3", detected_at=3000.0)
    assert [row["id"] for row in store.list_incidents()] == [third, second, first]
    assert [row["id"] for row in store.list_incidents(status="open")] == [third]
    assert [row["id"] for row in store.list_incidents(limit=1)] == [third]
    open_row = store.list_incidents(status="open")[0]
    assert open_row["resolved_at"] is None and open_row["duration_s"] is None
    assert open_row["category"] == "unknown" and open_row["message"] == "output diverged at token 3"


def test_find_recent_and_verified_fix_follow_the_signature(store):
    first = record_founding(store, detected_at=1000.0)
    assert [row["id"] for row in store.find_recent("f0und1ng")] == [first]
    assert store.find_recent("f0und1ng", since=1500.0) == []
    fix = store.verified_fix_for("f0und1ng")
    assert fix["application_id"] == "app-1" and fix["incident_id"] == first
    store.mark_application("app-1", "reverted")
    assert store.verified_fix_for("f0und1ng") is None


def test_finish_open_keeps_it_open_and_bad_values_are_refused(store):
    incident_id = store.open_incident("crash", founding_crashes(1))
    store.finish(incident_id, "open", "no remediation known")
    row = store.get(incident_id)
    assert row["status"] == "open" and row["resolved_at"] is None
    assert row["outcome"] == "no remediation known"
    with pytest.raises(ValueError, match="status"):
        store.finish(incident_id, "fixed")
    with pytest.raises(ValueError, match="source"):
        store.open_incident("cron")
    with pytest.raises(ValueError, match="step name"):
        store.add_step(incident_id, "Applied Now")
    with pytest.raises(StoreError, match="no incident 999") as error:
        store.add_step(999, "applied")
    assert error.value.reason == "missing"
    with pytest.raises(StoreError, match="no application nope"):
        store.mark_application("nope", "reverted")


def test_freeze_and_unfreeze_a_signature(store):
    incident_id = record_founding(store)
    assert not store.is_frozen("f0und1ng")
    store.freeze("f0und1ng", "came back after its fix was verified", incident_id)
    assert store.is_frozen("f0und1ng") and store.get(incident_id)["frozen"]
    assert store.frozen()[0]["reason"] == "came back after its fix was verified"
    assert store.unfreeze("f0und1ng") is True
    assert store.unfreeze("f0und1ng") is False
    assert not store.is_frozen("f0und1ng")


def test_baseline_is_the_median_of_the_last_healthy_samples(store):
    key = baseline_key("/models/target", "/models/draft", {"speculative-ddtree-budget": "32"})
    assert key == baseline_key("/models/target", "/models/draft", {"speculative-ddtree-budget": 32})
    assert key != baseline_key("/models/target", "/models/draft", {"speculative-ddtree-budget": 8})
    assert store.baseline(key) is None
    for at, value in enumerate([1.0, 3.0, 3.2, 3.4]):
        store.add_accept_sample(key, value, at=float(at))
    store.add_accept_sample(key, 1.01, healthy=False, at=10.0)  # a collapsed run is no baseline
    assert store.baseline(key) == pytest.approx(3.1)
    assert store.baseline(key, last=3) == pytest.approx(3.2)


def test_goldens_are_kept_per_model_draft_and_version(store):
    store.save_golden("m", "d", "0.5.23", "The capital of France is", [1, 2, 3], " Paris", trusted=True)
    store.save_golden("m", "d", "0.5.23", "The capital of France is", [1, 2, 4], " Paris!")
    store.save_golden("m", "d", "0.5.16", "The capital of France is", [9], " Lyon")
    [golden] = store.goldens("m", "d", "0.5.23")
    assert golden["output_tokens"] == [1, 2, 4] and golden["output_text"] == " Paris!"
    assert golden["trusted"] is False
    assert store.delete_goldens("m", "d", "0.5.23") == 1
    assert store.goldens("m", "d", "0.5.23") == []
    assert len(store.goldens("m", "d", "0.5.16")) == 1


def test_canary_runs_read_back_newest_first(store):
    store.record_canary_run("m", "d", "0.5.23", True, "4/4 prompts match", 3.2, at=1.0)
    store.record_canary_run("m", "d", "0.5.23", False, "prompt 2 diverged at token 5", 3.1,
                            {"prompt": 2, "token": 5, "golden": [7], "got": [9]}, at=2.0)
    latest, earlier = store.canary_runs()
    assert latest["passed"] is False and latest["data"]["token"] == 5
    assert earlier["passed"] is True and earlier["accept_length"] == 3.2
    assert len(store.canary_runs(limit=1)) == 1


def test_degraded_state_remembers_the_step_and_the_better_configuration(store):
    assert store.degraded("svc") is None
    store.set_degraded("svc", 1, "ddtree-to-dflash", {"argv": ["--speculative-algorithm", "DDTREE"]})
    state = store.degraded("svc")
    assert state["step"] == 1 and state["step_id"] == "ddtree-to-dflash"
    assert state["better"] == {"argv": ["--speculative-algorithm", "DDTREE"]}
    store.set_degraded("svc", 2, "verify-graph-off")
    assert store.degraded("svc")["step"] == 2
    assert store.clear_degraded("svc") and store.degraded("svc") is None


def test_counts_for_metrics(store):
    record_founding(store)
    store.record_application(None, patch_application("app-2"))
    store.mark_application("app-2", "reverted")
    store.open_incident("canary", (), message="diverged")
    store.freeze("f0und1ng", "test")
    counts = store.counts()
    assert counts["incidents_total"] == 2 and counts["open_incidents"] == 1
    assert counts["applications"] == {"applied": 0, "reverted": 1, "verified": 1}
    assert counts["frozen_signatures"] == 1
    assert {"category": "cuda-graph-shape-mismatch", "status": "resolved",
            "outcome": "ddtree-verify-graph-width held", "count": 1} in counts["incidents"]


def test_a_failed_write_leaves_nothing_half_recorded(store):
    incident_id = store.open_incident("crash", founding_crashes(1))
    with pytest.raises(RuntimeError):
        with store.atomic() as db:
            db["steps"].insert({"incident_id": incident_id, "step": "applied", "at": 1.0})
            raise RuntimeError("the apply failed midway")
    assert [s["step"] for s in store.get(incident_id)["steps"]] == ["detected"]


def test_not_a_database_is_one_clear_error(tmp_path):
    path = database_path(tmp_path)
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a valid ddtreed database") as error:
        Store(path)
    assert error.value.reason == "corrupt" and not error.value.retryable


def test_create_false_refuses_a_missing_database(tmp_path):
    with pytest.raises(StoreError, match="no incident database") as error:
        Store(database_path(tmp_path / "none"), create=False)
    assert error.value.reason == "missing"
    assert not (tmp_path / "none").exists()


def test_prune_keeps_the_newest_open_and_patched_incidents(store):
    patched = record_founding(store, detected_at=10.0)
    closed = []
    for n in range(30):
        incident_id = store.open_incident("crash", founding_crashes(1), detected_at=100.0 + n)
        store.finish(incident_id, "escalated", "crash loop", at=100.5 + n)
        closed.append(incident_id)
    still_open = store.open_incident("crash", founding_crashes(1), detected_at=50.0)
    assert store.prune(keep=5) == 25
    remaining = {row["id"] for row in store.list_incidents(limit=100)}
    assert remaining == set(closed[-5:]) | {patched, still_open}
    assert store.db.execute("SELECT COUNT(*) FROM steps WHERE incident_id NOT IN "
                            "(SELECT id FROM incidents)").fetchone()[0] == 0
    assert store.prune(keep=5) == 0


def test_nested_atomic_blocks_commit_or_roll_back_together(store):
    with pytest.raises(RuntimeError):
        with store.atomic():
            incident_id = store.open_incident("crash", founding_crashes(1))
            store.add_step(incident_id, "diagnosed", "inside the same transaction")
            raise RuntimeError("abandon both")
    assert store.list_incidents() == []
    with store.atomic():
        incident_id = store.open_incident("crash", founding_crashes(1))
        store.add_step(incident_id, "diagnosed", "kept")
    assert [s["step"] for s in store.get(incident_id)["steps"]] == ["detected", "diagnosed"]


def test_a_metrics_thread_reads_while_the_daemon_thread_writes(store):
    import threading

    errors: list[BaseException] = []
    stop = threading.Event()

    def scrape():
        try:
            while not stop.is_set():
                store.counts()
        except BaseException as error:  # surfaced by the assert below
            errors.append(error)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for _ in range(100):
            store.add_step(store.open_incident("crash", founding_crashes(1)), "diagnosed")
    finally:
        stop.set()
        scraper.join(timeout=30)
    assert errors == [] and store.counts()["incidents_total"] == 100
