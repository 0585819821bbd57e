"""The store's scale features: the trigger-kept metrics totals, the list's indexes, retention."""

from ddtreed.incidents import Store
from ddtreed.incidents.connection import connect
from ddtreed.incidents.migrations import MIGRATIONS, migrate

# A store written by the code before the scale migration.
BEFORE_SCALE = tuple(m for m in MIGRATIONS if m[0] != "0009_scale_indexes_and_counts")
from test_incidents_support import founding_crashes

from ddtreed.incidents import database_path


def grouped(store: Store) -> list[tuple[str, str, str, int]]:
    """What the counts table must equal: a full GROUP BY over the incidents table."""
    return [tuple(row) for row in store.db.execute(
        "SELECT category, status, COALESCE(outcome, ''), COUNT(*) FROM incidents "
        "GROUP BY category, status, COALESCE(outcome, '') ORDER BY 1, 2, 3")]


def from_counts(store: Store) -> list[tuple[str, str, str, int]]:
    return [(row["category"], row["status"], row["outcome"], row["count"])
            for row in store.counts()["incidents"]]


def test_counts_follow_every_insert_update_and_delete(tmp_path):
    store = Store(database_path(tmp_path))
    ids = [store.open_incident("crash", founding_crashes(1), detected_at=float(n)) for n in range(12)]
    assert from_counts(store) == grouped(store) == [("unknown", "open", "", 12)]
    for n, incident_id in enumerate(ids[:8]):
        store.finish(incident_id, "resolved" if n % 2 else "escalated",
                     "restarted; healthy" if n % 2 else "", at=100.0 + n)
    assert from_counts(store) == grouped(store)
    assert store.counts()["open_incidents"] == 4 and store.counts()["incidents_total"] == 12
    assert store.prune(keep=2) == 8  # the newest two are open anyway
    assert from_counts(store) == grouped(store)
    assert store.counts()["incidents_total"] == 4
    store.close()


def test_an_existing_store_is_backfilled_when_it_gains_the_counts_table(tmp_path):
    path = database_path(tmp_path)
    db = connect(path, 5.0)
    migrate(db, BEFORE_SCALE)
    with db.conn:
        db.conn.executemany(
            "INSERT INTO incidents (source, category, status, outcome, started_at) "
            "VALUES ('crash', ?, ?, ?, ?)",
            [("cuda-oom", "resolved", "x", 1.0), ("cuda-oom", "resolved", "x", 2.0),
             ("nccl-error", "open", None, 3.0)])
    db.close()
    store = Store(path)
    assert from_counts(store) == [("cuda-oom", "resolved", "x", 2), ("nccl-error", "open", "", 1)]
    store.close()


def test_the_list_and_its_status_filter_use_an_index(tmp_path):
    store = Store(database_path(tmp_path))
    for sql in ("SELECT id FROM incidents ORDER BY started_at DESC, id DESC LIMIT 50",
                "SELECT id FROM incidents WHERE status = 'open' ORDER BY started_at DESC, id DESC LIMIT 50"):
        plan = " ".join(row[3] for row in store.db.execute("EXPLAIN QUERY PLAN " + sql))
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # no sort of the whole table
    store.close()


def test_prune_by_age_keeps_open_and_recent_incidents(tmp_path):
    store = Store(database_path(tmp_path))
    old_closed = store.open_incident("crash", founding_crashes(1), detected_at=1000.0)
    store.finish(old_closed, "resolved", "restarted; healthy", at=1001.0)
    old_open = store.open_incident("crash", founding_crashes(1), detected_at=1000.0)
    recent = store.open_incident("crash", founding_crashes(1), detected_at=9000.0)
    store.finish(recent, "resolved", "restarted; healthy", at=9001.0)
    assert store.prune(keep=1000, max_age_s=3600.0, now=10_000.0) == 1
    remaining = {row["id"] for row in store.list_incidents(limit=10)}
    assert remaining == {old_open, recent}
    store.close()
