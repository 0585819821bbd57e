"""Startup milestones from SGLang logs, and the HTTP prober against small real HTTP servers."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ddtreed.health.probes import MilestoneTracker, Prober
from ddtreed.service.host import http_base_url
from ddtreed.records import LogChunk

from supervision_helpers import free_port

CORPUS_LOG = Path(__file__).parent / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log"


def chunk(*lines: str) -> LogChunk:
    return LogChunk(source="service.stderr.log", first_number=1, lines=lines, received_at=5.0)


def test_founding_log_milestones_in_order():
    tracker = MilestoneTracker()
    found = tracker.feed(chunk(*CORPUS_LOG.read_text().splitlines()))
    assert [m.name for m in found] == ["weights-loading", "weights-loaded", "kv-cache",
                                       "graph-capture", "graphs-captured", "max-total-tokens",
                                       "ready"]
    assert found[1].text.startswith("Load weight end. type=DeepseekV3ForCausalLM")
    assert tracker.ready and tracker.progress_text() == "ready"


def test_progress_text_follows_the_latest_milestone_once_per_rank_set():
    tracker = MilestoneTracker()
    assert tracker.progress_text() == "starting" and not tracker.ready
    assert [m.name for m in tracker.feed(chunk("[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=9 GB",
                                                "[2026-01-01 00:00:00 TP1] Load weight begin. avail mem=9 GB"))] \
        == ["weights-loading"]  # every rank prints it; it is one milestone
    assert tracker.progress_text() == "loading weights"
    tracker.feed(chunk("[2026-01-01 00:01:00 TP0] Capture target verify CUDA graph begin. num_tokens_per_req=33"))
    assert tracker.progress_text() == "capturing CUDA graphs (target verify)"
    found = tracker.feed(chunk("[2026-01-01 00:01:01 TP0] Capture draft verify CUDA graph begin."))
    assert [m.name for m in found] == ["graph-capture"]  # the draft graph is a capture of its own
    assert tracker.progress_text() == "capturing CUDA graphs (draft verify)"
    assert not tracker.ready


def test_lines_without_milestones_cost_nothing_and_yield_nothing():
    tracker = MilestoneTracker()
    noise = tuple(f"[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 1, accept len: 3.{i}"
                  for i in range(10_000))
    started = time.perf_counter()
    assert tracker.feed(chunk(*noise)) == []
    assert time.perf_counter() - started < 0.5


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict]] = {}
    delay_s = 0.0

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def _answer(self):
        time.sleep(self.server.delay_s)
        status, body = self.server.routes.get(self.path, (404, {"detail": "Not Found"}))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    servers = []

    def start(routes: dict, delay_s: float = 0.0) -> Prober:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.routes, server.delay_s, server.daemon_threads = routes, delay_s, True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return Prober(http_base_url("0.0.0.0", server.server_address[1]))

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_health_falls_back_to_health_on_old_servers(fake_server):
    prober = fake_server({"/health": (200, {})})
    result = prober.health(prober.deadline_in(5))
    assert result.ok and result.stage == "health" and result.detail == "/health: HTTP 200"


def test_health_reports_503_while_starting(fake_server):
    prober = fake_server({"/health_generate": (503, {})})
    result = prober.health(prober.deadline_in(5))
    assert not result.ok and result.detail == "/health_generate: HTTP 503"


def test_generate_reads_accept_length_and_tokens(fake_server):
    prober = fake_server({"/generate": (200, {"text": " Paris.", "meta_info": {
        "completion_tokens": 2, "spec_accept_length": 3.25}})})
    result = prober.generate("The capital of France is", 2, prober.deadline_in(5))
    assert result.ok and result.accept_length == 3.25 and result.completion_tokens == 2
    assert result.output_text == " Paris." and "accept length 3.25" in result.detail


def test_generate_without_tokens_fails(fake_server):
    prober = fake_server({"/generate": (200, {"text": "", "meta_info": {"completion_tokens": 0}})})
    assert not prober.generate("x", 4, prober.deadline_in(5)).ok


def test_server_info_falls_back_to_get_server_info(fake_server):
    prober = fake_server({"/get_server_info": (200, {"version": "0.4.6"})})
    assert prober.server_info(prober.deadline_in(5)) == {"version": "0.4.6"}


def test_deadline_is_one_budget_for_both_requests(fake_server):
    # /health_generate is slow and then 404s, /health would answer: the budget covers both.
    prober = fake_server({"/health": (200, {})}, delay_s=0.4)
    started = time.monotonic()
    result = prober.health(prober.deadline_in(0.6))
    assert time.monotonic() - started < 1.0
    assert not result.ok and "/health" in result.detail


def test_refused_connection_and_spent_deadline_fail_fast():
    prober = Prober(http_base_url("127.0.0.1", free_port()))
    refused = prober.generate("x", 4, prober.deadline_in(5))
    assert not refused.ok and "Connection refused" in refused.detail
    spent = prober.health(prober.deadline_in(-1))
    assert not spent.ok and "deadline passed" in spent.detail


def test_http_base_url_shapes():
    assert http_base_url("0.0.0.0", 30000) == "http://127.0.0.1:30000"
    assert http_base_url("::", 1) == "http://[::1]:1"
    assert http_base_url("10.0.0.5", 2) == "http://10.0.0.5:2"
