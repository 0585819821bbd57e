"""The daemon while serving, against the demo service (shaped like real SGLang 0.5.16): serving
health probes find a dead scheduler and a hung one, a relaunch that heals resolves its incident,
one crash is one crash, and a launch whose port another server holds is never taken for ready."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import psutil
import pytest

from ddtreed.cli.run_cmd import stop_on
from ddtreed.loop.daemon import Daemon
from ddtreed.incidents import Store, database_path
from ddtreed.records import Healthy, Outcome

from daemon_helpers import Run, demo_config, steps_of

pytestmark = pytest.mark.slow

SERVING = {"serving_interval_s": 0.3, "serving_timeout_s": 1.5, "serving_failures": 2,
           "verify_window_s": 1.0}


def scheduler_of(daemon: Daemon) -> psutil.Process:
    return next(child for child in psutil.Process(daemon.service.pid).children()
                if child.name().startswith("sglang::sched"))


def run_with(config, on_first_healthy, timeout: float = 150.0):
    daemon = Daemon(config)
    run = Run(daemon)
    healthy = []

    def first(event):
        if isinstance(event, Healthy) and not healthy:
            healthy.append(event)
            threading.Thread(target=on_first_healthy, args=(daemon,), daemon=True).start()

    daemon.subscribe(first)
    stop_on(daemon, Outcome)
    timer = threading.Timer(timeout, daemon.request_stop)
    timer.start()
    try:
        code = daemon.run()
    finally:
        timer.cancel()
    return run, code


def incidents(config) -> list[dict]:
    with Store(database_path(config.paths.state_dir)) as store:
        return [store.get(row["id"]) for row in store.list_incidents(limit=10)]


def test_a_killed_scheduler_is_one_crash_and_a_healthy_relaunch_resolves_it(tmp_path):
    config = demo_config(tmp_path / "demo", algorithm="DFLASH", probe=SERVING)

    def kill_scheduler(daemon):
        time.sleep(0.5)
        scheduler_of(daemon).kill()  # the launcher logs the death at once, as real 0.5.16 does

    run, code = run_with(config, kill_scheduler)
    assert code == 0 and [o.status for o in run.outcomes] == ["resolved"]
    (incident,) = incidents(config)
    assert incident["status"] == "resolved" and incident["outcome"] == "restarted; healthy"
    assert incident["service"] == f"localhost:{config.service.port}"
    crashes = json.loads(incident["tracebacks"]) if isinstance(incident["tracebacks"], str) else incident["tracebacks"]
    assert len(crashes) == 1 and "crashed with exit code -9" in str(crashes[0])  # no SIGQUIT echo
    with Store(database_path(config.paths.state_dir)) as store:
        steps = steps_of(store, incident["id"])
    assert steps[:2] == ["detected", "diagnosed"] and "restarted" in steps and "healthy" in steps


def test_a_hung_scheduler_is_an_incident_within_seconds_with_its_evidence(tmp_path):
    config = demo_config(tmp_path / "demo", algorithm="DFLASH", probe=SERVING)

    def hang(daemon):
        time.sleep(0.5)
        scheduler_of(daemon).suspend()  # alive, holding everything, answering nothing

    run, code = run_with(config, hang)
    assert code == 0 and [o.status for o in run.outcomes] == ["resolved"]
    (incident,) = incidents(config)
    assert incident["category"] == "scheduler-watchdog-timeout"
    assert incident["rule_id"] == "serving-unresponsive" and incident["outcome"] == "restarted; healthy"
    (step,) = [s for s in incident["steps"] if s["step"] == "evidence"]
    assert step["detail"].startswith("stacks of ")
    data = step["data"] if isinstance(step["data"], dict) else json.loads(step["data"])
    assert any(p["name"].startswith("sglang::sched") for p in data["processes"])
    assert data["schedulers"] and data["attempts"]  # py-spy tried (or absent), and said so
    assert [s["step"] for s in incident["steps"]].index("evidence") < \
        [s["step"] for s in incident["steps"]].index("diagnosed")  # captured before the stop


def test_a_taken_port_is_port_in_use_and_never_a_false_ready(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys\nfrom http.server import HTTPServer, BaseHTTPRequestHandler\n"
        "class H(BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.send_header('Content-Length', '0'); self.end_headers()\n"
        "    do_POST = do_GET\n"
        "    def log_message(self, *a): pass\n"
        "s = HTTPServer(('127.0.0.1', 0), H); print(s.server_address[1], flush=True); s.serve_forever()\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        port = int(holder.stdout.readline())
        config = demo_config(tmp_path / "demo", algorithm="DFLASH", port=port, probe=SERVING,
                             policy={"max_restarts": 1})
        daemon = Daemon(config)
        states = []
        daemon.subscribe(lambda event: states.append(type(event).__name__))
        stop_on(daemon, Outcome)
        timer = threading.Timer(120, daemon.request_stop)
        timer.start()
        try:
            daemon.run()
        finally:
            timer.cancel()
    finally:
        holder.kill()
        holder.wait()
    assert "Healthy" not in states  # the other server's 200s were never taken for this launch
    (incident,) = incidents(config)
    assert incident["category"] == "port-in-use", incident["diagnosis"]
