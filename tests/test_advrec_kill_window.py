"""Adversary's test of the window record-before-diagnosis opened (71e2591): a real `ddtreed run`
SIGKILLed right after the crash's row is committed (DDTREED_KILL_AT=incident:committed), which
since 71e2591 is also before the rules judged it; then the next `ddtreed run` on the same state.

What a person then sees must be sane: the first incident closed by the recovery (not left open,
not a recurrence target), diagnosed by the next start from the crash it recorded (session 17: it
said "not diagnosed" before, which was true but left the operator without the reading the rules
would have given; a `diagnosed` step now says the reading came late and from the record), and the
same crash met again by the new daemon as its own, diagnosed incident.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "programs"))
sys.path.insert(0, str(Path(__file__).parent))

from fault_harness import DaemonProcess, kill_service_sessions, killed_at_commit, wait_for  # noqa: E402
from test_incidents_durability import _config  # noqa: E402

from ddtreed.cli import main  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402


def test_a_daemon_killed_before_the_diagnosis_leaves_a_closed_incident_diagnosed_from_its_record(tmp_path, capsys):
    directory = tmp_path / "run"
    directory.mkdir()
    config = _config(directory)
    state = directory / "state"
    first = killed_at_commit(config, directory / "first.jsonl")
    second = None
    try:
        with Store(database_path(state), create=False) as store:
            [killed] = store.list_incidents()
            assert killed["category"] == "unknown" and killed["rule_id"] is None  # the row, not yet judged
        second = DaemonProcess(config, directory / "second.jsonl")
        wait_for(lambda: second.has("restart_budget_spent"), 90,
                 what="the next daemon to meet the crash again and give up")
    finally:
        first.kill()
        if second is not None:
            second.stop()
        kill_service_sessions(directory)  # the first daemon's service outlived it (until the second's recovery)
    with Store(database_path(state), create=False) as store:
        old, new = sorted(store.list_incidents(), key=lambda row: row["id"])
        story = store.get(old["id"])
        again = store.get(new["id"])
    assert old["id"] == killed["id"] and old["status"] != "open"
    assert [step["step"] for step in story["steps"]] == ["detected", "reconciled", "diagnosed"]
    assert story["steps"][-1]["detail"].startswith("at a later start, from the recorded crash"), story["steps"]
    assert story["category"] == "cuda-graph-shape-mismatch" and story["applications"] == []
    # the crash again: its own incident (the killed one was closed), diagnosed this time
    assert again["fingerprint"] == killed["fingerprint"] and again["category"] == "cuda-graph-shape-mismatch"
    assert [step["step"] for step in again["steps"]][:2] == ["detected", "diagnosed"]
    capsys.readouterr()
    assert main(["incidents", "show", str(old["id"]), "--state-dir", str(state)]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("incident "))
    assert "cuda-graph-shape-mismatch" in header and "not diagnosed" not in header, header
