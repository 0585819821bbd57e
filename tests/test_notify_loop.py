"""The daemon loop tells a person: escalation and give-up reach a real local webhook receiver,
and each delivery is stored as a step of its incident. The loop runs on the middle tier's fake
host and clock (ddtreed.testing); the webhook and its HTTP are real."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ddtreed.config import from_mapping
from ddtreed.loop.daemon import EXIT_GAVE_UP, Daemon
from ddtreed.health.probes import Prober
from ddtreed.ops.notify import Notifier
from ddtreed.testing import FakeClock, FakeHost, crashing
from ddtreed.loop.wiring import build

ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/target",
        "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/models/draft",
        "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "32",
        "--tp-size", "2", "--port", "30000"]


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.received.append(body)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads, server.received, server.lock = True, [], threading.Lock()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def config(tmp_path, notify: dict):
    return from_mapping({
        "service": {"argv": ARGV},
        "paths": {"log_dir": str(tmp_path / "logs"), "state_dir": str(tmp_path / "state")},
        "policy": {"mode": "auto", "max_restarts": 4, "restart_window_s": 600.0, "backoff_initial_s": 1.0,
                   "backoff_max_s": 8.0, "stop_grace_s": 5.0},
        "probe": {"startup_timeout_s": 600.0, "verify_window_s": 60.0, "poll_interval_s": 0.5},
        "preflight": {"enabled": False}, "canary": {"enabled": False},
        "notify": notify,
    }, source=str(tmp_path / "ddtreed.toml"))


def test_escalation_and_give_up_reach_the_webhook_and_are_recorded(tmp_path, receiver):
    url = f"http://127.0.0.1:{receiver.server_address[1]}/ddtreed"
    settings = config(tmp_path, {"webhook": url, "retries": 0})
    clock = FakeClock()
    host = FakeHost(lambda argv, env, start: crashing(), clock)
    daemon = Daemon(settings, wiring=build(settings, host=host, clock=clock, prober=host.prober),
                    notifier=Notifier(None))
    assert daemon.run() == EXIT_GAVE_UP  # nothing holds: escalated, then the budget is spent

    events = [body["event"] for body in receiver.received]
    assert events == ["escalated", "gave-up"]
    escalated, gave_up = receiver.received
    incident = daemon.store.get(escalated["incident"]["id"])
    assert escalated["incident"]["status"] == "escalated" and escalated["incident"]["reason"]
    assert escalated["incident"]["category"] == "cuda-graph-shape-mismatch" and escalated["diagnosis"]["rule_id"]
    assert any("The size of tensor a (8) must match the size of tensor b (33)" in line
               for line in escalated["last_error_lines"])
    assert "restart budget" in gave_up["incident"]["reason"]
    notified = [step for step in incident["steps"] if step["step"] == "notified"]
    assert len(notified) == 1 and notified[0]["data"]["event"] == "escalated"
    assert notified[0]["data"]["status"] == 204 and "/ddtreed" in notified[0]["data"]["target"]
    last = daemon.store.get(gave_up["incident"]["id"])
    assert [s["data"]["event"] for s in last["steps"] if s["step"] == "notified"] == ["gave-up"]


def test_without_hooks_nothing_is_sent_and_nothing_recorded(tmp_path):
    settings = config(tmp_path, {})
    clock = FakeClock()
    host = FakeHost(lambda argv, env, start: crashing(), clock)
    daemon = Daemon(settings, wiring=build(settings, host=host, clock=clock, prober=host.prober),
                    notifier=Notifier(None))
    assert daemon.run() == EXIT_GAVE_UP
    incidents = daemon.store.list_incidents()
    assert incidents and all(step["step"] not in ("notified", "notify-failed")
                             for row in incidents for step in daemon.store.get(row["id"])["steps"])


def test_a_stop_request_reaches_the_probes_in_flight(tmp_path):
    """The daemon's real prober asks `stop_asked` between reads: SIGTERM ends a hung probe at once."""
    settings = config(tmp_path, {})
    clock = FakeClock()
    host = FakeHost(lambda argv, env, start: crashing(), clock)
    daemon = Daemon(settings, wiring=build(settings, host=host, clock=clock, prober=Prober),
                    notifier=Notifier(None))
    prober = daemon.prober()
    assert isinstance(prober, Prober) and prober.interrupted() == ""  # no reason to give up
    daemon.request_stop()
    assert prober.interrupted() == "ddtreed is stopping"  # the reason, which the probe's error names


def test_a_recurrence_after_a_verified_fix_is_its_own_notification(tmp_path, receiver):
    """Fixed by --disable-cuda-graph and verified; much later the same crash comes back."""
    from ddtreed.testing import READY_LINE, Launch, founding_traceback

    def behaviour(argv, env, start):
        if "--disable-cuda-graph" not in argv:
            return crashing()
        return Launch(lines=(READY_LINE,), crash_after_s=600.0,
                      crash_lines=founding_traceback("TP0") + founding_traceback("TP1"))

    url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    settings = config(tmp_path, {"webhook": url, "retries": 0, "events": ["recurrence", "escalated"]})
    clock = FakeClock()
    host = FakeHost(behaviour, clock)
    daemon = Daemon(settings, wiring=build(settings, host=host, clock=clock, prober=host.prober),
                    notifier=Notifier(None))
    outcomes = []

    def on_event(event):
        outcomes.append(event)
        if len([e for e in outcomes if type(e).__name__ == "Outcome"]) == 2:
            daemon.request_stop()

    daemon.subscribe(on_event)
    daemon.run()
    events = [body["event"] for body in receiver.received]
    assert events == ["recurrence"], events  # one notification, not also "escalated"
    [body] = receiver.received
    assert "came back after its fix was verified" in body["incident"]["reason"]
