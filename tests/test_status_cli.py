"""`ddtreed status` against state written by real processes and a real incident database."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtreed.records import Application, RuleMatch
from ddtreed.ops.status import DaemonStatus, status_path, write_status

ROOT = Path(__file__).resolve().parent.parent

FAKE_DAEMON = """
import sys, time
from ddtreed.ops.status import StatusBoard
board = StatusBoard.start(sys.argv[1], config="/etc/ddtreed/main.toml")
now = time.time()
board.update(state="running", status_text="serving, accept len 3.4", service_pid=int(sys.argv[2]),
             service_started_at=now - 7380, restarts=2, last_healthy_at=now - 12,
             last_accept_length=3.4, canary={"last_run_at": now - 300, "passed": True, "detail": "4/4 match"},
             degraded={"remediations": ["cuda-graph-max-bs-64"], "since": now - 600})
print("ready", flush=True)
sys.stdin.read()
"""


def ddtreed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


@pytest.fixture
def daemon(tmp_path):
    """A process that writes daemon-state.json as the daemon would, then stays alive."""
    # The "service" is this test process: alive for as long as the test runs.
    process = subprocess.Popen([sys.executable, "-c", FAKE_DAEMON, str(tmp_path), str(os.getpid())], cwd=ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


def record_incidents(state_dir: Path) -> None:
    from ddtreed.incidents import Store

    match = RuleMatch(rule_id="ddtree-verify-graph-width", category="cuda-graph-shape-mismatch",
                      title="t", diagnosis="d", remediations=())
    with Store(state_dir / "incidents.sqlite3") as store:
        resolved = store.open_incident("crash", match=match)
        store.finish(resolved, "resolved", "patched")
        store.record_application(resolved, Application("a1", "ddtree-verify-graph-width", "patch", "/x", "s"))
        escalated = store.open_incident("crash", match=match)
        store.finish(escalated, "escalated", "no remediation left")
        store.open_incident("crash")


def test_no_state_is_exit_3_and_says_so(tmp_path):
    done = ddtreed("status", "--state-dir", str(tmp_path))
    assert done.returncode == 3
    assert f"not running: no daemon has written state in {tmp_path}" in done.stdout


def test_a_running_daemon_at_a_glance(daemon, tmp_path):
    record_incidents(tmp_path)
    done = ddtreed("status", "--state-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"ddtreed: running (pid {daemon.pid}" in out and "serving, accept len 3.4" in out
    assert f"pid {os.getpid()}, up 2h03m" in out or f"pid {os.getpid()}, up 2h04m" in out
    assert "restarts     2" in out and "accept len   3.40" in out
    # the snapshot says 12 s ago at the fixture; a loaded box takes seconds to start the CLI
    assert 12 <= int(re.search(r"last healthy (\d+)s ago", out).group(1)) < 60
    assert "3 total: 1 open, 1 escalated, 1 resolved" in out
    assert "cuda-graph-shape-mismatch 2, unknown 1" in out
    assert "remediations 0 verified, 1 applied (not yet verified), 0 reverted" in out
    assert "degraded     yes since" in out and "cuda-graph-max-bs-64" in out
    assert "canary       passed at" in out and "4/4 match" in out


def test_json_has_the_same_facts(daemon, tmp_path):
    record_incidents(tmp_path)
    done = ddtreed("status", "--state-dir", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["alive"] is True and report["stale"] is False and report["exit_code"] == 0
    assert report["daemon"]["pid"] == daemon.pid and report["daemon"]["state"] == "running"
    assert 7380 <= report["service_uptime_s"] < 7440
    assert report["incidents"]["incidents_total"] == 3
    # The text's words are the JSON's (issue 17.6: text said `applied` where JSON said `verified`).
    assert report["incidents"]["applications"] == {"applied": 1, "reverted": 0, "verified": 0}
    # Every time is ISO-8601 UTC, as in `incidents --json`.
    for key in ("updated_at", "service_started_at", "last_healthy_at"):
        assert report["daemon"][key].endswith("Z") and report["daemon"][key][10] == "T", key
    assert report["daemon"]["canary"]["last_run_at"].endswith("Z")


def test_a_daemon_that_gave_up_says_so_in_words_and_json(tmp_path):
    """Issue 17.2: after the restart budget was spent `status` showed `stopped`, like a clean stop."""
    snapshot = DaemonStatus(pid=os.getpid(), state="stopped", updated_at=time.time() - 5).to_dict()
    snapshot.update(state="gave-up", status_text="restart budget spent: 5 starts in 600 s")
    status_path(tmp_path).write_text(json.dumps(snapshot))
    done = ddtreed("status", "--state-dir", str(tmp_path))
    assert done.returncode == 1
    assert re.match(r"ddtreed: GAVE UP \d+s ago: restart budget spent: 5 starts in 600 s; it exited and left "
                    r"the service stopped: a person must look", done.stdout)
    assert "a person must look" in done.stdout and not done.stdout.startswith("ddtreed: stopped")
    report = json.loads(ddtreed("status", "--state-dir", str(tmp_path), "--json").stdout)
    assert (report["gave_up"], report["stale"], report["alive"], report["exit_code"]) == (True, False, False, 1)
    assert report["daemon"]["state"] == "gave-up"


def test_a_dead_daemon_is_reported_stale(daemon, tmp_path):
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=30)
    done = ddtreed("status", "--state-dir", str(tmp_path))
    assert done.returncode == 1
    assert f"NOT RUNNING: stale state: pid {daemon.pid} is gone" in done.stdout
    assert json.loads(ddtreed("status", "--state-dir", str(tmp_path), "--json").stdout)["stale"] is True


def test_a_reused_pid_is_not_mistaken_for_the_daemon(tmp_path):
    """The recorded pid now belongs to a process that started after the snapshot was written."""
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        snapshot = DaemonStatus(pid=other.pid, state="running", updated_at=time.time() - 3600).to_dict()
        status_path(tmp_path).write_text(json.dumps(snapshot))
        assert ddtreed("status", "--state-dir", str(tmp_path)).returncode == 1
    finally:
        other.kill()
        other.wait(timeout=30)


def test_a_clean_stop_is_not_running_but_not_stale(tmp_path):
    write_status(tmp_path, DaemonStatus(pid=os.getpid(), state="stopped", status_text="stopped"))
    done = ddtreed("status", "--state-dir", str(tmp_path))
    assert done.returncode == 3 and "ddtreed: stopped" in done.stdout


def test_instances_of_the_template_unit_are_found_below_the_state_dir(daemon, tmp_path):
    parent = tmp_path.parent / (tmp_path.name + "-instances")
    (parent / "kimi").mkdir(parents=True)
    status_path(tmp_path).rename(status_path(parent / "kimi"))
    done = ddtreed("status", "--state-dir", str(parent), "--json")
    assert done.returncode == 0, done.stderr
    [instance] = json.loads(done.stdout)["instances"]
    assert instance["state_dir"] == str(parent / "kimi") and instance["alive"]


def test_a_corrupt_state_file_is_a_one_line_error(tmp_path):
    status_path(tmp_path).write_text("{half")
    done = ddtreed("status", "--state-dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.startswith(f"ddtreed: error: {status_path(tmp_path)}: not a daemon-state JSON file")
    assert len(done.stderr.strip().splitlines()) == 1
