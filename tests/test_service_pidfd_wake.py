"""The service's pidfd in the follower's waits (issue 19 item 2: the steady wake-up).

A wait or a flood hold-off polls the service's pidfd with the inotify descriptor (a `select` for
the hold-off, not a sleep): the service's exit ends it at once, and while the last wait found the
pidfd not readable `ServiceRun.poll` asks the kernel nothing (no waitpid per turn). Where
`pidfd_open` fails, every poll is a waitpid, as before. Real processes, files and inotify."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ddtreed.clock import SystemClock
from ddtreed.logs import Follower
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import ServiceRun
from supervision_helpers import make_config

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd_open here")

CALM = "[2026-12-01 07:54:47 TP0] Decode batch, #running-req: 4, #token: 1000, token usage: 0.02, " \
       "cuda graph: True, gen throughput (token/s): 812.55, #queue-req: 0\n"
# Runs until the stop file appears; with FLOOD set, writes a calm decode line every millisecond.
SERVICE = (
    "import os, sys, time\n"
    "stop, flood = sys.argv[1], sys.argv[2] == 'flood'\n"
    "while not os.path.exists(stop):\n"
    f"    if flood: sys.stdout.write({CALM!r}); sys.stdout.flush()\n"
    "    time.sleep(0.001)\n"
)


def launch(tmp_path, mode: str) -> tuple[ServiceRun, str]:
    stop = str(tmp_path / "stop")
    argv = [sys.executable, "-c", SERVICE, stop, mode]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    return run, stop


def finish(run: ServiceRun, stop: str) -> None:
    open(stop, "w").close()
    try:
        run.stop("test over", final=True)
    finally:
        run.close()


def test_an_idle_service_costs_no_waitpid_per_turn_and_its_exit_wakes_the_wait(tmp_path):
    run, stop = launch(tmp_path, "idle")
    try:
        process = run.supervisor.process
        assert process.pidfd is not None
        for _ in range(20):
            run.pump(0.02)
            assert run.poll() is None
        assert process.polls == 0  # every wait polled the pidfd and found the service running
        open(stop, "w").close()  # the service exits by itself now
        run.pump(600.0)  # returns when the pidfd is readable, not after 600 s
        status = run.poll()
        assert status is not None and status.code == 0
        assert run.follower.woken
        assert process.polls == 1  # the one waitpid: after the wake
        # The pidfd stays readable once its process exited: it is polled no more, so a later
        # wait is not woken by it again (the drain's waits would spin).
        assert run.follower.wait(0.05) is False
    finally:
        finish(run, stop)


def test_a_flood_turn_held_back_spares_its_waitpid(tmp_path):
    run, stop = launch(tmp_path, "flood")
    try:
        process = run.supervisor.process
        turns = 30
        for _ in range(turns):
            run.pump(0.2)
            assert run.poll() is None
        holds = run.follower.holds
        assert holds >= 10  # a flood: most turns are hold-offs
        assert process.polls <= turns - holds  # no held-back turn asked for a waitpid
    finally:
        finish(run, stop)


def test_the_service_exit_during_a_hold_off_ends_it_at_once(tmp_path):
    """A flood's hold-off (here 600 s long) ends when the service exits, not at its end."""
    path = tmp_path / "service.log"
    path.write_text("")
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    pidfd = os.pidfd_open(child.pid)
    follower = Follower([str(path)], min_read_interval_s=600.0)
    try:
        follower.wake_on(pidfd)
        with open(path, "a") as out:
            for _ in range(2):  # two reads close together: a flood of calm lines
                out.write(CALM * 5)
                out.flush()
                assert follower.wait(5.0)
                assert follower.read()
            out.write(CALM)
            out.flush()
        child.stdin.close()  # the child exits now, while the next wait holds the read back
        assert follower.wait(900.0) is True
        assert follower.holds == 1 and follower.woken
        assert time.monotonic() < follower._next_read_at  # ended before the hold-off's end
        assert child.poll() is not None or child.wait(5) is not None
        assert len(follower.read()[0].lines) == 1  # the line written meanwhile is read now
        assert not follower.wake_quiet()  # the pidfd said "exited": the caller asks the kernel
    finally:
        follower.close()
        os.close(pidfd)
        child.kill()
        child.wait()


def test_without_pidfd_open_every_poll_is_a_waitpid(tmp_path, monkeypatch):
    def refused(pid):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", refused)
    run, stop = launch(tmp_path, "idle")
    try:
        process = run.supervisor.process
        assert process.pidfd is None
        for _ in range(10):
            run.pump(0.02)
            assert run.poll() is None
        assert process.polls == 10
        open(stop, "w").close()
        status = None
        for _ in range(500):
            run.pump(0.02)
            if (status := run.poll()) is not None:
                break
        assert status is not None and status.code == 0
        assert not run.follower.woken
    finally:
        finish(run, stop)


def test_the_settle_wait_of_live_crash_text_is_ended_by_the_exit_itself(tmp_path):
    """`sleep_until_exit` (the slices of `observed()`'s settle wait) selects on the pidfd: the
    service's exit ends it, and the next `poll` asks the kernel and sees the exit, though the
    follower's last wait had found the service running (no waitpid then)."""
    run, stop = launch(tmp_path, "idle")
    try:
        for _ in range(3):
            run.pump(0.02)
        assert run.poll() is None and run.supervisor.process.polls == 0
        run.sleep_until_exit(0.01)  # still running: the slice passes, nothing changes
        assert run.poll() is None
        open(stop, "w").close()
        run.sleep_until_exit(600.0)  # returns at the exit, not after 600 s
        status = run.poll()
        assert status is not None and status.code == 0
    finally:
        finish(run, stop)


def test_without_a_pidfd_the_settle_wait_is_the_clocks_sleep(tmp_path):
    class CountingClock(SystemClock):
        slept: list[float] = []

        def sleep(self, seconds: float) -> None:
            self.slept.append(seconds)
            super().sleep(seconds)

    stop = str(tmp_path / "stop")
    argv = [sys.executable, "-c", SERVICE, stop, "idle"]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, CountingClock())
    run.start()
    try:
        run.supervisor.process.close_pidfd()
        run.sleep_until_exit(0.01)
        assert CountingClock.slept == [0.01]
    finally:
        finish(run, stop)
