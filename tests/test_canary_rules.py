"""Comparison, canary crashes and their diagnosis by the shipped rules (no service needed)."""

from __future__ import annotations

import pytest

from ddtreed.health.canary import GoldenKey, canary_crash, compare
from ddtreed.health.canary.compare import degenerate_repetition, divergence
from ddtreed.health.canary.results import CanaryResult, PromptResult, result_from_dict
from ddtreed.paths import shipped
from ddtreed.records import ServiceContext
from ddtreed.remediation import load_remediations
from ddtreed.rules import load_rules
from ddtreed.signature import signature_of

KEY = GoldenKey("/models/target", "/models/draft", "0.5.23")
DDTREE = ServiceContext(speculative_algorithm="DDTREE", block_size=8, ddtree_budget=32)
DFLASH = ServiceContext(speculative_algorithm="DFLASH", block_size=8)


@pytest.fixture(scope="module")
def rules():
    catalog = load_remediations([shipped("remediations")])
    return load_rules([shipped("rules")], remediation_ids=[r.id for r in catalog])


def diverged(at: int = 2, of: int = 32) -> CanaryResult:
    prompt = PromptResult("p", False, "diverged", f"output diverged at token {at + 1} of {of}",
                          first_divergence=at, golden_tokens=of, divergent=of - at,
                          diff=("golden: 1 2 [3]", "output: 1 2 [9]"))
    return CanaryResult(False, "silent-corruption", "silent corruption: prompt 2 of 2", KEY,
                        (PromptResult("q", True), prompt), accept_length=3.5, at=1.0)


def collapsed(baseline: float | None = 3.4) -> CanaryResult:
    return CanaryResult(False, "acceptance-collapse", "acceptance collapsed", KEY,
                        (PromptResult("q", True, accept_length=1.02),), accept_length=1.02,
                        baseline=baseline, at=1.0)


def test_ids_compare_exactly_and_count_every_differing_position():
    same = compare([1, 2, 3], "a b c", [1, 2, 3], "x y z", 0, 8)
    assert same.problem is None and same.compared_as == "ids" and same.first_divergence is None
    found = compare([1, 2, 3, 4], "", [1, 9, 3], "", 0, 8)
    assert (found.problem, found.first_divergence, found.divergent) == ("diverged", 1, 2)
    assert found.diff == ("golden: 1 [2] 3 4", "output: 1 [9] 3")
    assert compare([1, 2, 3], "", [1, 2], "", 0, 8).diff == ("golden: 1 2 [3]", "output: 1 2 [<end>]")
    assert compare([1, 2, 3, 4], "", [1, 9, 3, 4], "", 1, 8).problem is None  # within tolerance


def test_text_is_split_on_whitespace_when_either_side_lacks_ids():
    found = compare([], "the model drafts a tree", [5, 6], "the model drafts the tree", 0, 8)
    assert found.compared_as == "words" and found.first_divergence == 3
    assert "[a]" in found.diff[0] and "[the]" in found.diff[1]
    assert compare([], "x", None, "  ", 0, 8).problem == "empty"


def test_degenerate_repetition_fails_even_within_the_divergence_tolerance():
    golden = list(range(10))
    found = compare(golden, "", golden[:2] + [7] * 8, "", 10, 8)
    assert found.problem == "repetition" and found.repeated == "7"
    assert degenerate_repetition([1, 1, 1], 4) is None and degenerate_repetition([1, 1, 1], 3) == 1
    assert divergence([1, 2], [1, 2, 3]) == (2, 1)


def test_failed_result_becomes_a_canary_crash_with_a_stable_fingerprint():
    crash = canary_crash(diverged())
    assert (crash.kind, crash.exception) == ("canary", None)
    assert crash.message == "canary: output diverged at token 3 of 32 (prompt 2 of 2)"
    assert "output: 1 2 [9]" in crash.excerpt
    other = canary_crash(diverged(at=9, of=16))
    assert signature_of(crash).fingerprint == signature_of(other).fingerprint
    assert canary_crash(collapsed()).message == "canary: acceptance length 1.02 vs baseline 3.40"
    with pytest.raises(ValueError):
        canary_crash(CanaryResult(True, None, "ok", KEY))


def test_ddtree_silent_corruption_names_the_ladder(rules):
    match = rules.diagnose((canary_crash(diverged()),), DDTREE).match
    assert (match.rule_id, match.category, match.precise) == (
        "canary-silent-corruption-ddtree", "silent-corruption", True)
    assert match.remediations == ("lower-ddtree-budget", "ddtree-to-dflash",
                                  "disable-speculative-decoding")
    assert "tree budget 32" in match.diagnosis and "token 3 of 32" in match.diagnosis


def test_silent_corruption_without_ddtree_turns_speculation_off(rules):
    match = rules.diagnose((canary_crash(diverged()),), DFLASH).match
    assert (match.rule_id, match.remediations) == ("canary-silent-corruption",
                                                   ("disable-speculative-decoding",))
    assert rules.diagnose((canary_crash(diverged()),), None).match.category == "silent-corruption"


def test_acceptance_collapse_rules(rules):
    ddtree = rules.diagnose((canary_crash(collapsed()),), DDTREE).match
    assert (ddtree.rule_id, ddtree.category) == ("canary-acceptance-collapse-ddtree",
                                                 "acceptance-collapse")
    assert ddtree.remediations == ("ddtree-to-dflash", "disable-speculative-decoding")
    assert "1.02" in ddtree.diagnosis and "3.4" in ddtree.diagnosis
    dflash = rules.diagnose((canary_crash(collapsed(baseline=None)),), DFLASH).match
    assert (dflash.rule_id, dflash.remediations) == ("canary-acceptance-collapse",
                                                     ("disable-speculative-decoding",))
    assert "(learned baseline: unknown)" in dflash.diagnosis


def test_every_canary_rule_is_reached_here(rules):
    reached = {rules.diagnose((canary_crash(result),), context).match.rule_id
               for result in (diverged(), collapsed()) for context in (DDTREE, DFLASH)}
    canary_rules = {rule.id for rule in rules.rules if rule.conditions.kinds == ("canary",)}
    assert canary_rules == reached


def test_a_canary_crash_matches_no_crash_rule_by_accident(rules):
    crash = canary_crash(CanaryResult(False, None, "canary could not run: /generate: HTTP 503", KEY))
    assert rules.diagnose((crash,), DDTREE).match.category == "unknown"


def test_stored_result_round_trips():
    result = diverged()
    assert result_from_dict(result.to_dict()) == result
