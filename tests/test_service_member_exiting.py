"""A member of the serving session in the kernel's exit confirms crash text, before its teardown ends.

Real SGLang 0.5.16 on the H200 (device run r15b): after an exception the scheduler reached its
interpreter's shutdown about a second after its traceback, yet it was not gone (not a zombie, not
out of /proc) within the 2 s settle wait; with its CUDA context and the GPU's memory to tear
down, its exit outlasts the wait, and the crash was stopped only 5.25 s after its text, when the
launcher killed its tree and the health probe failed. A task in `do_exit` never returns to user
space (PF_EXITING, set on the way in, never cleared), so a member whose every thread has it is
leaving: `lost_member()` says so at once.

`_proctree.exiting` is read from real processes here (running, exited but unreaped, a main thread
ended while a worker runs, gone). A process held inside the kernel's exit cannot be made on demand,
so the ServiceRun case asks a real session of real processes and takes the kernel's flag for one
pid from the host (`process_exiting`), as a remote or fake host would answer it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ddtreed.clock import SystemClock
from ddtreed.service import _proctree
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import MEMBERS_FIRST_S, ServiceRun
from supervision_helpers import make_config, wait_for

MAIN_THREAD_ENDS = (
    "import ctypes, threading, time\n"
    "threading.Thread(target=lambda: time.sleep(60)).start()\n"
    "print('ready', flush=True)\n"
    "ctypes.CDLL(None).pthread_exit(None)\n"
)

SERVICE = (
    "import os, subprocess, sys, time\n"
    "stop, pidfile = sys.argv[1], sys.argv[2]\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "open(pidfile + '.tmp', 'w').write(str(child.pid)); os.replace(pidfile + '.tmp', pidfile)\n"
    "os.write(2, b'[2026-12-03 05:12:27] The server is fired up and ready to roll!\\n')\n"
    "while not os.path.exists(stop):\n"
    "    time.sleep(0.01)\n"
    "child.kill()\n"
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
        assert _proctree.exiting(child.pid) and LocalHost().process_exiting(child.pid)
    finally:
        child.wait()


def test_a_process_whose_main_thread_alone_ended_is_not_exiting():
    child = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_ENDS], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        wait_for(lambda: _proctree._zombie(child.pid), what="the main thread gone")
        assert child.poll() is None  # the process lives on in its worker
        assert not _proctree.exiting(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_pid_that_is_gone_cannot_be_told_exiting():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not _proctree.exiting(child.pid)


def test_a_member_in_the_kernels_exit_is_a_lost_member(tmp_path):
    stop, pidfile = str(tmp_path / "stop"), str(tmp_path / "child.pid")
    argv = [sys.executable, "-c", SERVICE, stop, pidfile]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    in_exit: set[int] = set()
    run.host.process_exiting = lambda pid: pid in in_exit or _proctree.exiting(pid)
    run.start()
    try:
        wait_for(lambda: (run.pump(0.05), run.ready)[1], what="the ready line read")
        child = int(wait_for(lambda: os.path.exists(pidfile) and open(pidfile).read(), what="the child's pid"))
        deadline = time.monotonic() + MEMBERS_FIRST_S + 0.3
        while time.monotonic() < deadline:
            run.pump(0.05)
        assert child in run._stable and not run.lost_member()
        in_exit.add(child)  # the kernel is tearing it down: still listed, not a zombie
        assert child in run.host.session_pids(run.pid)
        assert run.lost_member()
    finally:
        open(stop, "w").close()
        try:
            run.stop("test over", final=True)
        finally:
            run.close()
