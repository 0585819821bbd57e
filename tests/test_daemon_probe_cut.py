"""A health probe in flight does not blind the loop to a service that is dying under it.

Device run s15b (real SGLang 0.5.16 on an H200): after an incident was resolved the loop verified
the running service again, and that verification's /generate went out as the detokenizer was
killed -9. The launcher said so at once and lingered (0.5.16 waits for CUDA coredumps), the
request waited out `probe.generate_timeout_s` (60 s), and only then was the crash line read:
the incident was detected 60 s late. Here the real daemon supervises a launcher that behaves the
same way (tests/programs/lingering_launcher.py): real processes, real HTTP, real /proc."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from ddtreed.config import load
from ddtreed.demo import free_port, to_toml
from ddtreed.incidents import Store, database_path
from ddtreed.loop.daemon import Daemon
from ddtreed.records import Healthy, Outcome
from supervision_helpers import PROGRAMS, wait_for

pytestmark = pytest.mark.slow

GENERATE_TIMEOUT_S = 60.0  # what s15b had: the fixed loop must not come anywhere near it


def config_for(directory: Path):
    (directory / "run").mkdir(parents=True)
    argv = [sys.executable, str(PROGRAMS / "lingering_launcher.py"), str(directory / "run"),
            "--port", str(free_port()), "--hang-start", "2"]
    tables = {
        "service": {"argv": argv, "cwd": str(directory)},
        "paths": {"log_dir": str(directory / "logs"), "state_dir": str(directory / "state")},
        "policy": {"mode": "auto", "max_restarts": 5, "restart_window_s": 300.0, "backoff_initial_s": 0.05,
                   "backoff_max_s": 0.2, "stop_grace_s": 2.0},
        # the window lets the second start's session be listed twice (its members known) before
        # the loop's own verification of the running service sends the /generate that hangs
        "probe": {"startup_timeout_s": 30.0, "health_timeout_s": 5.0, "generate_timeout_s": GENERATE_TIMEOUT_S,
                  "verify_window_s": 2.0, "poll_interval_s": 0.05},
        "preflight": {"enabled": False},
        "canary": {"enabled": False},
    }
    (directory / "ddtreed.toml").write_text(to_toml(tables))
    return load(str(directory / "ddtreed.toml"))


def pids_of(directory: Path, start: int) -> dict:
    path = directory / "run" / f"start-{start}.json"
    wait_for(path.exists, what=f"start {start}'s pids")
    return json.loads(path.read_text())


def test_a_member_killed_under_the_verification_generate_is_detected_at_once(tmp_path):
    config = config_for(tmp_path)
    daemon = Daemon(config)
    outcomes: list[Outcome] = []
    killed: dict[str, float] = {}
    errors: list[BaseException] = []

    def drive() -> None:
        try:
            time.sleep(2.0)  # start 1 serving, its members listed: kill its scheduler (incident 1)
            os.kill(pids_of(tmp_path, 1)["scheduler_0"], signal.SIGKILL)
            events = tmp_path / "run" / "events"
            # incident 1 resolved by a relaunch (start 2); the loop verifies start 2 again: its
            # /generate hangs; the detokenizer is killed while that request is in flight
            wait_for(lambda: events.exists() and "hanging" in events.read_text(), timeout=60.0,
                     what="the loop's verification /generate in flight")
            detokenizer = pids_of(tmp_path, 2)["detokenizer"]
            killed["at"] = time.time()
            os.kill(detokenizer, signal.SIGKILL)
        except BaseException as error:  # noqa: BLE001 - reported by the test, not lost in a thread
            errors.append(error)

    def on_event(event) -> None:
        if isinstance(event, Outcome):
            outcomes.append(event)
            if len(outcomes) == 2:
                daemon.request_stop()
        if isinstance(event, Healthy) and not killed and not started:
            started.append(threading.Thread(target=drive, daemon=True))
            started[0].start()

    started: list[threading.Thread] = []
    daemon.subscribe(on_event)
    timer = threading.Timer(150.0, daemon.request_stop)
    timer.start()
    try:
        code = daemon.run()
    finally:
        timer.cancel()
    assert not errors, errors
    assert code == 0 and [o.status for o in outcomes] == ["resolved", "resolved"]
    with Store(database_path(config.paths.state_dir)) as store:
        first, second = (store.get(row["id"]) for row in reversed(store.list_incidents(limit=10)))
    assert "Subprocess scheduler_0" in first["message"] and first["outcome"] == "restarted; healthy"
    assert "failed" not in [step["step"] for step in first["steps"]]  # its fix held; nothing counted against it
    # the second incident is the detokenizer's death, not the probe's failure...
    assert [crash["kind"] for crash in second["tracebacks"]] == ["child-death"]
    assert "Subprocess detokenizer" in second["message"] and "crashed with exit code -9" in second["message"]
    assert second["rule_id"] == "worker-died-without-traceback" and second["outcome"] == "restarted; healthy"
    # ...read while the /generate was still in flight: detected long before that request's timeout
    detected = next(step["at"] for step in second["steps"] if step["step"] == "detected")
    assert detected - killed["at"] < 15.0, f"detected {detected - killed['at']:.1f} s after the kill"
