"""Crash text confirmed by the service's own exit as soon as the kernel is tearing it down.

A live service's crash text counts as a crash only once the service confirms it (`observed()`,
ddtreed/loop/incident_path.py). Its exit confirms it; a process whose every thread is in the
kernel's exit (PF_EXITING, set by `do_exit` on its way in, never cleared) can only end, so
`exiting()` confirms it too, before the teardown of its memory and descriptors is over. A process
whose main thread alone ended while another thread runs is not ending: it is not `exiting()`.
Real processes here, except for `observed()`'s loop (a fake daemon, no timing)."""

from __future__ import annotations

import subprocess
import sys
import time

from ddtreed.clock import SystemClock
from ddtreed.loop import incident_path
from ddtreed.records import Crash
from ddtreed.service import _proctree
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import ServiceRun
from supervision_helpers import make_config, wait_for

# The main thread ends (pthread_exit: the leader becomes a zombie with PF_EXITING) while a worker
# thread goes on: the process lives, and `waitpid` does not report it.
MAIN_THREAD_ENDS = (
    "import ctypes, threading, time\n"
    "threading.Thread(target=lambda: time.sleep(60)).start()\n"
    "print('ready', flush=True)\n"
    "ctypes.CDLL(None).pthread_exit(None)\n"
)


def test_a_running_process_is_not_exiting():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.1)
        assert not _proctree.exiting(child.pid)
        assert not LocalHost().process_exiting(child.pid)
    finally:
        child.kill()
        child.wait()


def test_an_exited_unreaped_process_is_exiting():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(lambda: _proctree._zombie(child.pid), what="the child a zombie")
        assert _proctree.exiting(child.pid)
    finally:
        child.wait()


def test_a_process_whose_main_thread_alone_ended_is_not_exiting():
    child = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_ENDS], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        wait_for(lambda: _proctree._zombie(child.pid), what="the main thread gone")  # the leader's state
        assert child.poll() is None  # the process lives on in its worker
        assert not _proctree.exiting(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_pid_that_is_gone_cannot_be_told_exiting():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not _proctree.exiting(child.pid)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_000_000.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Service:
    """Alive by waitpid and by its session, but every thread of it in the kernel's exit."""

    def __init__(self, exiting: bool) -> None:
        self._exiting = exiting

    def poll(self):
        return None

    def lost_member(self) -> bool:
        return False

    def exiting(self) -> bool:
        return self._exiting


class Health:
    ok = True


class Loop:
    def __init__(self, service: Service) -> None:
        self.service, self.clock, self.context = service, Clock(), None
        self.probed, self.recorded = 0, []

        class Rules:
            def diagnose(self, crashes, context):
                return "diagnosis"

        self.rules = Rules()

    def wait(self, seconds, condition=lambda: False, sleep=None):
        if not condition():
            self.clock.sleep(seconds)

    def prober(self):
        loop = self

        class Prober:
            def health(self, deadline):
                loop.probed += 1
                return Health()

        return Prober()


CRASH = (Crash(kind="traceback", exception="RuntimeError", message="boom", rank="TP0",
               prefix="Scheduler hit an exception", detected_at=1_000_000.0),)


def test_crash_text_of_a_service_in_its_exit_is_a_crash_without_the_settle_wait(monkeypatch):
    loop = Loop(Service(exiting=True))
    monkeypatch.setattr(incident_path, "record_observed", lambda *args: loop.recorded.append(args))
    assert incident_path.observed(loop, CRASH) is False  # a crash: the incident path goes on
    assert loop.clock.now == 0.0 and loop.probed == 0 and not loop.recorded  # no settle wait, no probe


def test_crash_text_of_a_service_not_exiting_still_waits_and_is_observed(monkeypatch):
    loop = Loop(Service(exiting=False))
    monkeypatch.setattr(incident_path, "record_observed", lambda *args: loop.recorded.append(args))
    assert incident_path.observed(loop, CRASH) is True  # up and healthy after the settle: not a crash
    assert loop.clock.now >= incident_path.OBSERVE_SETTLE_S and loop.probed == 1 and len(loop.recorded) == 1


def test_the_stop_of_an_exiting_service_keeps_its_own_exit_status(tmp_path, monkeypatch):
    """Confirmed while the kernel tears it down, the service is stopped once its own exit is
    over: the incident keeps how it ended (here exit 3), not ddtreed's SIGTERM."""
    argv = [sys.executable, "-c", "import time, sys; time.sleep(0.3); sys.exit(3)"]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    try:
        monkeypatch.setattr(run, "exiting", lambda: True)  # as if seen in its exit already
        status = run.stop("crash")
        assert status.code == 3 and status.signal is None
    finally:
        run.close()
