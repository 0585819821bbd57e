"""Session 8's adversarial pass on the service's pidfd in the follower's waits (perfwake): real
processes, process groups, signals and files. The service killed, stopped and continued, reaped by
someone else, behind a wrapper shell, dying right after its traceback, relaunched many times: the
loop notices each exit at once (a long wait ends), never takes a stopped service for an exited one,
never hangs, reads the crash's last lines, and keeps no descriptor of an earlier launch."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from ddtreed.clock import SystemClock
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import ServiceRun
from supervision_helpers import make_config

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd_open here")

# Runs until the stop file appears (then exits 0), printing nothing.
IDLE = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.005)\n"
# A scheduler's traceback, then death at once (no flush at exit, no atexit: os._exit).
CRASH = (
    "import os, sys\n"
    "sys.stderr.write('[2026-12-01 08:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\\n'\n"
    "                 '  File \"/srv/sglang/srt/managers/scheduler.py\", line 10, in run_scheduler_process\\n'\n"
    "                 '    scheduler.event_loop()\\n'\n"
    "                 'RuntimeError: the last line of the crash, written just before the exit\\n')\n"
    "sys.stderr.flush()\n"
    "os._exit(1)\n"
)
LONG = 120.0  # a wait this long ends only by the service's exit (a test would hang, not pass slowly)


def launch(tmp_path, argv: list[str]) -> ServiceRun:
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    return run


def idle(tmp_path) -> tuple[ServiceRun, str]:
    stop = str(tmp_path / "stop")
    return launch(tmp_path, [sys.executable, "-c", IDLE, stop]), stop


def exited(run: ServiceRun, turns: int = 5, taken: list | None = None):
    """Pump long waits until the exit is seen; at most `turns` (each ends at once once it exited).
    `taken` gets the crashes the pumps took (as the loop does)."""
    for _ in range(turns):
        groups = run.pump(LONG)
        if taken is not None:
            taken.extend(crash for group in groups for crash in group)
        if (status := run.poll()) is not None:
            return status
    return None


def finish(run: ServiceRun, stop: str | None = None) -> None:
    if stop is not None:
        open(stop, "w").close()
    try:
        run.stop("test over", final=True)
    finally:
        run.close()


def test_a_group_sigkill_during_a_long_wait_ends_it_and_reads_as_the_signal(tmp_path):
    run, stop = idle(tmp_path)
    try:
        run.pump(0.05)
        assert run.poll() is None
        started = time.monotonic()
        os.killpg(run.supervisor.process.pid, signal.SIGKILL)
        status = exited(run)
        assert status is not None and status.signal == signal.SIGKILL
        assert time.monotonic() - started < LONG  # the wait was ended by the exit, not its timeout
        assert run.follower.woken
    finally:
        finish(run, stop)


def test_a_stopped_service_is_not_an_exited_one_and_its_exit_after_sigcont_is_seen(tmp_path):
    run, stop = idle(tmp_path)
    try:
        pid = run.supervisor.process.pid
        run.pump(0.05)
        os.kill(pid, signal.SIGSTOP)
        for _ in range(5):
            run.pump(0.05)
            assert run.poll() is None
        assert not run.follower.woken
        os.kill(pid, signal.SIGCONT)
        open(stop, "w").close()
        status = exited(run)
        assert status is not None and status.code == 0
    finally:
        finish(run, stop)


def test_a_service_reaped_by_someone_else_ends_the_wait_and_the_poll_does_not_hang(tmp_path):
    run, stop = idle(tmp_path)
    try:
        pid = run.supervisor.process.pid
        run.pump(0.05)
        open(stop, "w").close()
        reaped, _ = os.waitpid(pid, 0)  # another waiter in the daemon's process took its status
        assert reaped == pid
        status = exited(run)
        assert status is not None  # Popen reads the lost status as 0: the exit is still seen
    finally:
        finish(run, stop)


def test_the_last_lines_of_a_crash_behind_a_wrapper_shell_are_read(tmp_path):
    """`sh -c` without exec: the pidfd is the shell's, which exits after its child; the drain
    still reads the traceback's last line, written just before the child's exit."""
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    run = launch(tmp_path, ["/bin/sh", "-c", f"{sys.executable} {script}; exit $?"])
    try:
        crashes: list = []
        status = exited(run, taken=crashes)
        assert status is not None and status.code == 1
        crashes += run.drain()
        assert any("the last line of the crash" in (crash.message or "") for crash in crashes), crashes
    finally:
        finish(run)


def test_the_last_lines_of_a_crash_dying_right_after_them_are_read(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    run = launch(tmp_path, [sys.executable, str(script)])
    try:
        crashes: list = []
        status = exited(run, taken=crashes)
        assert status is not None and status.code == 1
        crashes += run.drain()
        assert [crash.message for crash in crashes] == ["the last line of the crash, written just before the exit"]
    finally:
        finish(run)


def _descriptors() -> set[str]:
    return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def test_many_relaunches_keep_no_pidfd_nor_inotify_of_an_earlier_launch(tmp_path):
    def count() -> int:
        return sum(1 for _ in os.listdir("/proc/self/fd"))

    run, stop = idle(tmp_path)
    finish(run, stop)
    os.unlink(stop)
    before = count()
    for turn in range(25):
        run, stop = idle(tmp_path)
        pidfd = run.supervisor.process.pidfd
        assert pidfd is not None
        run.pump(0.01)
        if turn % 2:
            os.killpg(run.supervisor.process.pid, signal.SIGKILL)
            assert exited(run) is not None
        finish(run, stop)
        os.unlink(stop)
        assert run.supervisor.process.pidfd is None
    assert count() <= before
    assert not any("pidfd" in target for target in _descriptors())
