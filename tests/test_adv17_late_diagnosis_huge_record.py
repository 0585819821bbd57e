"""Adversary (adv17) of the late diagnosis at start-up (1cd9098, 07779e1): `diagnose_recorded()` runs
in `Daemon.run` after recovery and *before* the service is launched, on the crashes the stored record
holds. The adversary showed it unbounded: one open crash incident whose `tracebacks` column holds
60,000 small crash records (about 3 MB, a record of another version or a hostile row) kept the real
`ddtreed run` in the rules for 23 s before it launched the healthy service, without a watchdog ping
meanwhile. Since the fix it judges at most what the live path keeps (encode.MAX_STORED_CRASHES), so
the assertions are on what the daemon did (how many crashes it judged, that it did so before it
launched the service, that the record stayed whole), not on this machine's speed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "programs"))
sys.path.insert(0, str(Path(__file__).parent))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, kill_service_sessions, seed_open_crash_row, wait_for  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.incidents.encode import MAX_STORED_CRASHES  # noqa: E402

RECORDS = 60_000


def test_an_enormous_recorded_crash_does_not_delay_the_launch_of_a_healthy_service(tmp_path):
    directory = tmp_path / "run"
    directory.mkdir()
    config = fast_service.write_config(directory, port=free_port(), policy={"mode": "off"})
    state = directory / "state"
    records = [{"exception": "RuntimeError", "message": f"e{i}"} for i in range(RECORDS)]
    incident = seed_open_crash_row(state, "tracebacks", json.dumps(records))  # a killed daemon's row, from elsewhere
    daemon = DaemonProcess(config, directory / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("service.started") or daemon.process.poll() is not None, 180,
                 what="the daemon to launch its service")
        assert daemon.process.poll() is None, "ddtreed exited at start-up"
    finally:
        daemon.stop()
        kill_service_sessions(directory)
    [judged] = daemon.events("recorded_crash_diagnosed")
    assert judged["incident_id"] == incident and judged["crashes"] <= MAX_STORED_CRASHES, judged
    names = [event.get("event") for event in daemon.events()]
    assert names.index("recorded_crash_diagnosed") < names.index("service.started")
    with Store(database_path(state), create=False) as store:
        shown = store.get(incident)
        assert shown["status"] != "open"  # recovery closed it all the same
        assert len(shown["tracebacks"]) == RECORDS  # what was recorded stays recorded, all of it
