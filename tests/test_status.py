"""daemon-state.json: atomic writes, tolerant reads, clear errors."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.ops.status import STATES, DaemonStatus, StatusBoard, StatusError, read_status, status_path, write_status

ROOT = Path(__file__).resolve().parent.parent


def test_round_trip_keeps_every_field(tmp_path):
    status = DaemonStatus(
        pid=1234, state="running", status_text="serving, accept len 3.4", service_pid=5678,
        service_started_at=1000.0, restarts=2, last_healthy_at=1100.0, last_accept_length=3.4,
        current_incident_id=None, degraded={"remediations": ["ddtree-verify-graph-width"], "since": 900.0},
        canary={"last_run_at": 1050.0, "passed": True, "detail": "4/4 prompts match"},
        config="/etc/ddtreed/main.toml", service_token="0123abcd",
    )
    written = write_status(tmp_path, status)
    assert written.updated_at > 0
    assert read_status(tmp_path) == written
    assert stat.S_IMODE(os.stat(status_path(tmp_path)).st_mode) == 0o600
    on_disk = json.loads(status_path(tmp_path).read_text())
    assert set(on_disk) == {"pid", "state", "status_text", "service_pid", "service_started_at", "restarts",
                            "last_healthy_at", "last_accept_length", "current_incident_id", "degraded",
                            "canary", "config", "service_token", "progress", "updated_at"}


def test_no_snapshot_reads_as_none(tmp_path):
    assert read_status(tmp_path) is None


def test_unknown_state_is_refused():
    with pytest.raises(ValueError, match="state must be one of"):
        DaemonStatus(pid=1, state="sleeping")


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a daemon-state JSON file"),
    ("[]", "expected a JSON object"),
    ('{"state": "running"}', "missing key 'pid'"),
    ('{"pid": "x", "state": "running"}', "pid must be an integer"),
    ('{"pid": 1, "state": "dancing"}', "state must be one of"),
])
def test_a_broken_snapshot_names_the_file(tmp_path, content, message):
    status_path(tmp_path).write_text(content)
    with pytest.raises(StatusError, match=message) as caught:
        read_status(tmp_path)
    assert str(status_path(tmp_path)) in str(caught.value)


def test_keys_from_a_newer_daemon_are_ignored(tmp_path):
    status_path(tmp_path).write_text(json.dumps({"pid": 7, "state": "backoff", "future_key": 1}))
    assert read_status(tmp_path) == DaemonStatus(pid=7, state="backoff")


def test_board_publishes_each_change_and_each_new_text(tmp_path):
    texts = []
    board = StatusBoard.start(str(tmp_path), config="/etc/ddtreed/main.toml", on_text=texts.append)
    assert read_status(tmp_path).state == "starting"
    board.update(state="running", status_text="loading weights 3/8", service_pid=42)
    board.update(restarts=1)  # same text: systemd is not told again
    board.update(state="diagnosing", status_text="incident 12: diagnosing", current_incident_id=12)
    assert texts == ["starting", "loading weights 3/8", "incident 12: diagnosing"]
    snapshot = read_status(tmp_path)
    assert (snapshot.state, snapshot.restarts, snapshot.service_pid, snapshot.current_incident_id) == \
        ("diagnosing", 1, 42, 12)
    assert snapshot.pid == os.getpid() and snapshot.config == "/etc/ddtreed/main.toml"


def test_readers_never_see_half_a_snapshot(tmp_path):
    """A writer process rewrites the file as fast as it can while this process reads it."""
    code = (
        "import sys\nfrom ddtreed.ops.status import DaemonStatus, write_status, STATES\n"
        "for i in range(150):\n"
        "    write_status(sys.argv[1], DaemonStatus(pid=i, state=STATES[i % len(STATES)],"
        " status_text='x' * (i * 37 % 5000)))\n"
    )
    write_status(tmp_path, DaemonStatus(pid=0, state="starting"))
    writer = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT)
    reads = 0
    while writer.poll() is None:
        snapshot = read_status(tmp_path)  # raises StatusError on a torn file
        assert snapshot.state in STATES
        reads += 1
    assert writer.returncode == 0 and reads > 0
    assert read_status(tmp_path).pid == 149


def test_the_loop_may_set_fields_directly_but_not_an_unknown_state(tmp_path):
    status = DaemonStatus(pid=1, state="starting")
    status.state, status.restarts = "backoff", 4
    assert write_status(tmp_path, status) is status and status.updated_at > 0
    assert read_status(tmp_path).restarts == 4
    status.state = "napping"
    with pytest.raises(ValueError, match="state must be one of"):
        write_status(tmp_path, status)
    assert read_status(tmp_path).state == "backoff"
