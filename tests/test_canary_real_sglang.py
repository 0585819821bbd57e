"""The canary against what real SGLang 0.5.16 answered on an H200 (tests/fixtures/sglang-0.5.16/).

Real greedy output is not reproducible from run to run on a healthy server, and NGRAM's acceptance
depends on what the server served before. These tests replay the real answers through the canary's
own code path (its HTTP client, the comparison, the degeneracy test, the acceptance baselines) and
check that the shipped defaults pass them, while garbage, empty and looping output still fail.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ddtreed.health.canary import Canary, DEFAULT_PROMPTS, golden_key
from ddtreed.health.canary.compare import compare
from ddtreed.health.canary.core import canary_baseline_key, golden_variants, loop_limit
from ddtreed.config import CanaryConfig
from ddtreed.demo import language_model as demo_model
from ddtreed.health.probes import Prober
from ddtreed.incidents import Store
from ddtreed.records import ServiceContext
from ddtreed.health.verify import baseline_key

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-0.5.16"
DEFAULTS = CanaryConfig()
NGRAM = ServiceContext(model_path="/tmp/model", sglang_version="0.5.16", speculative_algorithm="NGRAM")
DFLASH = ServiceContext(model_path="/tmp/model", draft_model_path="/tmp/dflash_draft",
                        sglang_version="0.5.16", speculative_algorithm="DFLASH", block_size=4)


def exchanges(name: str) -> list[dict]:
    return json.loads(gzip.decompress((FIXTURES / name).read_bytes()))


def real_repeats() -> tuple[str, list[dict]]:
    """The same 117-token prompt sent greedily to one NGRAM server: 256 tokens three times
    (first cold, then with 116 tokens from the radix cache), then 128 tokens inside a batch."""
    bodies, prompt = [], None
    for entry in exchanges("ngram_http.json.gz"):
        if entry["path"] != "/generate" or entry["status"] != 200:
            continue
        texts = entry["req"]["text"] if isinstance(entry["req"]["text"], list) else [entry["req"]["text"]]
        answers = entry["body"] if isinstance(entry["body"], list) else [entry["body"]]
        for text, body in zip(texts, answers):
            if text.startswith("one two three"):
                prompt = text
                bodies.append(body)
    assert prompt is not None
    return prompt, bodies


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


class Replay:
    """An HTTP service answering /generate with queued real bodies, per prompt, in order."""

    def __init__(self):
        self.queue: dict[str, list[dict]] = defaultdict(list)
        self.requests: list[dict] = []

    def answer(self, body: dict) -> dict:
        self.requests.append(body)
        queued = self.queue[body["text"]]
        return queued.pop(0) if len(queued) > 1 else queued[0]


@pytest.fixture
def replay():
    script = Replay()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps(script.answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

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


# ---- 1. run-to-run variation of real greedy output ----

def test_real_repeats_of_one_greedy_prompt_differ_where_the_evidence_says():
    _, bodies = real_repeats()
    runs = [body["output_ids"] for body in bodies]
    assert [len(ids) for ids in runs] == [256, 256, 256, 128]
    assert [body["meta_info"]["cached_tokens"] for body in bodies] == [0, 116, 116, 116]
    assert [first_difference(runs[0], other) for other in runs[1:]] == [38, 38, 69]
    assert first_difference(runs[1], runs[2]) == 61  # two warm runs differ from each other too
    # The canary's 32 tokens agree in every run: the variation starts later on this server.
    assert all(ids[:32] == runs[0][:32] for ids in runs)


def test_the_exact_comparison_calls_the_real_repeats_silent_corruption():
    _, bodies = real_repeats()
    golden, later = bodies[0]["output_ids"], [body["output_ids"] for body in bodies[1:]]
    for ids in later:
        exact = compare(golden, "", ids, None, 0, 0, loop_limit(DEFAULTS), agree_tokens=0)
        assert exact.problem == "diverged"


def test_the_shipped_comparison_passes_every_real_repeat_at_every_length():
    _, bodies = real_repeats()
    runs = [body["output_ids"] for body in bodies]
    for golden in runs:
        for ids in runs:
            for length in (32, 64, 128, 256):
                found = compare(golden[:length], "", ids[:length], None, DEFAULTS.max_divergent_tokens,
                                DEFAULTS.repetition_limit, loop_limit(DEFAULTS), DEFAULTS.agree_tokens)
                assert found.problem is None, (length, found.describe())


def test_real_repeats_replayed_through_the_canary_pass_and_say_where_they_vary(replay, store):
    prompt, bodies = real_repeats()
    canary = Canary(store, CanaryConfig(prompts=(prompt,), max_new_tokens=256, golden_samples=1))
    replay.queue[prompt] = [bodies[0], bodies[1], bodies[2]]
    first = canary.check(replay.prober, NGRAM)  # the cold run becomes the golden, as on the H200
    assert first.passed and first.recorded == 1
    for _ in range(2):  # the two warm runs
        result = canary.check(replay.prober, NGRAM)
        assert result.passed, result.detail
        assert result.prompts[0].first_divergence == 38
        assert "agrees with the golden for 38 ids (8 required), varies from token 39" in result.prompts[0].detail
        assert "(1 past the first 8 tokens only)" in result.detail
    stored = store.canary_runs(1)[0]["data"]["prompts"][0]
    assert stored["output_ids"] == bodies[2]["output_ids"]  # the whole answer, for the next analysis
    from ddtreed.health.canary import result_from_dict

    newer = {**store.canary_runs(1)[0]["data"], "from_a_newer_ddtreed": 1}
    newer["prompts"] = [{**p, "also_newer": True} for p in newer["prompts"]]
    assert result_from_dict(newer).prompts[0].output_ids == tuple(bodies[2]["output_ids"])
    exact = Canary(store, CanaryConfig(prompts=(prompt,), max_new_tokens=256, agree_tokens=0))
    replay.queue[prompt] = [bodies[1]]
    assert exact.check(replay.prober, NGRAM).category == "silent-corruption"


def test_every_distinct_output_of_a_recording_is_a_golden_variant(replay, store):
    prompt, bodies = real_repeats()
    canary = Canary(store, CanaryConfig(prompts=(prompt,), max_new_tokens=256))  # golden_samples 3
    replay.queue[prompt] = [bodies[0], bodies[1], bodies[2]]
    recorded = canary.record(replay.prober, NGRAM)
    assert recorded.prompts[0].detail == "recorded (3 variants in 3 runs)"
    [row] = store.goldens(*golden_key(NGRAM))
    assert golden_variants(row) == [b["output_ids"] for b in bodies[:3]]
    replay.queue[prompt] = [bodies[2]]
    result = canary.check(replay.prober, NGRAM)
    assert result.passed and result.prompts[0].first_divergence is None  # one variant matches whole


def test_status_shows_a_tolerated_variation_apart_from_a_divergence(replay, store):
    from ddtreed.health.canary.view import render

    prompt, bodies = real_repeats()
    canary = Canary(store, CanaryConfig(prompts=(prompt,), max_new_tokens=256, golden_samples=1))
    replay.queue[prompt] = [bodies[0], bodies[1]]
    canary.check(replay.prober, NGRAM)
    text = render(canary.check(replay.prober, NGRAM))
    assert text.startswith("canary: PASSED") and "first variation (tolerated) (prompt 1, token 39" in text


def test_a_recording_repeat_that_is_degenerate_records_nothing_for_that_prompt(replay, store):
    prompt, bodies = real_repeats()
    stuck = {**bodies[0], "output_ids": [2028] * 256}
    canary = Canary(store, CanaryConfig(prompts=(prompt,), max_new_tokens=256))
    replay.queue[prompt] = [bodies[0], stuck, bodies[1]]
    result = canary.check(replay.prober, NGRAM)
    assert result.passed and result.recorded == 0
    assert result.prompts[0].detail == "not recorded: a repeat gave degenerate repetition of '2028'"
    assert store.goldens(*golden_key(NGRAM)) == []
    assert golden_variants({"output_tokens": [1, 2, 3]}) == [[1, 2, 3]]  # a row from before variants


def test_each_canary_request_has_a_prefix_cache_namespace_of_its_own(replay, store):
    """The false DFLASH divergence on the H200: the golden run of prompt 4 prefilled 41 new tokens
    (cold), the check a second later 1 new token on 40 cached ones, and diverged at token 10."""
    log = gzip.decompress((FIXTURES / "h200-run" / "dflash.service.log.gz").read_bytes()).decode()
    prefills = re.findall(r"\[2026-12-01 10:06:4([01])\] Prefill batch, #new-seq: 1, "
                          r"#new-token: (\d+), #cached-token: (\d+)", log)
    golden_run = [(int(new), int(cached)) for second, new, cached in prefills if second == "0"]
    check_run = [(int(new), int(cached)) for second, new, cached in prefills if second == "1"]
    assert (41, 0) in golden_run and (1, 40) in check_run
    for prompt in DEFAULT_PROMPTS:
        replay.queue[prompt] = [bodies_for(prompt)]
    Canary(store, DEFAULTS).check(replay.prober, NGRAM)
    keys = [request.get("extra_key") for request in replay.requests]
    assert len(keys) == len(DEFAULT_PROMPTS) * DEFAULTS.golden_samples  # recorded 3 samples each
    assert all(key and key.startswith("ddtreed-canary-") for key in keys) and len(set(keys)) == len(keys)
    replay.requests.clear()
    Canary(store, CanaryConfig(isolate_cache=False)).check(replay.prober, NGRAM)
    assert all("extra_key" not in request for request in replay.requests)


def test_the_real_false_divergence_passes_the_shipped_comparison():
    """The escalated DFLASH-off incident of run r1: prompt 4 'diverged at token 10 of 32 (5 differ)'.
    Only the diff window of the excerpt is known: tokens 6-14, the same before token 10."""
    [found] = [item for item in json.loads(gzip.decompress(
        (FIXTURES / "canary" / "r1-dflash.incidents.json.gz").read_bytes()))
        if item["category"] == "silent-corruption"]
    assert found["status"] == "escalated" and found["message"].endswith("token 10 of 32 (prompt 4 of 4)")
    excerpt = found["tracebacks"][0]["excerpt"]
    assert excerpt[0].endswith("output diverged at token 10 of 32 (5 differ)")
    golden_window, output_window = (window(line) for line in excerpt[1:3])
    assert golden_window[1] == output_window[1] == 4  # the bracket: token 10 is the 5th shown
    start = 10 - 1 - golden_window[1]  # 0-based position of the first token shown
    # Tokens before the window agreed (the first divergence is token 10): the same stand-ins.
    agreed = [10_000 + i for i in range(start)]
    golden, output = agreed + golden_window[0], agreed + output_window[0]
    old = compare(golden, "", output, None, 0, 0, loop_limit(DEFAULTS), agree_tokens=0)
    assert (old.problem, old.first_divergence) == ("diverged", 9)
    new = compare(golden, "", output, None, DEFAULTS.max_divergent_tokens, DEFAULTS.repetition_limit,
                  loop_limit(DEFAULTS), DEFAULTS.agree_tokens)
    assert new.problem is None and new.first_divergence == 9 and new.window == 8


def window(line: str) -> tuple[list[int], int]:
    """('golden: … 5 4 [31] 6 …') -> ([5, 4, 31, 6], index of the bracketed token)."""
    tokens = line.split(":", 1)[1].replace("…", " ").split()
    at = next(i for i, token in enumerate(tokens) if token.startswith("["))
    return [int(token.strip("[]")) for token in tokens], at


# ---- 2. corruption still fails with the shipped defaults ----

def real_goldens() -> list[list[int]]:
    """The canary-length (32) windows of every real greedy output of 32+ tokens."""
    outputs = []
    for name in ("basic_http.json.gz", "ngram_http.json.gz"):
        for entry in exchanges(name):
            body = entry.get("body")
            for item in body if isinstance(body, list) else [body]:
                if isinstance(item, dict) and len(item.get("output_ids") or []) >= 32:
                    outputs.append(item["output_ids"][:32])
    assert len(outputs) >= 5
    return outputs


def demo_garbage(root: int, length: int = 32) -> tuple[list[int], list[int]]:
    """The demo's verified output and its `--garbage-above-budget` output (the drafter's chain
    emitted unverified) from one root token, with the demo's own model."""
    def run(verify: bool) -> list[int]:
        output = [demo_model.target_next(root)]
        while len(output) < length:
            tree = demo_model.build_tree(output[-1], 8, 8)
            predictions = [demo_model.target_next(token) for token in tree.tokens]
            output += demo_model.accept(tree, predictions, verify=verify)
        return output[:length]
    return run(True), run(False)


def check(golden: list[int], ids: list[int]):
    return compare(golden, "", ids, None, DEFAULTS.max_divergent_tokens, DEFAULTS.repetition_limit,
                   loop_limit(DEFAULTS), DEFAULTS.agree_tokens)


@pytest.mark.parametrize("root", range(64))
def test_the_demos_unverified_tokens_fail_inside_the_agreement_window(root):
    golden, garbage = demo_garbage(root)
    found = check(golden, garbage)
    assert found.problem == "diverged" and found.first_divergence < DEFAULTS.agree_tokens


def test_empty_and_looping_output_fail_against_real_goldens():
    for golden in real_goldens():
        assert check(golden, []).problem == "empty"
        assert check(golden, [golden[0]] * 32).problem in ("diverged", "repetition")
        # Agrees for the whole window, then stuck on one token or a short loop: degenerate.
        assert check(golden, golden[:10] + [golden[9]] * 22).problem == "repetition"
        assert check(golden, golden[:12] + [7, 8] * 10).problem == "repetition"
        # Garbage that starts inside the window, even after a right start.
        assert check(golden, golden[:3] + [(t + 1) % 4096 for t in golden[3:]]).problem == "diverged"


def test_a_real_output_that_agrees_and_then_varies_is_not_degenerate():
    _, bodies = real_repeats()
    runs = [body["output_ids"] for body in bodies]
    for ids in runs[1:]:
        assert check(runs[0], ids[:len(runs[0])]).problem is None


# ---- 3. acceptance: like with like ----

def canary_accepts(name: str) -> list[float]:
    log = gzip.decompress((FIXTURES / "canary" / name).read_bytes()).decode()
    return [float(value) for value in re.findall(r"canary\.checked\s+accept_length=([0-9.]+)", log)]


def probe_accepts(name: str) -> list[float]:
    incidents = json.loads(gzip.decompress((FIXTURES / "canary" / name).read_bytes()))
    return [step["data"]["accept_length"] for item in incidents for step in item["steps"]
            if step["step"] == "healthy" and (step.get("data") or {}).get("accept_length")]


def body(ids: list[int], accept: float) -> dict:
    return {"text": " ".join(map(str, ids)), "output_ids": ids,
            "meta_info": {"completion_tokens": len(ids), "spec_accept_length": accept}}


def bodies_for(prompt: str, accept: float = 2.2) -> dict:
    goldens = real_goldens()
    return body(goldens[DEFAULT_PROMPTS.index(prompt) % len(goldens)], accept)


@pytest.mark.parametrize("run", ["r1", "r5"])
def test_real_ngram_acceptance_is_shown_but_not_judged_and_feeds_no_baseline(replay, store, run):
    canary_values = canary_accepts(f"{run}-ngram.ddtreed.log.gz")
    assert canary_values == [2.1994, 2.1994, 10.6667, 2.1994, 10.6667]  # cold, cold, warm, cold, warm
    probe_values = probe_accepts(f"{run}-ngram.incidents.json.gz")
    assert probe_values and all(round(value, 2) == 1.14 for value in probe_values)
    for value in probe_values:  # what the verifier's 16-token probe learned on that server
        store.add_accept_sample(baseline_key(NGRAM), value)
    canary = Canary(store, DEFAULTS)
    # The real sequence, then a periodic canary that only ever sees a warm server, then a restart.
    for value in canary_values + [10.6667] * 6 + [2.1994]:
        for prompt in DEFAULT_PROMPTS:
            replay.queue[prompt] = [bodies_for(prompt, value)]
        result = canary.check(replay.prober, NGRAM)
        assert result.passed, result.detail
        assert result.accept_length == value
        assert f"accept length {value:.2f} (not judged: NGRAM drafts from served history)" in result.detail
    assert store.baseline(canary_baseline_key(NGRAM)) is None  # NGRAM: no canary baseline at all
    assert round(store.baseline(baseline_key(NGRAM)), 2) == 1.14  # the probe's, untouched


def test_real_dflash_collapse_is_still_caught_against_the_canarys_own_baseline(replay, store):
    """Run r1: a random DFlash draft, `accept len: 1.00` on every decode line; the canary measured
    1.03 and the probe's baseline was 1.07. The collapse floor still catches it."""
    [collapse] = [item for item in json.loads(gzip.decompress(
        (FIXTURES / "canary" / "r1-dflash.incidents.json.gz").read_bytes()))
        if item["category"] == "acceptance-collapse"]
    accept, probe = collapse["params"]["accept_length"], collapse["params"]["baseline"]
    assert (accept, probe) == (1.03, 1.07) and collapse["status"] == "resolved"
    store.add_accept_sample(baseline_key(DFLASH), probe)
    for prompt in DEFAULT_PROMPTS:
        replay.queue[prompt] = [bodies_for(prompt, 1.0323)]
    result = Canary(store, DEFAULTS).check(replay.prober, DFLASH)
    assert result.category == "acceptance-collapse" and result.baseline is None
    assert "accept length 1.03" in result.detail and "at or below 1.20" in result.detail


def test_a_model_drafted_canary_learns_its_own_baseline_apart_from_the_probes(replay, store):
    """Like with like: the probe's 1.14 (16 tokens) and the canary's 2.20 (4 x 32 tokens) measured
    on one real server are kept apart, so neither judges the other."""
    store.add_accept_sample(baseline_key(DFLASH), 1.1428)
    canary = Canary(store, DEFAULTS)
    for prompt in DEFAULT_PROMPTS:
        replay.queue[prompt] = [bodies_for(prompt, 2.1994)]
    for _ in range(3):
        assert canary.check(replay.prober, DFLASH).passed
    assert store.baseline(canary_baseline_key(DFLASH)) == 2.1994
    assert round(store.baseline(baseline_key(DFLASH)), 4) == 1.1428  # the serving watch's, unfed
    for prompt in DEFAULT_PROMPTS:
        replay.queue[prompt] = [bodies_for(prompt, 1.1)]
    result = canary.check(replay.prober, DFLASH)
    assert result.category == "acceptance-collapse" and result.baseline == 2.1994
    assert "1.10 vs baseline 2.20" in result.detail
