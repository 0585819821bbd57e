"""The serving watch against real HTTP servers and real processes: consecutive failed probes,
the silent eager fallback, and the evidence captured before a hung service is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ddtreed.health.probes import Prober
from ddtreed.service.host import http_base_url
from ddtreed.records import LogChunk
from ddtreed.health.serving import (ServingSettings, ServingWatch, faulthandler_dump, hang_evidence,
                             port_owner_in_tree)



class _Health(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.server.hung.is_set():
            time.sleep(2.0)  # longer than the probe's timeout: a hung server
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    httpd.daemon_threads = True
    httpd.hung = threading.Event()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.hung.clear()
    httpd.shutdown()
    httpd.server_close()


def one_probe(watch) -> list:
    """Tick until one probe was started and its answer taken (probes run in a thread)."""
    events = watch.tick()
    deadline = time.monotonic() + 30
    while not watch.probe_in_flight and time.monotonic() < deadline and watch._probe is None:
        time.sleep(0.005)
        events += watch.tick()
    while watch.probe_in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    return events + watch.tick()


def test_a_probe_in_flight_does_not_block_the_loop(server):
    prober = Prober(http_base_url("127.0.0.1", server.server_address[1]))
    watch = ServingWatch(ServingSettings(interval_s=0.0001, timeout_s=1.5, failures=2), prober,
                         captured_graphs=True)
    server.hung.set()
    time.sleep(0.01)
    started = time.monotonic()
    assert watch.tick() == [] and watch.probe_in_flight  # started, and returned at once
    assert time.monotonic() - started < 1.0 or watch.probe_in_flight
    assert feed(watch, *[decode(False)] * 5)  # log lines are read while the probe waits


def test_a_hung_server_is_an_event_after_the_threshold_of_consecutive_failures(server):
    prober = Prober(http_base_url("127.0.0.1", server.server_address[1]))
    watch = ServingWatch(ServingSettings(interval_s=0.05, timeout_s=0.3, failures=3), prober,
                         captured_graphs=True)
    assert one_probe(watch) == []  # healthy first
    server.hung.set()  # then hung
    events = []
    for _ in range(3):
        events += one_probe(watch)
    assert [e.kind for e in events] == ["unhealthy"]
    assert len(events[0].evidence) == 3 and all("/health_generate" in line for line in events[0].evidence)
    assert events[0].crash().message.startswith("serving: unhealthy: 3 health probes failed in a row")


def test_one_failed_probe_between_good_ones_is_no_event(server):
    prober = Prober(http_base_url("127.0.0.1", server.server_address[1]))
    watch = ServingWatch(ServingSettings(interval_s=0.0001, timeout_s=0.3, failures=2), prober,
                         captured_graphs=True)
    server.hung.set()
    assert one_probe(watch) == []  # one failure
    server.hung.clear()
    assert one_probe(watch) == []  # a success resets the count
    server.hung.set()
    assert one_probe(watch) == []


def decode(graph: bool, accept: float = 2.5) -> str:
    return (f"[2026-12-01 08:12:05] Decode batch, #running-req: 1, #token: 222, token usage: 0.00, "
            f"accept len: {accept:.2f}, accept rate: 0.12, cuda graph: {graph}, gen throughput "
            f"(token/s): 13.60, #queue-req: 0")


def feed(watch, *lines):
    return watch.feed(LogChunk("service.stderr.log", 1, lines, time.time()))


def test_eager_decode_without_a_capture_is_configuration_not_a_fallback():
    watch = ServingWatch(ServingSettings(interval_s=0, eager_lines=2), None, captured_graphs=False)
    assert feed(watch, *[decode(False)] * 10) == []


def test_a_true_line_resets_the_eager_count():
    watch = ServingWatch(ServingSettings(interval_s=0, eager_lines=3), None, captured_graphs=True)
    assert feed(watch, decode(False), decode(False), decode(True), decode(False), decode(False)) == []
    assert [e.kind for e in feed(watch, decode(False))] == ["eager-fallback"]
    assert feed(watch, *[decode(False)] * 5) == []  # one event per launch


SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"


def test_hang_evidence_names_the_processes_and_says_what_each_stack_attempt_did(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        evidence = hang_evidence(proc.pid, timeout_s=15)
        assert evidence["processes"][0]["pid"] == proc.pid
        assert isinstance(evidence["gpu"], list)  # [] without NVML
        assert evidence["attempts"]  # py-spy absent or failing is recorded, not raised
        if evidence["stacks"]:
            assert "sleep" in next(iter(evidence["stacks"].values()))
    finally:
        proc.kill()
        proc.wait()


def test_faulthandler_fallback_writes_every_thread_stack_to_the_service_log(tmp_path):
    log = tmp_path / "stderr.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, stderr=err,
                                text=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    proc.stdout.readline()
    assert faulthandler_dump([proc.pid]) == [proc.pid]
    assert proc.wait(60) == -signal.SIGABRT
    text = log.read_text()
    assert "Fatal Python error: Aborted" in text and 'File "<string>", line' in text


def test_port_owner_in_tree_tells_our_listener_from_another_process():
    code = ("import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
            "print(s.getsockname()[1], flush=True)\ntime.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        other.stdout.readline()
        assert port_owner_in_tree(proc.pid, port) in (True, None)
        assert port_owner_in_tree(other.pid, port) in (False, None)  # answering is not owning
    finally:
        for each in (proc, other):
            each.kill()
            each.wait()
