"""Adversary (adv17) of start-up recovery (ddtreed/loop/recovery.py: recover(), which since 1cd9098
also hands its ids to diagnose_recorded): one open incident whose `tracebacks` column holds a
deeply nested JSON array (200 KB of `[[[[...]]]]`, a corrupted or hostile row) makes `store.get()`
raise RecursionError from json.loads. recover() reads every open incident with store.get() and
catches only StoreError, so the RecursionError ends `ddtreed run` before the service is launched;
the row stays open, so every start (systemd's Restart=on-failure) dies the same way: a healthy
service never starts because of one bad row. (diagnose_recorded() would have caught it: it never
gets the chance.) A truncated JSON value (a torn or hand-edited row) does the same with ValueError.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))
sys.path.insert(0, str(Path(__file__).parent))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, kill_service_sessions, seed_open_crash_row, wait_for  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402


@pytest.mark.parametrize("column, value", [
    ("tracebacks", "[" * 100_000 + "]" * 100_000),  # deep nesting: RecursionError
    ("tracebacks", '[{"kind": "traceback", "exception": "RuntimeError", "mess'),  # a truncated write: ValueError
    ("params", "{not json"),
], ids=["deeply-nested-tracebacks", "truncated-tracebacks", "garbled-params"])
def test_a_bad_json_column_of_an_open_incident_does_not_stop_the_daemon_from_starting(tmp_path, column, value):
    directory = tmp_path / "run"
    directory.mkdir()
    config = fast_service.write_config(directory, port=free_port(), policy={"mode": "off"})
    state = directory / "state"
    incident = seed_open_crash_row(state, column, value)  # a killed daemon's open row, its JSON corrupted
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("service.started") or daemon.process.poll() is not None, 60,
                 what="the daemon to launch its service (or die)")
        code = daemon.process.poll()
    finally:
        daemon.stop()
        kill_service_sessions(directory)
    tail = "\n".join(daemon.log_path.read_text(errors="replace").splitlines()[-5:])
    assert code is None, f"ddtreed exited {code} at start-up over one bad row:\n{tail}"
    assert daemon.has("service.started")
    # the operator still reads the incident, told which column could not be read; the row is left as stored
    from ddtreed.cli import main

    assert main(["incidents", "show", str(incident), "--state-dir", str(state)]) == 0
    with Store(database_path(state), create=False) as store:
        shown = store.get(incident)
        assert shown["status"] != "open", shown
        if column == "tracebacks":  # the record cannot be read: named, never judged, left as stored
            assert shown["unreadable"] == ["tracebacks"] and shown["title"] is None, shown
            with store.reading() as db:
                [row] = list(db.query("SELECT tracebacks FROM incidents WHERE id = ?", [incident]))
                assert row["tracebacks"] == value
        else:  # derived parameters: the late verdict on the readable record writes them anew
            assert "unreadable" not in shown and shown["title"] is not None, shown
