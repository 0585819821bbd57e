"""The drain after a crash: no quiet wait once nothing of the service is left to write its logs."""

from __future__ import annotations

import sys

from ddtreed.clock import SystemClock
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import ServiceRun
from supervision_helpers import make_config, wait_for

TRACEBACK = (
    "import sys\n"
    "sys.stderr.write('[2026-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\\n'\n"
    "                 '  File \"/x/scheduler.py\", line 1, in run\\n'\n"
    "                 'RuntimeError: CUDA error: an illegal memory access was encountered\\n')\n"
    "sys.stderr.flush()\n"
)
# A child of the same session that outlives the launcher (a rank still going down).
LINGERING_CHILD = (
    "import subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
)


class Recording:
    """The follower as the drain uses it, with each read and wait written down in order."""

    def __init__(self, follower):
        self._follower, self.calls = follower, []

    def read(self):
        chunks = self._follower.read()
        self.calls.append(("read", sum(len(chunk.lines) for chunk in chunks)))
        return chunks

    def wait(self, timeout):
        self.calls.append(("wait", None))
        return self._follower.wait(timeout)

    def close(self):
        self._follower.close()


def launch(tmp_path, script: str) -> ServiceRun:
    argv = [sys.executable, "-c", script]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    run.follower = Recording(run.follower)
    return run


def test_drain_reads_to_the_end_without_waiting_once_the_session_is_empty(tmp_path):
    run = launch(tmp_path, TRACEBACK)
    try:
        wait_for(run.writers_gone, timeout=30, what="the service and its session gone")
        crashes = run.drain()
    finally:
        run.stop("crash")
        run.close()
    assert [c.exception for c in crashes] == ["RuntimeError"]
    calls = run.follower.calls
    assert ("wait", None) not in calls  # no quiet wait
    assert calls[-1] == ("read", 0) and calls[0][1] > 0  # read until nothing was left, then done


def test_drain_waits_for_quiet_while_a_process_of_the_session_lives(tmp_path):
    run = launch(tmp_path, LINGERING_CHILD + TRACEBACK)
    try:
        wait_for(lambda: run.poll() is not None, timeout=30, what="the launcher exited")
        assert not run.writers_gone()  # its child is still in the session
        crashes = run.drain()
    finally:
        run.stop("crash")
        run.close()
    assert [c.exception for c in crashes] == ["RuntimeError"]
    assert ("wait", None) in run.follower.calls  # it may still write: the quiet wait applies
    assert run.writers_gone()  # the stop took the child down
