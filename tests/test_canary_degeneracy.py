"""The canary's degeneracy test against real SGLang 0.5.16 greedy outputs (recorded on an H200):
the shipped defaults pass every legitimate output and still catch garbage."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ddtreed.health.canary.compare import LoopLimit, compare, degenerate_loop, degenerate_repetition
from ddtreed.health.canary.core import _unusable, loop_limit
from ddtreed.health.canary.client import Generation
from ddtreed.config import CanaryConfig

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-0.5.16"


def real_outputs() -> list[list[int]]:
    outputs = []
    for name in ("basic_http.json.gz", "ngram_http.json.gz"):
        for entry in json.loads(gzip.decompress((FIXTURES / name).read_bytes())):
            body = entry.get("body")
            for item in body if isinstance(body, list) else [body]:
                if isinstance(item, dict) and item.get("output_ids"):
                    outputs.append(item["output_ids"])
    return outputs


def generation(ids) -> Generation:
    return Generation(text=" ".join(map(str, ids)), ids=list(ids), accept_length=None, elapsed_s=0.1,
                      error=None)


DEFAULTS = CanaryConfig()


def test_every_real_greedy_output_is_usable_as_a_golden_with_the_shipped_defaults():
    outputs = real_outputs()
    assert len(outputs) >= 10
    longest_run = max(max(_runs(ids)) for ids in outputs)
    assert longest_run >= 14  # real output repeats a token 14+ times (57 in 256 tokens)
    for ids in outputs:
        for window in (ids, ids[:32]):  # the whole answer and the canary's 32-token answer
            assert _unusable(generation(window), DEFAULTS.repetition_limit, loop_limit(DEFAULTS)) is None


def test_the_old_run_length_default_would_have_failed_a_healthy_first_start():
    assert any(degenerate_repetition(ids[:32], 8) is not None for ids in real_outputs())


@pytest.mark.parametrize("garbage", [
    [0] * 32,  # NaN logits: one argmax forever
    [5, 9] + [7] * 30,  # a sensible start, then stuck
    [11, 12] * 16,  # a two-token loop
    [1, 2, 3] * 10 + [1, 2],
    [42, 43, 44, 45] * 8,
])
def test_garbage_is_degenerate_with_the_shipped_defaults(garbage):
    problem = _unusable(generation(garbage), DEFAULTS.repetition_limit, loop_limit(DEFAULTS))
    assert problem is not None and problem[0] == "repetition"


def test_a_real_output_that_matches_its_golden_is_never_degenerate_and_a_diverged_loop_is():
    real = real_outputs()[4]
    assert compare(real, "", real, "", 0, 0, loop_limit(DEFAULTS)).problem is None
    stuck = real[:3] + [real[2]] * (len(real) - 3)
    found = compare(real, "", stuck, "", len(real), 0, loop_limit(DEFAULTS))  # tolerance allows it
    assert found.problem == "repetition"


def test_loop_limit_edges():
    limit = LoopLimit()
    assert degenerate_loop([1] * 15, limit) is None  # too short to judge
    assert degenerate_loop([1] * 16, limit) == (1,)
    assert degenerate_loop(list(range(16)), limit) is None
    assert degenerate_loop([1] * 16, LoopLimit(share=0)) is None  # off


def _runs(ids):
    run, runs = 1, [1]
    for previous, token in zip(ids, ids[1:]):
        run = run + 1 if token == previous else 1
        runs.append(run)
    return runs
