"""Supervisor against real processes: sessions, signals, survivors, ports, log rotation."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from structlog.testing import capture_logs

from ddtreed.service.host import LocalHost, port_in_use
from ddtreed.service.launch import Supervisor, service_port
from ddtreed.records import ExitStatus

from supervision_helpers import free_port, make_config, program, wait_for

pytestmark = pytest.mark.slow


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def events(logs: list[dict], name: str) -> list[dict]:
    return [entry for entry in logs if entry["event"] == name]


def test_start_in_new_session_and_stop_with_sigterm(tmp_path: Path):
    config = make_config(tmp_path, program("hang.py"))
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {})
    process = supervisor.start()
    assert os.getsid(process.pid) == process.pid != os.getsid(0)
    stdout = Path(supervisor.log_paths[0])
    wait_for(lambda: "hanging now" in stdout.read_text(), 10, what="the service's first line")
    assert supervisor.poll() is None
    with capture_logs() as logs:
        status = supervisor.stop("test")
    assert status == ExitStatus(code=None, signal=signal.SIGTERM)
    assert gone(process.pid)
    assert events(logs, "service.stopped")[0]["log_level"] == "info"
    assert not events(logs, "service.sigkill")


def test_child_ignoring_sigterm_is_killed_after_grace(tmp_path: Path):
    port = free_port()
    config = make_config(tmp_path, program("ignore_sigterm.py", port), port=port, grace_s=0.5)
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {})
    supervisor.start()
    wait_for(lambda: "ready" in Path(supervisor.log_paths[0]).read_text(), 10, what="ready")
    assert port_in_use("127.0.0.1", port)
    started = time.monotonic()
    with capture_logs() as logs:
        status = supervisor.stop("test")
    assert time.monotonic() - started >= 0.5
    assert status == ExitStatus(code=None, signal=signal.SIGKILL)
    assert status.describe() == "killed by signal 9"
    kill = events(logs, "service.sigkill")
    assert kill and kill[0]["log_level"] == "error" and "stop_grace_s" in kill[0]["hint"]
    assert not port_in_use("127.0.0.1", port)


def test_survivors_outside_the_group_and_session_are_swept(tmp_path: Path):
    port = free_port()
    pidfile = tmp_path / "pids"
    config = make_config(tmp_path, program("service_tree.py", pidfile, port), port=port,
                         grace_s=0.3)
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {})
    process = supervisor.start()
    regrouped, orphan = map(int, wait_for(pidfile.exists, 10, what="pidfile") and
                            pidfile.read_text().split())
    assert os.getsid(orphan) == orphan != process.pid  # left the session
    assert wait_for(lambda: psutil.Process(orphan).name() == "sglang::schedul", 5, what="rename")
    with capture_logs() as logs:
        status = supervisor.stop("test")
    assert status == ExitStatus(code=0, signal=None)  # the launcher itself obeyed SIGTERM
    swept = events(logs, "service.swept")
    assert swept and set(swept[0]["killed"]) >= {regrouped, orphan}
    assert swept[0]["log_level"] == "error"
    assert gone(regrouped) and gone(orphan)
    assert not port_in_use("127.0.0.1", port)  # stop() returned only once the port was free


def test_logs_rotate_before_each_start_and_when_large(tmp_path: Path):
    config = make_config(tmp_path, program("flood.py", 4000, 100), log_max_bytes=50_000,
                         log_backups=2)
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {},
                            rotate_check_s=0.0)
    supervisor.start()
    stdout = Path(supervisor.log_paths[0])
    with capture_logs() as logs:
        # The last line may already sit in .1 when a rotation came right after it.
        wait_for(lambda: supervisor.poll() is None and any(
            "flood done" in path.read_text() for path in (stdout, Path(f"{stdout}.1"))
            if path.exists()), 30, what="the end of the flood")
    assert events(logs, "service.log_rotated")
    assert Path(f"{stdout}.1").exists() and not Path(f"{stdout}.3").exists()
    supervisor.stop("test")
    supervisor.rotate_check_s = 3600.0
    supervisor.start()  # the previous run's output moves to .1 before the new run writes
    assert "flood done" in Path(f"{stdout}.1").read_text()
    assert "flood done" not in stdout.read_text()
    supervisor.stop("test")


def test_service_port_from_config_argv_or_default(tmp_path: Path):
    argv = ["python", "-m", "sglang.launch_server", "--port", "31000"]
    assert service_port(make_config(tmp_path, argv), argv) == 31000
    assert service_port(make_config(tmp_path, argv, port=32000), argv) == 32000
    assert service_port(make_config(tmp_path, ["x", "--port=31001"]), ["x", "--port=31001"]) == 31001
    assert service_port(make_config(tmp_path, ["x"]), ["x"]) == 30000


def test_stop_lets_an_sglang_like_launcher_drain_then_accepts_its_rc_137(tmp_path: Path):
    """Real 0.5.16: SIGTERM to the launcher alone, it drains, then SIGKILLs its own tree."""
    from ddtreed.service.launch import is_requested_stop_exit

    config = make_config(tmp_path, program("sglang_like_drain.py", 0.5), grace_s=20)
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {})
    process = supervisor.start()
    stdout = Path(supervisor.log_paths[0])
    wait_for(lambda: "request in flight" in stdout.read_text(), 10, what="the scheduler's request")
    with capture_logs() as logs:
        status = supervisor.stop("test")
    text = stdout.read_text()
    assert "Draining requests and shutting down" in text
    assert "scheduler: finished the request in flight" in text  # the drain was not cut short
    assert "crashed with exit code" not in text
    assert status == ExitStatus(code=None, signal=signal.SIGKILL)  # what a shell shows as 137
    assert is_requested_stop_exit(status) and supervisor.stop_requested
    assert events(logs, "service.stopped")[0]["expected"] is True
    assert not events(logs, "service.sigkill") and not events(logs, "service.drain_timeout")
    assert gone(process.pid)


def test_a_launcher_that_never_drains_gets_the_group_then_sigkill(tmp_path: Path):
    config = make_config(tmp_path, program("sglang_like_drain.py", 0, "--ignore-sigterm"), grace_s=0.5)
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {})
    process = supervisor.start()
    stdout = Path(supervisor.log_paths[0])
    wait_for(lambda: "request in flight" in stdout.read_text(), 10, what="the scheduler's request")
    with capture_logs() as logs:
        status = supervisor.stop("test")
    assert "SIGTERM ignored" in stdout.read_text()
    assert events(logs, "service.drain_timeout")
    assert status is not None and gone(process.pid)
    assert not psutil.pids() or all(gone(p) for p in [process.pid])


def test_requested_stop_exits_are_not_crashes_but_other_codes_are():
    from ddtreed.service.launch import is_requested_stop_exit

    assert is_requested_stop_exit(ExitStatus(code=137, signal=None))
    assert is_requested_stop_exit(ExitStatus(code=None, signal=signal.SIGKILL))
    assert is_requested_stop_exit(ExitStatus(code=0, signal=None))
    assert not is_requested_stop_exit(ExitStatus(code=1, signal=None))
    assert not is_requested_stop_exit(ExitStatus(code=2, signal=None))


def test_stop_without_drain_terminates_the_group_at_once(tmp_path: Path):
    """A crash in progress: no drain, the scheduler is signalled with the launcher."""
    config = make_config(tmp_path, program("sglang_like_drain.py", 30), grace_s=20)
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {})
    supervisor.start()
    stdout = Path(supervisor.log_paths[0])
    wait_for(lambda: "request in flight" in stdout.read_text(), 10, what="the scheduler's request")
    status = supervisor.stop("crash", drain=False)
    assert "finished the request in flight" not in stdout.read_text()  # no 30 s drain waited for
    assert status is not None


def test_stop_does_not_wait_for_a_port_another_process_holds(tmp_path: Path):
    """Real 0.5.16 with its port taken: the service dies, the other server keeps the port."""
    import socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        config = make_config(tmp_path, program("hang.py"), port=port)
        supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {}, release_timeout_s=60)
        supervisor.start()
        wait_for(lambda: "hanging now" in Path(supervisor.log_paths[0]).read_text(), 10, what="start")
        with capture_logs() as logs:
            supervisor.stop("test")
        assert events(logs, "service.port_held_by_other")[0]["port"] == port
        assert not events(logs, "service.release_timeout")
    finally:
        holder.close()
