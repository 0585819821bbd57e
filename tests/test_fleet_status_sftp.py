"""`fleet status` reads the snapshot over SFTP (no Python start on the host) and answers what the
remote `ddtreed status --json` answers; without a snapshot it falls back to that command.

Against a real sshd on loopback (tests/sshd.py). The remote `ddtreed` is a wrapper that notes each
start in a file, so "no Python started on the host" is a fact the test reads, not a timing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

import sshd
from ddtreed.fleet import load_inventory, run_on_hosts
from ddtreed.fleet.runner import MAX_AUTO_CONCURRENCY, pool_size
from ddtreed.incidents import Store, database_path
from ddtreed.ops.status import DaemonStatus, write_status

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sshd.available(), reason="needs root and /usr/sbin/sshd (.ci/sshd-setup.sh)")]

REPO = Path(__file__).resolve().parent.parent
TIME_KEYS = ("seconds_since_update", "seconds_since_last_healthy", "service_uptime_s")  # "now" differs


def _sqlite3_with_json() -> bool:
    """The host (this machine) has a sqlite3 shell with SQLite's JSON functions."""
    if shutil.which("sqlite3") is None:
        return False
    done = subprocess.run(["sqlite3", "-batch", "-init", "/dev/null", ":memory:", "SELECT json_array(1)"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return done.returncode == 0 and done.stdout.strip() == "[1]"


HAS_SQLITE3 = _sqlite3_with_json()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = sshd.start_test_fleet(tmp_path_factory.mktemp("fleet-sftp"))
    yield running
    running.stop()


@pytest.fixture
def host(fleet, tmp_path):
    """An inventory of the healthy host whose remote `ddtreed` records each start in `starts`."""
    starts = tmp_path / "remote-ddtreed-starts"
    wrapper = tmp_path / "remote-ddtreed"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {starts}\nexec {sshd.REMOTE_DDTREED} "$@"\n')
    wrapper.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    inventory = fleet.inventory(tmp_path / "inventory.toml",
                                defaults={"ddtreed": str(wrapper), "state_dir": str(state)})
    return inventory, state, starts


def fleet_status(inventory: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "ddtreed", "fleet", "status", "--inventory", str(inventory),
                           "--hosts", "healthy", "--json"], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    [answer] = report["hosts"]
    assert answer["ok"], answer
    return answer["result"]


def local_status(state: Path) -> dict:
    """What `ddtreed status --json` says on the host itself (the host is this machine)."""
    done = subprocess.run([sys.executable, "-m", "ddtreed", "status", "--json", "--state-dir", str(state)],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode in (0, 1, 3), done.stderr
    return json.loads(done.stdout)


def same_answer(remote: dict, local: dict) -> None:
    assert list(remote) == list(local)  # same keys, same order: the table cell shows the JSON
    for key in TIME_KEYS:
        if local.get(key) is None:
            assert remote.get(key) is None
        else:
            assert abs(remote.pop(key) - local.pop(key)) < 30  # both computed "now", moments apart
    assert remote == local


def starts(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def write_snapshot(directory: Path, pid: int, **fields) -> None:
    write_status(directory, DaemonStatus(pid=pid, state=fields.pop("state", "running"),
                                     status_text="serving, accept len 3.4", **fields))


def test_live_daemon_without_incident_database_is_read_over_sftp_alone(host):
    inventory, state, started = host
    write_snapshot(state, os.getpid(), service_pid=os.getpid(), service_started_at=1.0e9,
                   last_healthy_at=1.0e9, restarts=2, degraded={"remediations": ["x"], "since": 1.0e9})
    remote = fleet_status(inventory)
    assert starts(started) == []  # no ddtreed (no Python) started on the host
    assert (remote["alive"], remote["exit_code"], remote["daemon"]["state"]) == (True, 0, "running")
    assert remote["daemon"]["degraded"]["since"] == "2001-09-09T01:46:40.000Z"  # times as ISO, like the CLI
    same_answer(remote, local_status(state))


def test_incident_counts_come_from_sqlite3_and_match_the_store(host):
    inventory, state, started = host
    write_snapshot(state, os.getpid())
    with Store(database_path(state)) as store:
        for _ in range(3):
            store.open_incident("crash")
    remote = fleet_status(inventory)
    # Without sqlite3 on the host the remote ddtreed answers; the answer is the same either way.
    assert starts(started) == ([] if HAS_SQLITE3 else [f"status --json --state-dir {state}"])
    assert remote["incidents"]["incidents_total"] == 3
    same_answer(remote, local_status(state))


def test_a_database_of_an_older_schema_goes_to_the_remote_ddtreed(host):
    from ddtreed.incidents.connection import connect
    from ddtreed.incidents.migrations import MIGRATIONS, migrate

    inventory, state, started = host
    write_snapshot(state, os.getpid())
    db = connect(database_path(state), 5.0)
    migrate(db, MIGRATIONS[:4])  # as an older ddtreed left it: sqlite3 alone cannot answer exactly
    db.close()
    remote = fleet_status(inventory)
    assert starts(started) == [f"status --json --state-dir {state}"]  # the remote migrated and answered
    assert remote["incidents"]["incidents_total"] == 0
    same_answer(remote, local_status(state))


def test_stale_and_stopped_snapshots_answer_like_ddtreed_status(host):
    inventory, state, started = host
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs
    write_snapshot(state, gone.pid, state="backoff")
    remote = fleet_status(inventory)
    assert (remote["alive"], remote["stale"], remote["exit_code"]) == (False, True, 1)
    same_answer(remote, local_status(state))
    write_snapshot(state, os.getpid(), state="stopped")
    remote = fleet_status(inventory)
    assert (remote["alive"], remote["stale"], remote["exit_code"]) == (False, False, 3)
    same_answer(remote, local_status(state))
    assert starts(started) == []


def test_missing_snapshot_falls_back_to_the_remote_ddtreed(host):
    inventory, state, started = host
    remote = fleet_status(inventory)
    assert starts(started) == [f"status --json --state-dir {state}"]
    assert (remote["daemon"], remote["exit_code"]) == (None, 3)
    same_answer(remote, local_status(state))


def test_garbage_snapshot_falls_back_and_keeps_the_remote_error(host):
    inventory, state, started = host
    (state / "daemon-state.json").write_text("{not json")
    done = subprocess.run([sys.executable, "-m", "ddtreed", "fleet", "status", "--inventory", str(inventory),
                           "--hosts", "healthy", "--json"], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    [answer] = json.loads(done.stdout)["hosts"]
    assert starts(started) == [f"status --json --state-dir {state}"]
    assert (answer["ok"], answer["error"], answer["exit_code"]) == (False, "remote command failed", 1)
    assert "not a daemon-state JSON file" in answer["detail"]


def test_events_name_the_path_and_known_hosts_is_parsed_once_per_run(fleet, host, tmp_path):
    inventory, state, _ = host
    write_snapshot(state, os.getpid())
    port = fleet.servers["healthy"].port
    extra = "".join(f'\n[[host]]\nname = "twin{i}"\naddress = "127.0.0.1"\nport = {port}\n' for i in range(3))
    inventory.write_text(inventory.read_text() + extra)
    entries = load_inventory(inventory).select(["healthy", "twin0", "twin1", "twin2"])
    from ddtreed.fleet import commands

    with capture_logs() as events:
        report = run_on_hosts(entries, commands.status)
        (state / "daemon-state.json").unlink()
        fallback = run_on_hosts(entries[:1], commands.status)
    assert report.ok and fallback.ok, (report.as_json(), fallback.as_json())
    read = [event for event in events if event["event"] == "fleet.status_read"]
    assert sorted(event["host"] for event in read) == ["healthy", "twin0", "twin1", "twin2"]
    assert {event["via"] for event in read} == {"sftp"}
    assert [(e["host"], e["reason"]) for e in events if e["event"] == "fleet.status_fallback"] == \
        [("healthy", "no snapshot")]
    loads = [event for event in events if event["event"] == "fleet.known_hosts_loaded"]
    assert len(loads) == 1 and str(fleet.known_hosts) in loads[0]["files"]  # 5 connections, one parse
    finished = [event for event in events if event["event"] == "fleet.run_finished"]
    assert finished[0]["concurrency"] == 4  # sized to the fleet


def test_pool_is_sized_to_the_fleet_and_bounded():
    assert pool_size(3, None, None) == 3
    assert pool_size(1000, None, None) == MAX_AUTO_CONCURRENCY
    assert pool_size(1000, None, 16) == 16  # the inventory's concurrency
    assert pool_size(1000, 8, 16) == 8  # --concurrency wins
    assert pool_size(2, 50, None) == 2
