"""Hooks that tell a person: a real local webhook receiver and real executables.

The loop thread only queues (`send` never waits for a receiver); deliveries retry with a timeout
on the worker thread, and every delivery ends in a record the daemon stores in the incident.
"""

from __future__ import annotations

import json
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from ddtreed.config import ConfigError, from_mapping
from ddtreed.ops.notify import EVENTS, Hooks, notification

INCIDENT = {"id": 12, "category": "cuda-graph-shape-mismatch", "status": "escalated",
            "rule_id": "ddtree-verify-graph-width", "signature": "abc123"}
LINES = ["Traceback (most recent call last):", '  File "cuda_graph_runner.py", line 1, in replay_prepare',
         "RuntimeError: The size of tensor a (8) must match the size of tensor b (33)"]


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        with server.lock:
            server.received.append((self.headers["Content-Type"], json.loads(body)))
            code = server.codes.pop(0) if server.codes else 200
        server.gate.wait(60)
        self.send_response(code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    server.received, server.codes, server.lock, server.gate = [], [], threading.Lock(), threading.Event()
    server.gate.set()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/hook?token=secret"
    yield server
    server.gate.set()
    server.shutdown()
    server.server_close()


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def document(event: str = "escalated") -> dict:
    return notification(event, INCIDENT, {"title": "DDTree verify graph width", "rule": "r"}, LINES,
                        host="gpu-a")


def test_the_webhook_gets_the_incident_diagnosis_lines_and_host(receiver):
    hooks = Hooks(webhook=receiver.url, timeout_s=10, retries=0)
    try:
        assert hooks.send(document())
        assert hooks.wait_idle(60)
        [record] = hooks.completed()
    finally:
        hooks.close()
    content_type, body = receiver.received[0]
    assert content_type == "application/json"
    assert body["event"] == "escalated" and body["host"] == "gpu-a"
    assert body["incident"]["id"] == 12 and body["diagnosis"]["title"] == "DDTree verify graph width"
    assert body["last_error_lines"][-1].startswith("RuntimeError: The size of tensor a (8)")
    assert (record.ok, record.hook, record.attempts, record.status, record.incident_id) == (True, "webhook", 1, 200, 12)
    assert "secret" not in record.target  # tokens in the URL stay out of records and logs


def test_a_failing_webhook_is_retried_then_recorded(receiver):
    receiver.codes = [500, 503]
    hooks = Hooks(webhook=receiver.url, timeout_s=10, retries=2, retry_delay_s=0.01)
    try:
        hooks.send(document("gave-up"))
        assert hooks.wait_idle(60)
        [record] = hooks.completed()
    finally:
        hooks.close()
    assert (record.ok, record.attempts, record.status, record.error) == (True, 3, 200, None)
    assert len(receiver.received) == 3


def test_a_dead_webhook_gives_up_with_the_reason():
    hooks = Hooks(webhook="http://127.0.0.1:9/hook", timeout_s=5, retries=1, retry_delay_s=0.01)
    try:
        hooks.send(document())
        assert hooks.wait_idle(60)
        [record] = hooks.completed()
    finally:
        hooks.close()
    assert (record.ok, record.attempts) == (False, 2) and "ConnectionRefusedError" in record.error


def test_send_never_waits_for_the_receiver(receiver):
    """The loop thread queues and goes on; the receiver is held until the test lets it answer."""
    receiver.gate.clear()
    hooks = Hooks(webhook=receiver.url, timeout_s=60, retries=0)
    try:
        assert hooks.send(document())
        assert hooks.completed() == []  # returned while the receiver still holds the request
        assert not hooks.wait_idle(0.2)
        receiver.gate.set()
        assert hooks.wait_idle(60)
        assert [r.ok for r in hooks.completed()] == [True]
    finally:
        receiver.gate.set()
        hooks.close()


def test_an_executable_receives_the_json_on_stdin(tmp_path):
    out = tmp_path / "got.json"
    hook = script(tmp_path / "hook.sh", f'cat > "{out}"\necho "paged on-call"\n')
    hooks = Hooks(command=(str(hook),), timeout_s=30, retries=0)
    try:
        hooks.send(document("silent-corruption"))
        assert hooks.wait_idle(60)
        [record] = hooks.completed()
    finally:
        hooks.close()
    body = json.loads(out.read_text())
    assert body["event"] == "silent-corruption" and body["incident"]["category"] == "cuda-graph-shape-mismatch"
    assert (record.ok, record.hook, record.status, record.output) == (True, "command", 0, "paged on-call\n")


def test_a_hung_executable_is_killed_with_its_children_at_the_timeout(tmp_path):
    pid_file = tmp_path / "child.pid"
    hook = script(tmp_path / "hang.sh", f'sleep 600 &\necho $! > "{pid_file}"\nwait\n')
    hooks = Hooks(command=(str(hook),), timeout_s=1, retries=1, retry_delay_s=0.01)
    try:
        hooks.send(document())
        assert hooks.wait_idle(120)
        [record] = hooks.completed()
    finally:
        hooks.close()
    assert (record.ok, record.attempts) == (False, 2) and "timed out" in record.error
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # the kill is sent; init reaps the orphan when it gets to it
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)  # the background sleep went with its process group


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_failing_executable_and_a_missing_one_are_recorded(tmp_path):
    failing = script(tmp_path / "fail.sh", 'echo "no route to pager" >&2\nexit 3\n')
    outputs = []
    for command, expected in (((str(failing),), "exit status 3"),
                              ((str(tmp_path / "missing"),), "cannot run")):
        hooks = Hooks(command=command, timeout_s=10, retries=0)
        try:
            hooks.send(document())
            assert hooks.wait_idle(60)
            [record] = hooks.completed()
        finally:
            hooks.close()
        assert not record.ok and expected in record.error
        outputs.append(record.output)
    assert outputs == ["no route to pager\n", ""]


def test_both_hooks_run_and_only_chosen_events_are_sent(receiver, tmp_path):
    out = tmp_path / "got.json"
    hook = script(tmp_path / "hook.sh", f'cat > "{out}"\n')
    hooks = Hooks(webhook=receiver.url, command=(str(hook),), events=("escalated",), retries=0)
    try:
        assert not hooks.send(document("recurrence"))  # not chosen: nothing queued
        assert hooks.send(document("escalated"))
        assert hooks.wait_idle(60)
        records = hooks.completed()
    finally:
        hooks.close()
    assert sorted(r.hook for r in records) == ["command", "webhook"] and all(r.ok for r in records)
    assert len(receiver.received) == 1 and json.loads(out.read_text())["event"] == "escalated"


def test_no_hooks_configured_sends_nothing():
    hooks = Hooks()
    assert not hooks.send(document()) and hooks.completed() == []
    hooks.close()


def test_the_events_are_the_four_a_person_must_act_on():
    assert EVENTS == ("escalated", "gave-up", "silent-corruption", "recurrence")
    with pytest.raises(ValueError, match="event must be one of"):
        notification("crashed", INCIDENT)


@pytest.mark.parametrize("section, message", [
    ({"webhook": "ftp://x"}, "notify.webhook must be an http:// or https:// URL"),
    ({"timeout_s": 0}, "notify.timeout_s must be > 0"),
    ({"retries": -1}, "notify.retries must be >= 0"),
    ({"events": ["crash"]}, "notify.events: unknown event 'crash'"),
    ({"command": "hook.sh"}, "notify.command must be a list of strings"),
])
def test_bad_notify_config_is_one_line(section, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        from_mapping({"service": {"argv": ["x"]}, "notify": section}, source="ddtreed.toml")


def test_notify_config_loads():
    config = from_mapping({"service": {"argv": ["x"]}, "notify": {
        "webhook": "https://hooks.example/abc", "command": ["/usr/local/bin/page"], "retries": 4}})
    hooks = Hooks.from_config(config.notify)
    assert (hooks.webhook, hooks.command, hooks.retries, hooks.events) == (
        "https://hooks.example/abc", ("/usr/local/bin/page",), 4, EVENTS)


def test_an_incident_from_the_store_becomes_a_notification_and_its_delivery_a_step(receiver, tmp_path):
    """What the daemon does: Store.get → document → hooks → completed() → add_step on the loop."""
    from ddtreed.incidents import Store
    from ddtreed.ops.notify import delivery_step, incident_notification
    from ddtreed.records import Crash, RuleMatch

    store = Store(tmp_path / "incidents.sqlite3")
    try:
        crash = Crash(kind="traceback", exception="RuntimeError", message=LINES[-1].split(": ", 1)[1],
                      excerpt=tuple(LINES), detected_at=1.0)
        match = RuleMatch(rule_id="ddtree-verify-graph-width", category="cuda-graph-shape-mismatch",
                          title="t", diagnosis="captured 8 wide, budget 32", remediations=("ddtree-verify-graph-width",))
        incident_id = store.open_incident("crash", crashes=[crash], match=match)
        store.finish(incident_id, "escalated", "frozen")
        hooks = Hooks(webhook=receiver.url, retries=0)
        try:
            hooks.send(incident_notification("escalated", store.get(incident_id), host="gpu-a"))
            assert hooks.wait_idle(60)
            for record in hooks.completed():
                store.add_step(record.incident_id, *delivery_step(record))
        finally:
            hooks.close()
        body = receiver.received[0][1]
        assert body["incident"]["id"] == incident_id and body["incident"]["status"] == "escalated"
        assert body["diagnosis"]["diagnosis"] == "captured 8 wide, budget 32"
        assert body["last_error_lines"] == LINES
        [step] = [s for s in store.get(incident_id)["steps"] if s["step"] == "notified"]
        assert "escalated notification via webhook" in step["detail"] and step["data"]["ok"] is True
    finally:
        store.close()
