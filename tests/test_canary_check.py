"""Canary.check / record / PeriodicCanary against a real HTTP server that answers as scripted."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ddtreed.health.canary import Canary, CanaryError, PeriodicCanary, golden_key
from ddtreed.config import CanaryConfig
from ddtreed.health.probes import Prober
from ddtreed.incidents import Store
from ddtreed.records import ServiceContext

CONTEXT = ServiceContext(model_path="/m/target", draft_model_path="/m/draft", sglang_version="0.5.23",
                         speculative_algorithm="DDTREE", block_size=8, ddtree_budget=8)
PROMPTS = ("alpha beta", "gamma delta")


class Scripted:
    """What the fake service answers: per-prompt token ids, acceptance, load, version."""

    def __init__(self):
        self.ids = {prompt: list(range(index * 10, index * 10 + 6)) for index, prompt in enumerate(PROMPTS)}
        self.accept = 3.5
        self.with_ids = True
        self.load: int | None = None
        self.status = 200
        self.requests: list[dict] = []

    def answer(self, body: dict) -> tuple[int, dict]:
        self.requests.append(body)
        ids = self.ids[body["text"]]
        payload = {"text": " ".join(f"w{i}" for i in ids),
                   "meta_info": {"completion_tokens": len(ids), "spec_accept_length": self.accept}}
        if self.with_ids:
            payload["output_ids"] = ids
        return self.status, payload


@pytest.fixture
def service():
    script = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self._send(*script.answer(body))

        def do_GET(self):
            if self.path == "/metrics" and script.load is not None:
                text = (f'sglang:num_running_reqs{{model_name="m"}} {script.load}.0\n'
                        'sglang:num_queue_reqs{model_name="m"} 0.0\n')
                return self._send(200, text)
            if self.path == "/server_info":
                return self._send(200, {"version": "0.5.99"})
            self._send(404, {"detail": "Not Found"})

        def _send(self, status, payload):
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script.prober = Prober(f"http://127.0.0.1:{server.server_address[1]}")
    yield script
    server.shutdown()
    server.server_close()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "incidents.sqlite3") as opened:
        yield opened


def canary(store, **overrides) -> Canary:
    return Canary(store, CanaryConfig(prompts=PROMPTS, max_new_tokens=6, **overrides))


def test_first_healthy_run_records_untrusted_goldens_then_checks_against_them(service, store):
    first = canary(store).check(service.prober, CONTEXT)
    assert first.passed and first.recorded == 2 and "recorded 2 new golden outputs" in first.detail
    goldens = store.goldens(*golden_key(CONTEXT))
    assert [g["output_tokens"] for g in goldens] == [service.ids[p] for p in PROMPTS]
    assert not any(g["trusted"] for g in goldens)
    assert service.requests[0]["sampling_params"] == {"max_new_tokens": 6, "min_new_tokens": 6,
                                                      "temperature": 0}
    second = canary(store).check(service.prober, CONTEXT)
    assert second.passed and second.recorded == 0 and [p.compared_as for p in second.prompts] == ["ids"] * 2
    assert [run["passed"] for run in store.canary_runs()] == [True, True]


def test_divergence_fails_with_the_first_diff_and_is_stored(service, store):
    canary(store).check(service.prober, CONTEXT)
    service.ids["gamma delta"] = [10, 11, 99, 13, 14, 15]
    result = canary(store).check(service.prober, CONTEXT)
    assert not result.passed and result.category == "silent-corruption"
    assert result.first_divergence.first_divergence == 2
    assert result.first_divergence.diff == ("golden: 10 11 [12] 13 14 15", "output: 10 11 [99] 13 14 15")
    run = store.canary_runs(1)[0]
    assert not run["passed"] and run["data"]["prompts"][1]["diff"][1].endswith("[99] 13 14 15")
    assert canary(store, max_divergent_tokens=1).check(service.prober, CONTEXT).passed


def test_without_output_ids_words_are_compared(service, store):
    canary(store).check(service.prober, CONTEXT)
    service.with_ids = False
    assert canary(store).check(service.prober, CONTEXT).prompts[0].compared_as == "words"
    service.ids["alpha beta"] = [0, 1, 2, 3, 3, 5]
    result = canary(store).check(service.prober, CONTEXT)
    assert result.category == "silent-corruption" and "[w3]" in result.prompts[0].diff[1]


def test_collapse_against_floor_and_learned_baseline(service, store):
    for _ in range(3):
        assert canary(store).check(service.prober, CONTEXT).passed  # baseline samples of 3.5
    service.accept = 1.6  # above the floor, below half the baseline
    result = canary(store).check(service.prober, CONTEXT)
    assert (result.category, result.baseline) == ("acceptance-collapse", 3.5)
    assert "1.60 vs baseline 3.50" in result.detail
    service.accept = 1.0
    assert "at or below 1.20" in canary(store).check(service.prober, CONTEXT).detail
    no_speculation = ServiceContext(model_path="/m/target", sglang_version="0.5.23")
    assert canary(store).check(service.prober, no_speculation).passed


def test_record_replaces_goldens_as_trusted_and_refuses_degenerate_output(service, store):
    canary(store).check(service.prober, CONTEXT)
    service.ids["alpha beta"] = [4, 4, 4, 4, 4, 4]
    with pytest.raises(CanaryError, match="prompt 1 .*degenerate repetition"):
        canary(store, repetition_limit=4).record(service.prober, CONTEXT)
    assert not any(g["trusted"] for g in store.goldens(*golden_key(CONTEXT)))  # untouched
    service.ids["alpha beta"] = [4, 5, 6]
    result = canary(store).record(service.prober, CONTEXT)
    goldens = store.goldens(*golden_key(CONTEXT))
    assert result.recorded == 2 and all(g["trusted"] for g in goldens)
    assert goldens[0]["output_tokens"] == [4, 5, 6]


def test_unreachable_or_failing_service_is_not_a_corruption(service, store):
    service.status = 503
    result = canary(store).check(service.prober, CONTEXT)
    assert not result.passed and result.category is None
    assert result.detail.startswith("canary could not run: prompt 1: /generate: HTTP 503")
    assert store.goldens(*golden_key(CONTEXT)) == []


def test_version_missing_from_the_context_is_asked_of_the_service(service, store):
    unversioned = ServiceContext(model_path="/m/target", draft_model_path="/m/draft",
                                 speculative_algorithm="DDTREE")
    result = canary(store).check(service.prober, unversioned)
    assert result.key.sglang_version == "0.5.99"


def test_bad_config_names_the_key(store):
    with pytest.raises(ValueError, match="canary.max_new_tokens"):
        Canary(store, CanaryConfig(max_new_tokens=0))


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_periodic_runs_on_interval_and_defers_while_busy(service, store):
    clock = Clock()
    periodic = PeriodicCanary(canary(store, interval_s=60.0, busy_requests=2), clock=clock)
    assert periodic.run_if_due(service.prober, CONTEXT) is None  # not yet due
    clock.now += 60
    service.load = 5
    assert periodic.run_if_due(service.prober, CONTEXT) is None and periodic.deferred == 1
    service.load = 1
    assert periodic.run_if_due(service.prober, CONTEXT).passed
    clock.now += 120  # two intervals: a service that never idles is checked anyway
    service.load = 5
    assert periodic.run_if_due(service.prober, CONTEXT) is not None
    assert PeriodicCanary(canary(store), clock=clock).due() is False  # interval 0: restarts only
