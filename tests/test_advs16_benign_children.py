"""A healthy service whose session's short-lived helpers come and go is never an incident.

The probe cut (ServiceRun.death) cuts a probe in flight when a member of the service's session
is lost. A launcher that keeps a pool of helper processes, each reaped and replaced by design (a
tokenizer worker restarted, a JIT compiler run, an `nvidia-smi` call), loses a "member" every
second or so, without any crash text and while answering every request. Here the real daemon
supervises such a launcher (tests/programs/worker_pool_service.py): real processes, real HTTP,
real /proc; the serving watch probes it every 1.5 s."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from ddtreed.config import load
from ddtreed.demo import free_port, to_toml
from ddtreed.incidents import Store, database_path
from ddtreed.loop.daemon import Daemon
from ddtreed.records import Healthy
from supervision_helpers import PROGRAMS

pytestmark = pytest.mark.slow

WATCHED_S = 15.0  # ten serving probes at least, three cut ones in a row are an incident on main


def config_for(directory: Path, generate_s: float = 0.0, canary: bool = False):
    argv = [sys.executable, str(PROGRAMS / "worker_pool_service.py"), "--port", str(free_port()),
            "--workers", "4", "--worker-life-s", "4", "--generate-s", str(generate_s)]
    tables = {
        "service": {"argv": argv, "cwd": str(directory)},
        "paths": {"log_dir": str(directory / "logs"), "state_dir": str(directory / "state")},
        "policy": {"mode": "auto", "max_restarts": 5, "restart_window_s": 300.0, "backoff_initial_s": 0.05,
                   "backoff_max_s": 0.2, "stop_grace_s": 2.0},
        "probe": {"startup_timeout_s": 30.0, "health_timeout_s": 5.0, "generate_timeout_s": 10.0,
                  "verify_window_s": 1.0, "poll_interval_s": 0.05, "serving_interval_s": 1.5,
                  "serving_timeout_s": 2.0, "serving_failures": 3},
        "preflight": {"enabled": False},
        "canary": {"enabled": canary, "max_new_tokens": 7, "golden_samples": 1},
    }
    (directory / "ddtreed.toml").write_text(to_toml(tables))
    return load(str(directory / "ddtreed.toml"))



def run_watched(daemon: Daemon, watched_s: float, guard_s: float) -> tuple[int, bool]:
    """Run the daemon until `watched_s` after its first Healthy event (or `guard_s` at most), then
    stop it: (its exit code, whether the service ever became healthy)."""
    timers: list[threading.Timer] = []

    def on_event(event) -> None:
        if isinstance(event, Healthy) and not timers:  # serving: watch it for a while, then stop
            timers.append(threading.Timer(watched_s, daemon.request_stop))
            timers[0].start()

    daemon.subscribe(on_event)
    guard = threading.Timer(guard_s, daemon.request_stop)
    guard.start()
    try:
        code = daemon.run()
    finally:
        guard.cancel()
        for timer in timers:
            timer.cancel()
    return code, bool(timers)


def test_helpers_that_come_and_go_do_not_make_a_healthy_service_an_incident(tmp_path):
    config = config_for(tmp_path)
    daemon = Daemon(config)
    code, healthy = run_watched(daemon, WATCHED_S, guard_s=90.0)
    assert healthy, "the service never became healthy"
    with Store(database_path(config.paths.state_dir)) as store:
        incidents = store.list_incidents(limit=10)
    assert code == 0
    assert [(row["id"], row["status"], row.get("message")) for row in incidents] == []


def test_helpers_that_come_and_go_do_not_fail_the_canary_of_a_healthy_start(tmp_path):
    """The output canary after the start (four prompts, 1.5 s each) runs while helpers end: a
    lost helper cuts one of its requests. The start is healthy: no incident, no restart."""
    config = config_for(tmp_path, generate_s=1.5, canary=True)
    daemon = Daemon(config)
    code, healthy = run_watched(daemon, 12.0, guard_s=60.0)
    with Store(database_path(config.paths.state_dir)) as store:
        incidents = [(row["id"], row["status"], store.get(row["id"])["message"])
                     for row in store.list_incidents(limit=10)]
        runs = store.canary_runs(limit=10)
    assert incidents == [] and code == 0, (incidents, code)
    assert healthy, "the service never became healthy"
    assert runs and runs[0]["passed"], [(run["passed"], run["detail"]) for run in runs]  # the last one passed
