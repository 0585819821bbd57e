"""The store on the standard library's sqlite3 (`ddtreed/incidents/lite.py`, what `ddtreed run`
uses since issue 19's RSS goal) writes the same database as the store through sqlite-utils did:
the same schema text in `sqlite_master`, the same rows in every table, and so the same
`ddtreed incidents --json` output, for one history of writes made through both. And the daemon
path's two other savings keep their results: the baseline's median without `statistics`, the
stderr tail trimmed when read instead of on every feed."""

from __future__ import annotations

import itertools
from collections import deque
import json
import sqlite3
import statistics
import time

import pytest
import sqlite_utils
from hypothesis import given, settings
from hypothesis import strategies as st
from test_incidents_support import founding_crashes, record_founding

from ddtreed.cli import main
from ddtreed.incidents import Store, connection, database_path
from ddtreed.incidents.lite import Database, NotFoundError, value_of
from ddtreed.incidents.state import median
from ddtreed.incidents.stderr_tail import LINE_CHARS, TAIL_BYTES, TAIL_LINES, StderrTail
from ddtreed.records import Application


def sqlite_utils_database(raw: sqlite3.Connection):
    return sqlite_utils.Database(raw, execute_plugins=False)  # what connection.py wrapped before


def history(store: Store) -> None:
    """Every kind of write the daemon and the CLI make, with times the clock below fixes."""
    record_founding(store, detected_at=1_700_000_000.0)
    escalated = store.open_incident("crash", founding_crashes(2), detected_at=1_700_000_500.0,
                                    context={"port": 30000, "argv": ["python", "-m", "sglang"]})
    store.add_step(escalated, "escalated", "no remediation left to try", data={"tried": ["a", "b"]})
    store.set_remediation(escalated, "disable-cuda-graph", "app-2")
    store.record_recurrence(escalated, "again", {"count": 2})
    store.amend_recurrence(escalated, "again, amended", {"count": 3})
    store.finish(escalated, "escalated", "no remediation left to try")
    store.record_application(escalated, Application("app-2", "disable-cuda-graph", "args", "launch",
                                                    "--disable-cuda-graph", applied_at=1_700_000_510.0))
    store.mark_application("app-2", "verified")
    store.record_application(None, Application("app-3", "x", "env", "launch", "X=1"))
    store.mark_application("app-3", "reverted")
    store.freeze("f" * 16, "looped twice", escalated)
    store.freeze("e" * 16, "to be thawed")
    store.unfreeze("e" * 16)
    for accept in (3.1, 3.3, 2.9):
        store.add_accept_sample("model|draft", accept)
    store.add_accept_sample("model|draft", 1.0, healthy=False, incident_id=escalated)
    store.save_golden("m", "d", "0.5.16", "2+2=", [19, 220], "4", trusted=True)
    store.save_golden("m", "d", "0.5.16", "2+2=", [19, 221], "four")  # replaces the first
    store.record_canary_run("m", "d", "0.5.16", False, "diverged at token 3", 2.5, {"token": 3}, escalated)
    store.set_degraded("svc", 2, "no-cuda-graph", {"argv": ["--x"]}, escalated)
    store.set_degraded("svc", 3, "eager", None, escalated)  # the upsert's update half
    store.open_incident("canary", (), message="output diverged at token 3", detected_at=1_700_000_900.0)
    closed = store.open_incident("crash", founding_crashes(1), detected_at=1_600_000_000.0)
    store.finish(closed, "resolved", "fixed")
    store.prune(keep=3)


def dump(path) -> dict:
    raw = sqlite3.connect(path)
    tables = [row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    result = {"schema": list(raw.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name")),
              "rows": {table: list(raw.execute(f'SELECT * FROM "{table}" ORDER BY 1, 2')) for table in tables},
              "journal_mode": raw.execute("PRAGMA journal_mode").fetchone()[0]}
    raw.close()
    return result


def written_through(wrap, directory, monkeypatch, capsys) -> tuple[dict, list, dict]:
    ticks = itertools.count(1_700_001_000.0, 0.5)
    monkeypatch.setattr(connection, "DATABASE", wrap)
    monkeypatch.setattr(time, "time", lambda: next(ticks))
    with Store(database_path(directory)) as store:
        history(store)
    monkeypatch.undo()
    capsys.readouterr()  # the migrations' log lines
    assert main(["incidents", "--state-dir", str(directory), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert main(["incidents", "--state-dir", str(directory), "--json", "show", "2"]) == 0
    shown = json.loads(capsys.readouterr().out)
    return dump(database_path(directory)), listed, shown


def test_the_stdlib_store_writes_what_the_sqlite_utils_store_wrote(tmp_path, monkeypatch, capsys):
    old = written_through(sqlite_utils_database, tmp_path / "old", monkeypatch, capsys)
    new = written_through(Database, tmp_path / "new", monkeypatch, capsys)
    old_file, old_list, old_show = old
    new_file, new_list, new_show = new
    assert new_file["schema"] == old_file["schema"]
    assert new_file["rows"] == old_file["rows"]
    assert new_file["journal_mode"] == old_file["journal_mode"] == "wal"
    assert new_list == old_list and len(new_list) == 3  # pruned to 3, the open ones kept
    assert new_show == old_show and new_show["steps"] and new_show["applications"]
    assert sum(len(rows) for rows in new_file["rows"].values()) > 20


def test_a_database_made_through_sqlite_utils_is_opened_and_written_by_the_stdlib_store(tmp_path, monkeypatch):
    """An existing file (written by an earlier ddtreed): no migration, writes go on."""
    path = database_path(tmp_path)
    monkeypatch.setattr(connection, "DATABASE", sqlite_utils_database)
    with Store(path) as store:
        first = store.open_incident("crash", founding_crashes(1), detected_at=1.0)
    monkeypatch.undo()
    with Store(path) as store:
        assert type(store.db) is Database
        second = store.open_incident("crash", founding_crashes(1), detected_at=2.0)
        store.finish(first, "resolved", "fixed")
        assert [i["id"] for i in store.list_incidents()] == [second, first]
        assert store.counts()["incidents"]


def test_values_are_stored_as_sqlite_utils_stores_them():
    from datetime import date, timedelta
    from decimal import Decimal
    from uuid import UUID

    for value in ({"a": [1, "é"]}, [1, 2], (1, "x"), Decimal("1.5"), date(2026, 12, 1), timedelta(seconds=3),
                  UUID(int=5), None, 3, 2.5, "text", b"\x00"):
        assert value_of(value) == sqlite_utils.db.jsonify_if_needed(value), value


def test_update_of_a_missing_row_raises_and_writes_nothing(tmp_path):
    with Store(database_path(tmp_path)) as store:
        with pytest.raises(NotFoundError):
            with store.atomic() as db:
                db["incidents"].update(99, {"status": "resolved"})
        assert store.list_incidents() == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=16.0), min_size=1, max_size=40))
def test_the_baseline_median_is_statistics_median(values):
    assert median(values) == statistics.median(values)


class EagerTail:
    """StderrTail as it was: every line trimmed and counted as it is fed."""

    def __init__(self, max_lines=TAIL_LINES, max_bytes=TAIL_BYTES):
        self.max_bytes, self.lines, self.size = max_bytes, deque(maxlen=max_lines), 0

    def feed(self, lines):
        for line in lines:
            line = line.rstrip("\r\n")
            if len(line) > LINE_CHARS:
                line = line[:LINE_CHARS] + "…"
            if len(self.lines) == self.lines.maxlen:
                self.size -= len(self.lines[0].encode())
            self.lines.append(line)
            self.size += len(line.encode())
            while self.size > self.max_bytes and len(self.lines) > 1:
                self.size -= len(self.lines.popleft().encode())


_LINE = st.one_of(st.text(max_size=60), st.text(alphabet="é\r\nx", max_size=900), st.just("x" * 3000))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_LINE, max_size=60), max_size=8), st.sampled_from([(40, 8192), (5, 100), (3, 1)]))
def test_the_lazy_stderr_tail_keeps_the_lines_the_eager_one_kept(feeds, bounds):
    lazy, eager = StderrTail(*bounds), EagerTail(*bounds)
    for lines in feeds:
        lazy.feed(lines)
        eager.feed(lines)
        assert lazy.lines() == list(eager.lines)
