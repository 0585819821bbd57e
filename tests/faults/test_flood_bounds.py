"""Issue 16, traceback flood: what the daemon holds and stores stays bounded (benchmarks/
flood_memory.py measures the real daemon: 176.8 MB peak RSS before, 48 MB after), and the
founding crash, the first of the flood, is the one kept."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ddtreed.incidents import Store, encode
from ddtreed.logs import Follower
from ddtreed.records import Crash
from ddtreed.tracebacks import Assembler
from ddtreed.tracebacks.assembler import MAX_READY_GROUPS
from ddtreed.tracebacks.groups import MAX_CRASHES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from flood_memory import traceback_text

FLOOD = 20_000


def test_flood_a_take_after_a_flood_holds_at_most_the_first_groups_and_says_how_many_it_dropped(tmp_path):
    from structlog.testing import capture_logs

    log = tmp_path / "service.stderr.log"
    log.write_text("".join(traceback_text(index, 3) for index in range(FLOOD)))
    assembler = Assembler(eager=True)
    with capture_logs() as events, Follower([str(log)], max_bytes_per_read=64 << 20) as follower:
        for chunk in follower.read():  # the whole flood in one turn: the worst case for take()
            assembler.feed(chunk)
        groups = assembler.take(time.time(), final=True)
    crashes = [crash for group in groups for crash in group]
    assert len(crashes) <= (MAX_READY_GROUPS + 1) * MAX_CRASHES
    assert crashes[0].message.startswith("flood 0:")  # the earliest is kept, not the latest
    dropped = [e for e in events if e["event"] == "crash_groups_dropped"]
    assert len(dropped) == 1 and dropped[0]["crashes"] + len(crashes) == FLOOD


def test_flood_an_incident_stores_at_most_max_stored_crashes(tmp_path):
    crashes = [Crash(kind="traceback", exception="RuntimeError", message=f"flood {index}", rank=f"TP{index}",
                     excerpt=("Traceback (most recent call last):", f"RuntimeError: flood {index}"))
               for index in range(encode.MAX_STORED_CRASHES * 4)]
    with Store(tmp_path / "incidents.sqlite3") as store:
        incident_id = store.open_incident("crash", crashes)
        stored = store.get(incident_id)["tracebacks"]
    assert len(stored) == encode.MAX_STORED_CRASHES
    assert stored[0]["message"] == "flood 0"


def test_flood_draining_a_flooded_log_still_answers_signals(tmp_path):
    """SIGTERM during a flood: the drain after a crash reads until the logs go quiet, which a flood
    never does (DRAIN_MAX_S); every read first answers the signal queue (before: 27.7 s to exit)."""
    from ddtreed.clock import SystemClock
    from ddtreed.service.service_run import ServiceRun
    from supervision_helpers import make_config

    class Stop(Exception):
        pass

    turns = []

    def on_turn():
        turns.append(1)
        if len(turns) == 3:
            raise Stop()

    log = tmp_path / "flood.log"
    log.write_text("".join(traceback_text(index, 3) for index in range(2000)))
    run = ServiceRun(None, make_config(tmp_path, ["true"]), ["true"], {}, SystemClock(), on_turn=on_turn)
    run.follower = Follower([str(log)], max_bytes_per_read=4096)  # many reads: the flood outlasts them
    try:
        try:
            run.drain()
        except Stop:
            pass
        else:
            raise AssertionError("the drain never answered the signal queue")
    finally:
        run.follower.close()
    assert len(turns) == 3
