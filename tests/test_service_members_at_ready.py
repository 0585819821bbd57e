"""The serving session's members are known from the launch's ready line, not only once serving is verified.

`lost_member()` confirms live crash text by a member of the service's session leaving it. Members
are processes listed twice in a row (a second apart), so they were known only a second after the
serving watch was attached. On the real H200 (device run r15b, SGLang 0.5.16) a detokenizer killed
right after the restarted service was verified fell in that second: nothing was known to be lost,
and the crash waited out the 2 s settle and a health probe (noticed 7.2 s after the kill, against
0.6 s for a scheduler killed later). Listing from the ready line on, the members are known by the
time the start-up probes are done. Real processes (a launcher with a child in its session), real
files and /proc."""

from __future__ import annotations

import os
import signal
import sys
import time

from ddtreed.clock import SystemClock
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import MEMBERS_FIRST_S, ServiceRun
from supervision_helpers import make_config, wait_for

# A launcher that starts a child (its "detokenizer"), prints SGLang's ready line and goes on running.
SERVICE = (
    "import os, subprocess, sys, time\n"
    "stop, pidfile = sys.argv[1], sys.argv[2]\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "open(pidfile + '.tmp', 'w').write(str(child.pid)); os.replace(pidfile + '.tmp', pidfile)\n"
    "os.write(2, b'[2026-12-03 05:16:01] The server is fired up and ready to roll!\\n')\n"
    "while not os.path.exists(stop):\n"
    "    time.sleep(0.01)\n"
    "child.kill()\n"
)


def launch(tmp_path):
    stop, pidfile = str(tmp_path / "stop"), str(tmp_path / "child.pid")
    argv = [sys.executable, "-c", SERVICE, stop, pidfile]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    return run, stop, pidfile


def pump_for(run, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run.pump(0.05)


def test_members_are_listed_from_the_ready_line_before_serving(tmp_path):
    run, stop, pidfile = launch(tmp_path)
    try:
        wait_for(lambda: (run.pump(0.05), run.ready)[1], what="the ready line read")
        child = int(wait_for(lambda: os.path.exists(pidfile) and open(pidfile).read(), what="the child's pid"))
        assert run.serving is None  # the start-up probes have not verified it yet
        pump_for(run, MEMBERS_FIRST_S + 0.3)
        assert {run.pid, child} <= run._stable  # both listed twice: members
        assert not run.lost_member()
        os.kill(child, signal.SIGKILL)
        wait_for(run.lost_member, what="the killed child seen as a lost member")
    finally:
        open(stop, "w").close()
        try:
            run.stop("test over", final=True)
        finally:
            run.close()


def test_nothing_is_listed_before_the_ready_line(tmp_path):
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    listings = []
    session_pids = run.host.session_pids
    run.host.session_pids = lambda session: listings.append(session) or session_pids(session)
    try:
        pump_for(run, MEMBERS_FIRST_S + 0.3)
        assert listings == [] and run._stable == set()  # starting: its processes come and go
    finally:
        try:
            run.stop("test over", final=True)
        finally:
            run.close()
