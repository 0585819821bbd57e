"""The serving session's periodic listing (a /proc pass) is not done on the turn that read a crash.

`ServiceRun.pump` lists the serving service's session every MEMBERS_EVERY_S (its members, so that
`lost_member()` can confirm crash text by a member's loss). On the turn whose read completes a
crash group, a listing due then waits for the next turn: `observed()` asks `lost_member()` at
once, which makes its own pass against the members of the earlier listings, so the crash path
does not pay for a second one. It waits one turn at most: on two crash turns in a row, the second
lists. Real process, files and inotify."""

from __future__ import annotations

import os
import sys

from ddtreed.clock import SystemClock
from ddtreed.service.host import LocalHost
from ddtreed.service.service_run import ServiceRun
from supervision_helpers import PROGRAMS, make_config, wait_for

sys.path.insert(0, str(PROGRAMS))
from fast_service import founding_traceback  # noqa: E402

# Prints the founding traceback of two ranks each time a cue file appears, and goes on running.
SERVICE = (
    "import os, sys, time\n"
    "cue, stop, text = sys.argv[1], sys.argv[2], sys.argv[3]\n"
    "while not os.path.exists(stop):\n"
    "    if os.path.exists(cue):\n"
    "        os.unlink(cue)\n"
    "        os.write(2, text.encode())\n"
    "    time.sleep(0.005)\n"
)


class Serving:
    """The serving watch's part the pump uses: it reads chunks, raises nothing."""

    def feed(self, chunk):
        return []


def launch(tmp_path):
    cue, stop = str(tmp_path / "cue"), str(tmp_path / "stop")
    argv = [sys.executable, "-c", SERVICE, cue, stop, founding_traceback(["TP0", "TP1"])]
    run = ServiceRun(LocalHost(), make_config(tmp_path, argv), argv, {}, SystemClock())
    run.start()
    listings = []
    session_pids = run.host.session_pids
    run.host.session_pids = lambda session: listings.append(session) or session_pids(session)
    return run, cue, stop, listings


def crash_turn(run, cue: str) -> list:
    """Cue the traceback, wait until it is in the log, then one pump turn: it reads the crash."""
    stderr_log = run.supervisor.log_paths[1]
    before = os.path.getsize(stderr_log)
    open(cue, "w").close()
    wait_for(lambda: not os.path.exists(cue) and os.path.getsize(stderr_log) > before, what="the traceback written")
    return run.pump(0.05)


def finish(run, stop: str) -> None:
    open(stop, "w").close()
    try:
        run.stop("test over", final=True)
    finally:
        run.close()


def test_a_listing_due_on_the_crash_turn_waits_for_the_next_turn(tmp_path):
    run, cue, stop, listings = launch(tmp_path)
    try:
        run.pump(0.05)  # the launch's first read
        run.serving = Serving()  # verified: serving, the first listing due at once
        assert crash_turn(run, cue) and listings == []  # the crash's turn: no /proc pass
        run.pump(0.01)
        assert listings == [run.pid]  # the next turn lists
        assert run._stable == set() and run._members == {run.pid}
    finally:
        finish(run, stop)


def test_a_listing_waits_one_turn_at_most(tmp_path):
    run, cue, stop, listings = launch(tmp_path)
    try:
        run.pump(0.05)
        run.serving = Serving()
        assert crash_turn(run, cue) and listings == []
        assert crash_turn(run, cue) and listings == [run.pid]  # a second crash turn in a row lists
    finally:
        finish(run, stop)


def test_without_a_crash_the_listing_is_done_when_due(tmp_path):
    run, cue, stop, listings = launch(tmp_path)
    try:
        run.pump(0.05)
        run.serving = Serving()
        run.pump(0.01)
        assert listings == [run.pid] and os.path.exists(run.supervisor.log_paths[1])
    finally:
        finish(run, stop)
