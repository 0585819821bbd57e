"""Issue 16, the daemon's own failure modes, against the real `ddtreed run` (real processes).

Each test is named after the item it reproduces. The harness never cleans up after ddtreed while
a test is still asserting: orphans are ddtreed's to find (a `finally` only sweeps what a failed
assertion left behind, so the box stays clean).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, kill_service_sessions, wait_for  # noqa: E402
from supervision_helpers import free_port  # noqa: E402

from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.ops.status import read_status, status_path  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent


def _service_processes(directory: Path) -> list[psutil.Process]:
    """Live processes of the service under `directory` (every one names files below it)."""
    marker = str(directory.resolve())
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or ()
        if process.info["status"] != psutil.STATUS_ZOMBIE and any(marker in part for part in cmdline):
            if "ddtreed" not in cmdline[1:3]:  # not a daemon itself (python -m ddtreed run ...)
                found.append(process)
    return found


def _serving_config(directory: Path, **options) -> tuple[Path, int]:
    """A fast service that serves at once (the engine pre-patched): recovery, not remediation."""
    directory.mkdir(parents=True)
    port = free_port()
    config = fast_service.write_config(directory, port=port, **options)
    engine = fast_service.engine_file(directory)
    anchor = "    num_tokens_per_bs = server_args.speculative_num_draft_tokens\n"
    engine.write_text(engine.read_text().replace(anchor, anchor + (
        "    if server_args.speculative_algorithm == 'DDTREE':\n"
        "        num_tokens_per_bs = server_args.speculative_ddtree_budget + 1\n")))
    return config, port


def _running(state_dir: Path, daemon: DaemonProcess) -> bool:
    try:
        status = read_status(state_dir)
    except ValueError:
        return False
    return status is not None and status.pid == daemon.pid and status.state == "running"


def _serves(port: int) -> bool:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status == 200


def _kill_trial(tmp_path: Path, forget_record: bool) -> None:
    directory = tmp_path / "run"
    config, port = _serving_config(directory)
    state_dir = directory / "state"
    first = DaemonProcess(config, directory / "daemon1.jsonl")
    second = None
    try:
        wait_for(lambda: _running(state_dir, first), 60, what="the first daemon serving")
        old_service = read_status(state_dir).service_pid
        first.kill()  # ddtreed dies; its service (own session) lives on, holding the port
        assert psutil.pid_exists(old_service)
        if forget_record:  # the previous daemon's record is gone too (a wiped or torn file)
            status_path(state_dir).unlink()
        second = DaemonProcess(config, directory / "daemon2.jsonl")
        wait_for(lambda: _running(state_dir, second), 60, what="the second daemon serving")
        assert not psutil.pid_exists(old_service) or psutil.Process(old_service).status() == psutil.STATUS_ZOMBIE
        assert second.has("leftover_service_stopped"), second.events()[-5:]
        assert _serves(port)
        with Store(database_path(state_dir)) as store:
            categories = [incident["category"] for incident in store.list_incidents()]
        assert "port-in-use" not in categories, categories
        assert second.stop() == 0
        assert _service_processes(directory) == []  # nothing of the service outlives a clean stop
    finally:
        for daemon in (first, second):
            if daemon is not None and daemon.process.poll() is None:
                daemon.kill()
        kill_service_sessions(directory)  # only what a failed assertion above left behind


def test_item01_recovery_stops_leftover_service(tmp_path):
    _kill_trial(tmp_path, forget_record=False)


def test_item01_recovery_finds_leftover_service_without_the_record(tmp_path):
    _kill_trial(tmp_path, forget_record=True)


def test_item02_second_daemon_on_one_state_dir_exits_2_naming_the_holder(tmp_path):
    directory = tmp_path / "run"
    config, port = _serving_config(directory)
    state_dir = directory / "state"
    first = DaemonProcess(config, directory / "daemon1.jsonl")
    try:
        wait_for(lambda: _running(state_dir, first), 60, what="the first daemon serving")
        service = read_status(state_dir).service_pid
        second = subprocess.run([sys.executable, "-m", "ddtreed", "run", "--config", str(config)],
                                capture_output=True, text=True, cwd=REPO, timeout=60,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert second.returncode == 2, (second.stdout[-2000:], second.stderr[-2000:])
        assert second.stderr.strip().count("\n") == 0 and f"pid {first.pid}" in second.stderr, second.stderr
        # The first daemon and its service never noticed.
        assert _running(state_dir, first) and read_status(state_dir).service_pid == service
        assert _serves(port)
        with Store(database_path(state_dir)) as store:
            assert store.list_incidents() == []
        assert first.stop() == 0
    finally:
        if first.process.poll() is None:
            first.kill()
        kill_service_sessions(directory)


def test_item11_sigterm_is_honoured_while_a_stop_waits_for_the_port(tmp_path):
    """A stranger holds the service's port after the service died: the stop waits for release;
    SIGTERM must end ddtreed within 2 s all the same."""
    import socket

    directory = tmp_path / "run"
    config, port = _serving_config(directory, probe={"startup_timeout_s": 60.0})
    state_dir = directory / "state"
    first = DaemonProcess(config, directory / "daemon1.jsonl")
    holder = None
    try:
        wait_for(lambda: _running(state_dir, first), 60, what="the daemon serving")
        service = read_status(state_dir).service_pid
        os.killpg(service, signal.SIGKILL)  # the service dies; something else grabs its port at once
        holder = socket.socket()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        wait_for(lambda: _bind(holder, port), 30, what="the port free to grab")
        holder.listen()
        wait_for(lambda: first.has("service.waiting_release"), 60, what="the stop waiting for the port")
        started = time.monotonic()
        first.process.send_signal(signal.SIGTERM)
        code = first.process.wait(30)
        took = time.monotonic() - started
        print(f"\nSIGTERM to exit while the stop waited for the port: {took:.2f}s")
        assert took <= 5.0  # the goal is 2 s; the margin is for a loaded 2-core box, not the old 60 s wait
        assert code == 0
    finally:
        if holder is not None:
            holder.close()
        if first.process.poll() is None:
            first.kill()
        kill_service_sessions(directory)


def _bind(sock, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False


def test_item04_a_handled_traceback_in_a_healthy_server_is_observed_not_a_crash(tmp_path):
    """Five handled "Exception in ASGI application" tracebacks: no restart, the service keeps its pid."""
    directory = tmp_path / "run"
    directory.mkdir()
    port = free_port()
    program = Path(__file__).resolve().parent / "programs" / "handled_errors_service.py"
    config = fast_service.write_config(directory, port=port, policy={"max_restarts": 3},
                                       service={"argv": [sys.executable, str(program), "--port", str(port)]})
    state_dir = directory / "state"
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        wait_for(lambda: _running(state_dir, daemon), 60, what="the daemon serving")
        service = read_status(state_dir).service_pid
        for _ in range(5):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/boom", data=b"{}", method="POST")
            try:
                urllib.request.urlopen(request, timeout=5)
            except urllib.error.HTTPError as error:
                assert error.code == 500
        wait_for(lambda: daemon.has("traceback_observed"), 60, what="the tracebacks judged")

        def observed() -> list[dict]:
            with Store(database_path(state_dir)) as store:
                return [store.get(i["id"]) for i in store.list_incidents()]

        wait_for(lambda: observed() and all(i["status"] == "observed" for i in observed()), 60,
                 what="the incidents recorded as observed")
        time.sleep(1.0)  # the judgement has happened (events above); give a wrong restart room to show
        status = read_status(state_dir)
        assert status.service_pid == service and status.restarts == 0 and status.state == "running"
        assert psutil.pid_exists(service) and _serves(port)
        incidents = observed()
        assert {i["status"] for i in incidents} == {"observed"}
        assert sum(1 for i in incidents for s in i["steps"] if s["step"] == "observed") >= 1
        assert not daemon.has("service.stopping")
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        kill_service_sessions(directory)


def _crash_service_now(state_dir: Path) -> int:
    """Kill the service's whole group (a crash without a traceback); return the pid killed."""
    service = read_status(state_dir).service_pid
    os.killpg(service, signal.SIGKILL)
    return service


def _incidents(state_dir: Path) -> list[dict]:
    with Store(database_path(state_dir)) as store:
        return store.list_incidents()


def test_item08_a_corrupt_database_at_start_is_moved_aside_and_the_service_starts(tmp_path):
    directory = tmp_path / "run"
    config, port = _serving_config(directory)
    state_dir = directory / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / "incidents.sqlite3").write_bytes(b"this is not a database\n" * 200)
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        wait_for(lambda: _running(state_dir, daemon), 60, what="the daemon serving despite the corrupt database")
        assert _serves(port)
        assert daemon.has("incident_database_corrupt")
        [aside] = [p for p in state_dir.iterdir() if p.name.startswith("incidents.sqlite3.corrupt-")]
        assert aside.read_bytes().startswith(b"this is not a database")
        assert _incidents(state_dir) == []  # a fresh, working database
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        kill_service_sessions(directory)


@pytest.mark.parametrize("damage", ["deleted", "replaced-by-garbage"])
def test_item08_a_database_lost_while_running_never_stops_the_service(tmp_path, damage):
    directory = tmp_path / "run"
    config, port = _serving_config(directory)
    state_dir = directory / "state"
    database = state_dir / "incidents.sqlite3"
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        wait_for(lambda: _running(state_dir, daemon), 60, what="the daemon serving")
        for suffix in ("-wal", "-shm", ""):
            Path(f"{database}{suffix}").unlink(missing_ok=True)
        if damage == "replaced-by-garbage":
            database.write_bytes(b"garbage, not sqlite\n" * 100)
        killed = _crash_service_now(state_dir)
        wait_for(lambda: daemon.process.poll() is not None or (
            _running(state_dir, daemon) and read_status(state_dir).service_pid != killed), 60,
            what="the daemon to record the crash and serve again")
        assert daemon.process.poll() is None, daemon.events()[-5:]
        assert _serves(port)
        [incident] = _incidents(state_dir)  # recorded in the database at the path, not a lost file
        assert incident["category"] == "other"  # the kill, recorded (and, since main, healed by a relaunch)
        assert daemon.has("incident_database_vanished" if damage == "deleted" else "incident_database_corrupt")
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        kill_service_sessions(directory)


def test_item09_a_package_changed_under_a_verified_patch_then_the_crash_recurs(tmp_path):
    """The fix verified, then a reinstall changes the file, then the same crash: revert is refused;
    ddtreed records that and escalates instead of dying with an uncaught ApplyError."""
    directory = tmp_path / "run"
    directory.mkdir()
    port = free_port()
    config = fast_service.write_config(directory, port=port, extra_args=("--crash-after", "8"))
    state_dir = directory / "state"
    target = fast_service.engine_file(directory)
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("incident_resolved"), 60, what="the founding crash fixed and verified")
        target.write_bytes(target.read_bytes() + b"\n# reinstalled by the package manager\n")
        wait_for(lambda: daemon.has("incident_escalated") or daemon.process.poll() is not None, 60,
                 what="the recurrence handled")
        assert daemon.process.poll() is None, daemon.events()[-5:]
        with Store(database_path(state_dir)) as store:
            recurred = [store.get(i["id"]) for i in store.list_incidents() if i["status"] == "escalated"][0]
        steps = [step["step"] for step in recurred["steps"]]
        assert "recurred" in steps and "revert-failed" in steps and steps[-1] == "escalated", steps
        assert daemon.stop() in (0, 3)
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
        kill_service_sessions(directory)
