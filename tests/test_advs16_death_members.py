"""ServiceRun.death() on real processes: a helper that lives a few seconds after the ready line
(a compiler run, an `nvidia-smi` call) is no member of the service, so its normal end cuts no
probe, however often a probe asks; a real member's loss still does. While a probe waits, the
loop does not pump: death()'s own one-second look must not redefine who is a member."""

from __future__ import annotations

import os
import signal
import sys
import time

from ddtreed.clock import SystemClock
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import MEMBERS_FIRST_S, ServiceRun
from supervision_helpers import make_config, wait_for

SERVICE = (
    "import os, subprocess, sys, time\n"
    "stop, go, pidfile = sys.argv[1], sys.argv[2], sys.argv[3]\n"
    "member = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "open(pidfile + '.tmp', 'w').write(str(member.pid)); os.replace(pidfile + '.tmp', pidfile)\n"
    "os.write(2, b'[2026-12-03 05:16:01] The server is fired up and ready to roll!\\n')\n"
    "while not os.path.exists(go):\n"
    "    time.sleep(0.01)\n"
    "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(2.5)'])\n"
    "open(go + '.helper', 'w').write(str(helper.pid))\n"
    "helper.wait()\n"
    "open(go + '.done', 'w').close()\n"
    "while not os.path.exists(stop):\n"
    "    time.sleep(0.01)\n"
    "member.kill()\n"
)


def test_a_helper_that_ends_cuts_no_probe_and_a_member_that_dies_does(tmp_path):
    stop, go, pidfile = str(tmp_path / "stop"), str(tmp_path / "go"), str(tmp_path / "member.pid")
    argv = [sys.executable, "-c", SERVICE, stop, go, pidfile]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    try:
        wait_for(lambda: (run.pump(0.05), run.ready)[1], what="the ready line read")
        member = int(wait_for(lambda: os.path.exists(pidfile) and open(pidfile).read(), what="the member's pid"))
        deadline = time.monotonic() + MEMBERS_FIRST_S + 0.3
        while time.monotonic() < deadline:  # a probe waits (the loop does not pump): members learned
            assert run.death() == ""
            time.sleep(0.01)
        assert {run.pid, member} <= run._stable
        open(go, "w").close()  # a helper comes, lives 2.5 s, is reaped: a probe asks all along
        while not os.path.exists(go + ".done"):
            assert run.death() == "", f"helper {open(go + '.helper').read()} cut the probe"
            time.sleep(0.01)
        wait_for(lambda: os.path.exists(go + ".helper"), what="the helper's pid")
        time.sleep(1.1)
        assert run.death() == "" and run.member_cuts == 0 and not run.lost_member()
        os.kill(member, signal.SIGKILL)
        why = wait_for(run.death, timeout=5.0, what="the lost member named")
        assert why == f"a member of the service's session died (pid {member})" and run.member_cuts == 1
    finally:
        open(stop, "w").close()
        try:
            run.stop("test over", final=True)
        finally:
            run.close()
