"""Issue 19: the stop of a service tree that is already gone walks the process table once.

`_proctree.session_pids` (asked twice by `Supervisor.stop` before its sweep) is one `getsid` pass
over /proc on Linux: the same pids psutil finds, with no per-process file read; the sweep is the
one psutil scan left. Real processes, a real session, a real zombie.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddtreed.records import ExitStatus
from ddtreed.service import _proctree
from ddtreed.service.host import LocalHost
from ddtreed.service.launch import Supervisor

from supervision_helpers import make_config, program, wait_for

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc")

# A session leader with a live child and a child that exited unreaped (a zombie).
LEADER = """
import subprocess, sys, time
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
zombie = subprocess.Popen(["true"])
print(sleeper.pid, zombie.pid, flush=True)
time.sleep(120)
"""


def psutil_view(session_id: int) -> list[int]:
    """What the psutil scan used to answer."""
    return sorted(proc.pid for proc in psutil.process_iter(["status"])
                  if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.pid != os.getpid()
                  and _session(proc.pid) == session_id)


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def test_session_members_are_psutils_without_the_zombie():
    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        sleeper, zombie = map(int, leader.stdout.readline().split())
        wait_for(lambda: psutil.Process(zombie).status() == psutil.STATUS_ZOMBIE, 30, what="the zombie")
        assert _proctree.session_pids(leader.pid) == psutil_view(leader.pid) == sorted([leader.pid, sleeper])
        assert _proctree.session_pids(os.getsid(0)) == psutil_view(os.getsid(0))  # ours: all but this pid
        assert os.getpid() not in _proctree.session_pids(os.getsid(0))
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(timeout=30)
    wait_for(lambda: not psutil_view(leader.pid), 30, what="the session gone")
    assert _proctree.session_pids(leader.pid) == []


def test_stopping_a_tree_that_already_exited_scans_the_process_table_once(tmp_path: Path, monkeypatch):
    config = make_config(tmp_path, program("crash_loop.py"))
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {})
    process = supervisor.start()
    wait_for(lambda: supervisor.poll() is not None and not _proctree.session_pids(process.pid), 30,
             what="the crashed service and its session gone")
    scans: list[float] = []
    real = psutil.process_iter

    def counted(*args, **kwargs):
        scans.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(psutil, "process_iter", counted)
    status = supervisor.stop("crash")
    assert status == ExitStatus(code=1, signal=None)
    assert len(scans) == 1  # the sweep's; the two session checks read no process table through psutil
