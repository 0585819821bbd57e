"""Adversary (adv17) of the late diagnosis at start-up (1cd9098, 07779e1): `diagnose_recorded()` runs
in `Daemon.run` after recovery and *before* the service is launched, on every crash the stored
record holds, with no bound on their number (the live path never judges more than a group's 256:
tracebacks.groups.MAX_CRASHES, encode.MAX_STORED_CRASHES) and without answering the watchdog.

A record of another version or a hostile row (here: one open crash incident whose `tracebacks`
column holds 60,000 small crash records, about 3 MB) makes the real `ddtreed run` spend tens of
seconds in the rules before it launches the healthy service: the launch of a healthy service is
delayed by ddtreed itself, and no WATCHDOG=1 is sent meanwhile (in production a larger row, or
100 incidents of 256 distinct ranks each, passes WatchdogSec=180 s and systemd kills ddtreed, with
the service that was never started).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "programs"))
sys.path.insert(0, str(Path(__file__).parent))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, kill_service_sessions, wait_for  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.records import Crash  # noqa: E402
from ddtreed.signature import signature_of  # noqa: E402

RECORDS = 60_000
LAUNCH_WITHIN_S = 10.0  # a start with nothing to recover launches the service in well under a second


def test_an_enormous_recorded_crash_does_not_delay_the_launch_of_a_healthy_service(tmp_path):
    directory = tmp_path / "run"
    directory.mkdir()
    config = fast_service.write_config(directory, port=free_port(), policy={"mode": "off"})
    state = directory / "state"
    state.mkdir(parents=True, exist_ok=True)
    crash = Crash(kind="traceback", exception="RuntimeError", message="e0")
    with Store(database_path(state)) as store:  # a killed daemon's row, its record from elsewhere
        incident = store.open_incident("crash", (crash,), signature_of(crash), None, None, service="sglang")
        with store.atomic() as db:
            db.execute("UPDATE incidents SET tracebacks = ? WHERE id = ?",
                       [json.dumps([{"exception": "RuntimeError", "message": f"e{i}"} for i in range(RECORDS)]),
                        incident])
    started = time.monotonic()
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("service.started") or daemon.process.poll() is not None, 180,
                 what="the daemon to launch its service")
        launched_after = time.monotonic() - started
        assert daemon.process.poll() is None, "ddtreed exited at start-up"
    finally:
        daemon.stop()
        kill_service_sessions(directory)
    with Store(database_path(state), create=False) as store:
        assert store.get(incident)["status"] != "open"  # recovery closed it all the same
    assert launched_after < LAUNCH_WITHIN_S, (
        f"the healthy service was launched {launched_after:.1f} s after ddtreed started "
        f"(the late diagnosis of one {RECORDS}-crash record ran first)")
