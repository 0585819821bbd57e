"""Item 13 of issue 16: `fleet rules push` signals only the state dir's real ddtreed daemon; a
stale pid file naming an unrelated process gets no signal and a clear message."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sshd
from hostile import DaemonProcess, run_cli, service_config, wait_for

from ddtreed.service import pidfile

REPO = Path(__file__).resolve().parents[2]


def _bystander(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """An unrelated process that dies of SIGHUP's default action, unless it is never signalled."""
    ready = tmp_path / "bystander-ready"
    code = f"import pathlib, time\npathlib.Path({str(ready)!r}).write_text('up')\nwhile True: time.sleep(0.1)\n"
    process = subprocess.Popen([sys.executable, "-c", code])
    wait_for(ready.exists, 10, what="the bystander to start")
    return process, ready


def _write_pid_file(state_dir: Path, pid: int, mtime: float | None = None) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / pidfile.PID_FILE
    path.write_text(f"{pid}\n")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_item13_the_holder_must_be_ddtreed_run_of_this_state_dir_started_before_the_pid_file(tmp_path):
    bystander, _ = _bystander(tmp_path)
    try:
        _write_pid_file(tmp_path / "state", bystander.pid)
        holder = pidfile.local_holder(tmp_path / "state")
        assert pidfile.problem(holder, str(tmp_path / "state")).startswith(
            f"pid {bystander.pid} is not a ddtreed daemon (")
        assert pidfile.running_daemon(tmp_path / "state") is None
    finally:
        bystander.kill()
        bystander.wait()
    state = "/var/lib/ddtreed"
    run = ("/usr/bin/python3", "-m", "ddtreed", "run", "--config", "/etc/ddtreed.toml")
    assert pidfile.problem(pidfile.Holder(7, run, 1000.0, 1000.4), state) is None
    assert "a reused pid" in pidfile.problem(pidfile.Holder(7, run, 2000.0, 1000.0), state)
    assert "not of /var/lib/ddtreed" in pidfile.problem(
        pidfile.Holder(7, (*run, "--state-dir", "/srv/other"), 1000.0, 1000.0), state)
    assert "no process has pid 7" in pidfile.problem(pidfile.Holder(7, (), None, 1000.0), state)
    assert pidfile.problem(pidfile.Holder(7, ("ddtreed", "status"), 1000.0, 1000.0), state)  # not `run`




@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    running = sshd.start_test_fleet(tmp_path_factory.mktemp("fleet"))
    yield running
    running.stop()


def _push(fleet, tmp_path: Path, state_dir: Path, live: Path) -> dict:
    inventory = fleet.inventory(tmp_path / "inv.toml", defaults={"rules_dir": str(live), "state_dir": str(state_dir)})
    good = tmp_path / "good"
    if not good.exists():
        shutil.copytree(REPO / "ddtreed" / "data" / "rules", good)
    result = run_cli("fleet", "rules", "push", str(good), "--inventory", str(inventory), "--hosts", "healthy",
                     "--json", env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["hosts"][0]["result"]


@pytest.mark.slow
@pytest.mark.skipif(not sshd.available(), reason="needs root and /usr/sbin/sshd (.ci/sshd-setup.sh)")
@pytest.mark.parametrize("stale", ["unrelated-process", "reused-pid"])
def test_item13_a_stale_pid_file_gets_no_signal_and_says_why(fleet, tmp_path, stale):
    """Before: `kill -HUP` went to whatever the pid file named, and the bystander died."""
    bystander, _ = _bystander(tmp_path)
    state_dir, live = tmp_path / "state", tmp_path / "live-rules"
    live.mkdir()
    try:
        # reused-pid: the file was written long before the process it names started.
        _write_pid_file(state_dir, bystander.pid, time.time() - 3600 if stale == "reused-pid" else None)
        result = _push(fleet, tmp_path, state_dir, live)
        time.sleep(0.5)  # SIGHUP's default action is immediate; give the kernel a moment to deliver it
        assert bystander.poll() is None, "the unrelated process got SIGHUP and died"
        assert result["reload"].startswith(f"no signal sent: pid {bystander.pid} is not a ddtreed daemon ("), result
        assert result["reload"].endswith("no running daemon to reload (rules apply at its next start)")
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.slow
@pytest.mark.skipif(not sshd.available(), reason="needs root and /usr/sbin/sshd (.ci/sshd-setup.sh)")
def test_item13_the_real_daemon_of_the_state_dir_is_signalled_and_reloads(fleet, tmp_path):
    live = tmp_path / "live-rules"
    shutil.copytree(REPO / "ddtreed" / "data" / "rules", live)
    config = service_config(tmp_path / "run", extra_args=("--disable-cuda-graph",), paths={"rules_dirs": [str(live)]})
    state_dir = tmp_path / "run" / "state"
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: (state_dir / pidfile.PID_FILE).exists(), 60, what="the daemon's pid file")
        result = _push(fleet, tmp_path, state_dir, live)
        assert result["reload"] == f"SIGHUP sent to pid {daemon.pid}"
        wait_for(lambda: daemon.has("reloaded"), 30, what="the daemon to reload the pushed rules")
    finally:
        assert daemon.stop() == 0
