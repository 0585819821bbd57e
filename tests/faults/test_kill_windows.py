"""Issue 16 item 1, the windows a random kill trial only rarely hits, each forced on purpose.

A SIGKILLed `ddtreed run` leaves its service running; the next daemon must find all of it (by the
previous record's environment token, or by the state dir in the service's environment) and stop
it. These tests put the service tree in the states that defeat a naive search, against the real
daemon and real processes, and let ddtreed alone clean up:

- a scheduler renamed by the real `setproctitle` (what SGLang's children do) whose launcher died
  while no ddtreed watched: setproctitle overwrites `/proc/PID/environ` unless `SPT_NOENV` is
  set, so the token that ties the orphan to its service is gone from the one place it is read;
- a launcher still forking workers while the next daemon's recovery sweeps its session: children
  forked after the sweep listed the session outlive it;
- a kill between the spawn of the patched relaunch and the record of its pid and token (the
  `DDTREED_KILL_AT=launch:spawned#2` hook, ddtreed/service/killpoint.py): the record names the founding
  launch, dead already; only the state dir in the relaunch's environment finds it.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import fast_service
import psutil
import pytest
from hostile import DaemonProcess, free_port, wait_for

from ddtreed.service._proctree import STATE_DIR_VARIABLE, TOKEN_VARIABLE, token_holders
from ddtreed.incidents import Store, database_path
from ddtreed.ops.status import read_status

SERVICE = Path(__file__).resolve().parent / "sglang_tree_service.py"


def _config(directory: Path, *args: str) -> Path:
    port = free_port()
    argv = [sys.executable, str(SERVICE), "--port", str(port), "--events", str(directory / "tree-events.txt"),
            *args]
    return fast_service.write_config(directory, port=port, service={"argv": argv})


def _running(state_dir: Path, daemon: DaemonProcess) -> bool:
    status = read_status(state_dir)
    return status is not None and status.pid == daemon.pid and status.state == "running"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _titled(directory: Path) -> list[int]:
    lines = (directory / "tree-events.txt").read_text().splitlines()
    return [int(line.split()[2]) for line in lines if line.startswith("titled ")]


def _kill_all(pids, daemon: DaemonProcess | None = None) -> None:
    """After the measurement only: what ddtreed left is removed so the next test starts clean
    (and a first daemon that never got to its kill, on a failure, is stopped)."""
    if daemon is not None and daemon.process.poll() is None:
        daemon.stop()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _second_daemon_serves_and_stops(config: Path, state_dir: Path, log: Path) -> tuple[int, DaemonProcess]:
    second = DaemonProcess(config, log)
    try:
        wait_for(lambda: _running(state_dir, second) or second.process.poll() is not None, 90,
                 what="the new daemon to serve")
    finally:
        code = second.stop()
    return code, second


@pytest.mark.slow
def test_scheduler_renamed_by_setproctitle_is_stopped_after_its_launcher_died(tmp_path):
    pytest.importorskip("setproctitle")  # what SGLang's children call; in the test extra
    directory = tmp_path / "run"
    config = _config(directory, "--ranks", "2")
    state_dir = directory / "state"
    first = DaemonProcess(config, tmp_path / "daemon1.jsonl")
    schedulers: list[int] = []
    try:
        wait_for(lambda: _running(state_dir, first), 90, what="the first daemon to serve")
        launcher = read_status(state_dir).service_pid
        schedulers = _titled(directory)
        assert len(schedulers) == 2 and all(_alive(pid) for pid in schedulers)
        first.kill()  # ddtreed dies; its service lives on in its own session
        os.kill(launcher, signal.SIGKILL)  # then the launcher dies too, while no ddtreed watches
        wait_for(lambda: not _alive(launcher), 10, what="the launcher to die")
        assert all(_alive(pid) for pid in schedulers), "the schedulers must outlive their launcher here"
        code, second = _second_daemon_serves_and_stops(config, state_dir, tmp_path / "daemon2.jsonl")
        survivors = [pid for pid in schedulers if _alive(pid)]
    finally:
        _kill_all(schedulers, first)
    assert survivors == [], (f"schedulers {survivors} of the killed daemon's service outlived the next "
                             "daemon's recovery and its clean stop")
    stopped = [pid for record in second.events("leftover_service_stopped") for pid in record["pids"]]
    assert set(schedulers) <= set(stopped), stopped
    assert code == 0


@pytest.mark.slow
def test_launcher_forking_while_recovery_sweeps_leaves_no_child(tmp_path):
    directory = tmp_path / "run"
    config = _config(directory, "--fork-every", "0.005")
    state_dir = directory / "state"
    first = DaemonProcess(config, tmp_path / "daemon1.jsonl")
    token = None
    try:
        wait_for(lambda: _running(state_dir, first), 90, what="the first daemon to serve")
        token = read_status(state_dir).service_token
        assert token
        first.kill()  # the launcher keeps forking while the next daemon starts and sweeps it
        code, second = _second_daemon_serves_and_stops(config, state_dir, tmp_path / "daemon2.jsonl")
        left = token_holders(token)
    finally:
        if token:
            _kill_all(token_holders(token))
        _kill_all((), first)
    assert left == [], f"{len(left)} processes of the killed daemon's service outlived the next daemon"
    assert second.events("leftover_service_stopped")
    assert not second.events("leftover_service_survived")
    assert code == 0


@pytest.mark.slow
def test_kill_between_the_relaunch_spawn_and_its_record(tmp_path):
    directory = tmp_path / "run"
    config = fast_service.write_config(directory, port=free_port())  # the founding crash, then the patch
    state_dir = directory / "state"
    first = DaemonProcess(config, tmp_path / "daemon1.jsonl", env={"DDTREED_KILL_AT": "launch:spawned#2"})
    relaunch = []
    try:
        assert first.process.wait(90) == -signal.SIGKILL  # the hook: right after the second spawn
        first.kill()
        relaunch = [process for process in psutil.process_iter(["cmdline", "environ"])
                    if str(directory.resolve()) in " ".join(process.info["cmdline"] or ())]
        assert len(relaunch) == 1, "the patched relaunch must be running when its daemon died"
        record = read_status(state_dir)
        environ = relaunch[0].info["environ"]
        assert environ[TOKEN_VARIABLE] != record.service_token, "the kill must precede the token's record"
        assert environ[STATE_DIR_VARIABLE] == str(state_dir.resolve())
        code, second = _second_daemon_serves_and_stops(config, state_dir, tmp_path / "daemon2.jsonl")
        survived = _alive(relaunch[0].pid)
    finally:
        _kill_all([process.pid for process in relaunch], first)
    assert not survived, "the relaunch spawned just before the kill outlived the next daemon"
    found = [record["found_by"] for record in second.events("leftover_service_stopped")]
    assert found == ["state dir or port"], found
    with Store(database_path(state_dir)) as store:
        incidents = store.list_incidents(limit=50)
    assert not [i for i in incidents if i["category"] == "port-in-use" or i["status"] == "open"], incidents
    assert code == 0
