"""Issue 7.4: a service that crashes a second after every start, for 5 minutes of simulated time.

Time is compressed 20x: the service crashes 50 ms after each start, and every policy window is
divided by 20 (restart window 600 s → 30 s, backoff 1 s…60 s → 0.05…3 s, systemd's
RestartSec=10s → 0.5 s). The real `ddtreed run` supervises it for 15 s (5 simulated minutes)
and is started again, as systemd's Restart=on-failure would, each time it gives up with exit 75.
Checked: each daemon life starts the service at most budget + 1 times and then reports the spent
budget; the founding incident escalates and stays frozen across daemon restarts; memory and the
database stay bounded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402

SCALE = 20.0  # simulated seconds per real second
SIMULATED_S = 300.0
MAX_RESTARTS = 3
RESTART_SEC = 10.0 / SCALE  # ddtreed/data/systemd/ddtreed.service: RestartSec=10s


def _life(config: Path, directory: Path, index: int, until: float) -> dict:
    """One daemon process, from start until it gives up or the simulated time is over."""
    daemon = DaemonProcess(config, directory / f"daemon{index}.jsonl")
    process = psutil.Process(daemon.pid)
    began, rss = time.time(), []
    while time.monotonic() < until and daemon.process.poll() is None:
        try:
            rss.append(process.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)  # the sampling period, not a wait for a condition
    code = daemon.stop()
    return {"daemon": daemon, "code": code, "began": began, "ended": time.time(), "rss": rss}


@pytest.fixture(scope="module")
def crash_loop(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("crashloop")
    marks = directory / "service-events.txt"
    config = fast_service.write_config(
        directory, port=free_port(),
        extra_args=("--events", str(marks), "--crash-after", str(1.0 / SCALE)),
        policy={"max_restarts": MAX_RESTARTS, "restart_window_s": 600.0 / SCALE,
                "backoff_initial_s": 1.0 / SCALE, "backoff_max_s": 60.0 / SCALE})
    until = time.monotonic() + SIMULATED_S / SCALE
    lives = []
    while time.monotonic() < until:
        lives.append(_life(config, directory, len(lives), until))
        if lives[-1]["code"] == 75:
            time.sleep(RESTART_SEC)  # systemd's restart delay, compressed
    starts = [float(line.split()[1]) for line in marks.read_text().splitlines() if line.startswith("start")]
    for life in lives:
        life["starts"] = [s for s in starts if life["began"] <= s <= life["ended"]]
    database = database_path(directory / "state")
    with Store(database) as store:
        incidents = store.list_incidents(limit=1000)
        frozen = store.frozen()
    size = sum(path.stat().st_size for path in database.parent.glob(database.name + "*"))
    return {"lives": lives, "starts": starts, "incidents": incidents, "frozen": frozen, "database_bytes": size}


@pytest.mark.slow
def test_each_daemon_life_stays_within_the_restart_budget(crash_loop):
    lives = crash_loop["lives"]
    assert len(lives) >= 2, "the budget was never spent: the loop tested nothing"
    for index, life in enumerate(lives):
        assert len(life["starts"]) <= MAX_RESTARTS + 1, f"life {index}: {len(life['starts'])} starts"
    for index, life in enumerate(lives[:-1]):  # the last one was still inside its budget at the end
        assert life["code"] == 75, f"life {index} exited {life['code']}"
        assert len(life["starts"]) == MAX_RESTARTS + 1
        assert life["daemon"].has("restart_budget_spent")
    assert len(crash_loop["starts"]) == sum(len(life["starts"]) for life in lives), "a start outside any life"


@pytest.mark.slow
def test_the_incident_escalates_and_stays_frozen_across_daemon_restarts(crash_loop):
    incidents = crash_loop["incidents"]
    # One incident ran the ladder and escalated; each later daemon life's crash loop of the frozen
    # signature is one incident, never remediated, escalated when that life's budget ran out.
    laddered = [i for i in incidents if i["remediation_id"] is not None]
    assert [i["status"] for i in laddered] == ["escalated"], [(i["id"], i["status"]) for i in incidents]
    assert crash_loop["lives"][0]["daemon"].has("incident_escalated")
    assert len(crash_loop["frozen"]) == 1
    for life in crash_loop["lives"][1:]:
        assert not life["daemon"].has("remediation_applied"), "a restarted daemon unfroze the signature"
    later = [i for i in incidents if i["id"] > laddered[0]["id"]]
    assert all(i["remediation_id"] is None and i["status"] in ("open", "escalated") for i in later)
    assert len(later) <= len(crash_loop["lives"]), "a crash loop of one signature split into several incidents"


@pytest.mark.slow
def test_memory_and_database_stay_bounded(crash_loop):
    for index, life in enumerate(crash_loop["lives"]):
        assert max(life["rss"]) < 100 * 2**20, f"life {index}: RSS {max(life['rss']) / 2**20:.0f} MiB"
    assert len(crash_loop["incidents"]) <= len(crash_loop["starts"]), "more incidents than service runs"
    assert crash_loop["database_bytes"] < 2 * 2**20
