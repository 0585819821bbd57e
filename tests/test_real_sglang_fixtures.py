"""Real SGLang 0.5.16 output (tests/fixtures/sglang-0.5.16, recorded on an H200) replayed through
ddtreed's real pipeline: the log follower, the traceback assembler, the milestone tracker, the
decode-line parser and serving watch, and the HTTP prober against the recorded answers."""

from __future__ import annotations

import gzip
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ddtreed.health.probes import MilestoneTracker, Prober
from ddtreed.service.host import http_base_url
from ddtreed.logs import Follower
from ddtreed.health.serving import ServingSettings, ServingWatch, parse_decode_line
from ddtreed.tracebacks import Assembler

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-0.5.16"


class Replay:
    """One real log followed from a file by the real Follower, fed to every consumer."""

    def __init__(self, name: str, tmp_path: Path, watch: ServingWatch | None = None):
        path = tmp_path / name
        shutil.copy(FIXTURES / name, path)
        self.tracker, self.assembler, self.watch = MilestoneTracker(), Assembler(eager=True), watch
        self.milestones, self.crash_groups, self.events, self.decode = [], [], [], []
        follower = Follower([str(path)])
        try:
            while chunks := follower.read():
                for chunk in chunks:
                    self.milestones += self.tracker.feed(chunk)
                    self.assembler.feed(chunk)
                    if watch is not None:
                        self.events += watch.feed(chunk)
                    self.decode += [s for s in map(parse_decode_line, chunk.lines) if s]
                self.crash_groups += self.assembler.take(chunk.received_at)
        finally:
            follower.close()
        self.crash_groups += self.assembler.take(0.0, final=True)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.milestones]

    @property
    def crashes(self):
        return [crash for group in self.crash_groups for crash in group]


STARTUP = ["weights-loading", "weights-loaded", "kv-cache", "memory-pool"]


def test_plain_server_milestones_include_the_0516_prefill_and_decode_graph_captures(tmp_path):
    replay = Replay("basic.log", tmp_path)
    assert replay.names == STARTUP + ["graph-capture", "graphs-captured", "graph-capture",
                                      "graphs-captured", "max-total-tokens", "ready"]
    assert replay.milestones[4].text.startswith("Capture target prefill CUDA graph begin.")
    assert replay.milestones[6].text.startswith("Capture target decode CUDA graph begin.")
    assert replay.tracker.captured == ["target prefill", "target decode"]
    assert replay.tracker.widths == {"target decode": 1}
    assert replay.tracker.ready and replay.tracker.bind_error is None
    assert replay.crashes == []


def test_ngram_server_captures_the_verify_graph_12_wide_and_is_ready(tmp_path):
    replay = Replay("ngram.log", tmp_path)
    assert replay.names == STARTUP + ["graph-capture", "graphs-captured", "graph-capture",
                                      "graphs-captured", "max-total-tokens", "ready"]
    assert replay.tracker.widths == {"target verify": 12}
    assert "target verify" in replay.tracker.captured and replay.tracker.ready


def test_progress_names_the_graph_being_captured_during_the_80s_capture():
    from ddtreed.records import LogChunk

    tracker = MilestoneTracker()
    lines = (FIXTURES / "basic.log").read_text().splitlines()
    upto = next(i for i, line in enumerate(lines) if "Capture target prefill CUDA graph begin" in line)
    tracker.feed(LogChunk("s", 1, tuple(lines[:upto + 1]), 1.0))
    assert tracker.progress_text() == "capturing CUDA graphs (target prefill)"
    assert not tracker.captured_graphs


def test_dflash_server_milestones_and_decode_lines(tmp_path):
    replay = Replay("dflash.log", tmp_path)
    assert replay.tracker.ready and replay.tracker.captured_graphs
    assert all(s.cuda_graph is True for s in replay.decode)
    accepts = {s.accept_length for s in replay.decode}
    assert accepts and accepts <= {1.0}  # a random draft: every draft token rejected


def test_port_in_use_the_ready_line_after_errno_98_is_not_this_process_ready(tmp_path):
    replay = Replay("portinuse.log", tmp_path)
    assert "ready" not in replay.names and not replay.tracker.ready
    assert replay.tracker.bind_error.startswith("ERROR:    [Errno 98] error while attempting to bind "
                                                "on address ('127.0.0.1', 30000)")
    assert replay.tracker.false_ready == "The server is fired up and ready to roll!"
    assert replay.tracker.progress_text().startswith("HTTP server failed to bind its port")


def test_capture_time_width_assertion_stops_after_verify_capture_begin(tmp_path):
    replay = Replay("width.log", tmp_path)
    assert replay.names[-1] == "graph-capture" and replay.tracker.widths["target verify"] == 12
    assert "target verify" not in replay.tracker.captured and not replay.tracker.ready
    messages = [c.message for c in replay.crashes]
    assert any("shared logits buffer holds 576 rows but caller needs 624" in m for m in messages)


def test_decode_lines_of_ngram_accept_length_graph_and_throughput(tmp_path):
    replay = Replay("ngram.log", tmp_path)
    first = replay.decode[0]
    assert (first.running_req, first.tokens, first.accept_length, first.accept_rate,
            first.cuda_graph, first.gen_throughput, first.queue_req) == (1, 222, 2.35, 0.12, True,
                                                                         19.02, 0)
    assert [s.accept_length for s in replay.decode][:5] == [2.35, 2.88, 4.97, 5.72, 2.65]
    assert all(s.cuda_graph is True for s in replay.decode)


def test_decode_lines_without_speculation_have_no_accept_length(tmp_path):
    replay = Replay("basic.log", tmp_path)
    assert replay.decode and all(s.accept_length is None and s.cuda_graph for s in replay.decode)


def test_prefill_cuda_graph_false_is_not_a_decode_line():
    line = ("[2026-12-01 07:54:40] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 116, "
            "token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: "
            "False, input throughput (token/s): 6.01")
    assert parse_decode_line(line) is None


class _NeverProbed:
    def health(self, deadline):  # pragma: no cover - the watch must not probe at interval 0
        raise AssertionError("probed")


def test_silent_eager_fallback_width2_becomes_one_event_with_its_decode_lines(tmp_path):
    settings = ServingSettings(interval_s=0, eager_lines=5)
    replay = Replay("width2.log", tmp_path, ServingWatch(settings, _NeverProbed(), captured_graphs=True))
    assert replay.tracker.captured_graphs and replay.tracker.ready  # it looked healthy at startup
    assert [e.kind for e in replay.events] == ["eager-fallback"]
    event = replay.events[0]
    assert len(event.evidence) == 5 and all("cuda graph: False" in line for line in event.evidence)
    crash = event.crash()
    assert crash.kind == "serving" and crash.message.startswith("serving: eager-fallback:")
    # the same decode lines from the healthy ngram run: no event
    healthy = Replay("ngram.log", tmp_path, ServingWatch(settings, _NeverProbed(), captured_graphs=True))
    assert healthy.events == []


def test_acceptance_collapse_from_decode_lines_against_the_baseline(tmp_path):
    watch = ServingWatch(ServingSettings(interval_s=0, collapse_lines=3), _NeverProbed(),
                         captured_graphs=True, baseline=3.08)
    replay = Replay("dflash.log", tmp_path, watch)  # accept len 1.00 on every decode line
    assert [e.kind for e in replay.events] == ["acceptance-collapse"]
    assert "below 50% of the baseline 3.08" in replay.events[0].detail


def test_scheduler_killed_is_one_child_death_with_exit_code_minus_9(tmp_path):
    replay = Replay("ck_scheduler.log", tmp_path)
    deaths = [c for c in replay.crashes if c.kind == "child-death"]
    assert len(deaths) == 1 and deaths[0].exit_code == -9
    assert "Subprocess scheduler_0 (pid=15978) crashed with exit code -9" in deaths[0].message


@pytest.mark.parametrize("name, text", [
    ("memfrac_1e-5.log", "Loaded weights leave no GPU memory for the KV cache under "
                         "--mem-fraction-static=1e-05"),
    ("hog_3.log", "CUDA out of memory. Tried to allocate 26.00 MiB"),
    ("bad_dflash_nodraft.log", "DFLASH speculative decoding requires setting "
                               "--speculative-draft-model-path"),
])
def test_crash_texts_reach_the_assembler_whole(tmp_path, name, text):
    replay = Replay(name, tmp_path)
    assert any(text in crash.message for crash in replay.crashes), [c.message for c in replay.crashes]
    assert not replay.tracker.ready


# ---- HTTP: the recorded answers served back by a real HTTP server -------------------------------

def recorded(name: str) -> list[dict]:
    return json.loads(gzip.decompress((FIXTURES / name).read_bytes()))


class _Recorded(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self._answer("GET")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer("POST")

    def _answer(self, method):
        entry = self.server.answers[(method, self.path)]
        body = entry["body"]
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(entry["status"])
        for key, value in entry["headers"].items():
            if key.lower() not in ("content-length", "date", "server"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def recorded_server():
    servers = []

    def serve(entries):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorded)
        server.answers = {(e["method"], e["path"]): e for e in entries}
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return Prober(http_base_url("127.0.0.1", server.server_address[1]))

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_health_generate_answers_200_with_an_empty_body_and_counts_as_healthy(recorded_server):
    entries = recorded("ngram_http.json.gz")
    health = next(e for e in entries if e["path"] == "/health_generate")
    assert health["status"] == 200 and health["body"] == "" and health["headers"]["content-length"] == "0"
    prober = recorded_server([health])
    result = prober.health(prober.deadline_in(5))
    assert result.ok and result.detail == "/health_generate: HTTP 200"


def test_generate_reads_the_real_spec_accept_length(recorded_server):
    entries = recorded("ngram_http.json.gz")
    generate = next(e for e in entries if e["path"] == "/generate" and e["status"] == 200
                    and isinstance(e["body"], dict))
    prober = recorded_server([generate])
    result = prober.generate("x", 16, prober.deadline_in(5))
    assert result.ok and result.accept_length == generate["body"]["meta_info"]["spec_accept_length"]
    assert result.completion_tokens == generate["body"]["meta_info"]["completion_tokens"]


def test_bad_request_400_is_a_failed_probe_with_sglang_message_not_a_crash(recorded_server):
    entries = recorded("basic_http.json.gz")
    bad = [e for e in entries if e["status"] == 400]
    assert {e["body"]["error"]["message"] for e in bad} >= {
        "The input (20000 tokens) is longer than the model's context length (4096 tokens)."}
    prober = recorded_server(bad[:1])
    result = prober.generate("x", 16, prober.deadline_in(5))
    assert not result.ok and "HTTP 400" in result.detail and "context length" in result.detail


def test_server_info_has_the_version_and_the_average_accept_length(recorded_server):
    entries = recorded("ngram_http.json.gz")
    info = next(e for e in entries if e["path"] == "/server_info")
    prober = recorded_server([info])
    answer = prober.server_info(prober.deadline_in(5))
    assert answer["version"] == "0.5.16"
    assert isinstance(answer["internal_states"][0]["avg_spec_accept_length"], float)


def test_a_killed_scheduler_fed_line_by_line_is_one_crash_once_echoes_are_dropped():
    """Live, the launcher's `SIGQUIT received… one child failed` arrives as a second child-death
    group; it is SGLang answering the first death, not a second one."""
    from ddtreed.records import LogChunk
    from ddtreed.health.serving import is_echo, without_echoes

    assembler, groups = Assembler(eager=True), []
    for index, line in enumerate((FIXTURES / "ck_scheduler.log").read_text().splitlines()):
        assembler.feed(LogChunk("service.stderr.log", index + 1, (line,), 100.0 + index / 100))
        groups += assembler.take(100.0 + index / 100)
    groups += assembler.take(200.0, final=True)
    assert len(groups) == 2 and is_echo(groups[1][0]) and not is_echo(groups[0][0])
    first, late = groups[0], groups[1]
    assert without_echoes(late, already=first) == ()
    assert without_echoes(first + late) == first
    assert without_echoes(late) == late  # alone, the echo is the only evidence: kept
