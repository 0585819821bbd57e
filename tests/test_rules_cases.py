"""Hand-written cases (tests/cases/NAME.log + NAME.json) and per-rule coverage."""

import json
from pathlib import Path

import pytest

from ddtreed.paths import shipped
from ddtreed.records import ServiceContext
from ddtreed.rules import load_rules
from ddtreed.tracebacks import assemble_lines

CASES = sorted((Path(__file__).parent / "cases").glob("*.log"))
CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture(scope="module")
def rules():
    return load_rules([shipped("rules")])


def diagnose_log(rules, path: Path, context=None):
    groups = assemble_lines(path.read_text().splitlines(), str(path))
    return [rules.diagnose(group, context) for group in groups]


def expected_of(path: Path) -> dict:
    return json.loads(path.with_suffix(".json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[case.stem for case in CASES])
def test_case_gets_its_rule(case, rules):
    expected = expected_of(case)
    context = ServiceContext(**expected["context"]) if "context" in expected else None
    diagnoses = diagnose_log(rules, case, context)
    assert diagnoses, "no crash assembled"
    match = diagnoses[0].match
    assert (match.category, match.rule_id) == (expected["category"], expected["rule_id"]), match.diagnosis
    assert match.precise == ("context" in expected and bool(rules.get(match.rule_id).when))
    for number in expected.get("diagnosis_contains", ()):
        assert number in match.diagnosis
    if "ranks" in expected:
        assert diagnoses[0].ranks == expected["ranks"]


def test_every_rule_has_a_case(rules):
    covered = set()
    for case in CASES:
        expected = expected_of(case)
        covered.add(expected["rule_id"])
    for line in (CORPUS / "sglang-crashes.jsonl").read_text().splitlines():
        entry = json.loads(line)
        for group in assemble_lines(entry["log"].splitlines(), entry["id"]):
            covered.add(rules.diagnose(group).match.rule_id)
    covered.add("ddtree-verify-graph-width")  # the founding log: tests/test_diagnose_cli.py
    # Words of a pasted report only (a live log's failed health check is no crash):
    # tests/test_diagnose_phrasings_sources.py.
    covered.add("health-check-no-answer")
    # SGLang's SIGCHLD warning with a raw wait status: also printed for helper processes (a JIT
    # compile) of a server that keeps serving, so no crash of its own; quoted in reports:
    # tests/test_diagnose_phrasings_sources.py.
    covered |= {"child-status-fatal-signal", "child-status-sigkill"}
    # A bare death with communication WARN lines as context: tests/test_rules_death_lines.py (the
    # assembler keeps no context for child deaths yet).
    covered.add("child-died-after-comm-warnings")
    # Lines no traceback carries (a launcher's clap error, an allocator's CUresult print, the watchdog's
    # child-death line): diagnose's paste path reads them
    # (tests/test_diagnose_phrasings_families.py), the assembler alone does not.
    covered |= {"command-line-refused-by-clap", "cuda-driver-result-out-of-memory", "child-process-failed-line"}
    # Disaggregation's error lines (a request's KV transfer failed or timed out: the server keeps
    # serving, no traceback): diagnose's error-line path reads them (tests/test_diagnose_error_lines.py).
    covered |= {"pd-kv-transfer-timed-out", "pd-request-transfer-failed"}
    # The router's WARN lines (it gave up on a worker: the router keeps serving, no traceback):
    # diagnose's paste path reads them (tests/test_diagnose_phrasings_source_families_3.py).
    covered.add("router-gave-up-on-worker")
    # The router's start-up wait for workers (INFO/ERROR lines, no traceback): diagnose's paste path reads
    # them (tests/test_diagnose_phrasings_source_families_4.py).
    covered.add("router-waited-for-worker-startup")
    # Mooncake's transfer engine's glog lines (a live log carries SGLang's own traceback after them, which
    # pd-transfer-engine-failed reads): diagnose's paste path reads them
    # (tests/test_diagnose_phrasings_library_families_1.py).
    covered.add("transfer-engine-could-not-set-up-a-transport")
    # Wordings read where a live log has SGLang's traceback and the exception instead (sglang-code-bug,
    # or a bare AssertionError): a report's own words or a one-line paste, which diagnose's paste path
    # reads (tests/test_diagnose_phrasings_source_families_8.py).
    covered |= {"python-list-index-out-of-range", "triton-kernel-tile-leaves-no-stage"}
    # DeepEP's device-side assertion alone (a report's one line): in a live log the CUDA error its trap
    # causes follows it, which expert-parallel-library-device-check-before-cuda-error reads (its case);
    # the line alone is the paste path's (tests/test_diagnose_phrasings_source_families_12.py).
    covered.add("expert-parallel-library-device-check-refused")
    # SGLang's grammar abort is a logger line of a service that keeps serving (no crash in a live log, by
    # design): a report's paste is where it is read (tests/test_diagnose_phrasings_source_families_13.py).
    covered.add("grammar-refused-a-generated-token")
    # Real SGLang 0.5.16 logs: tests/test_diagnose_real_sglang.py (with the context they print).
    from ddtreed.cli.diagnose_cmd import diagnose_lines

    for log in sorted((Path(__file__).parent / "fixtures" / "sglang-0.5.16").glob("*.log")):
        covered.update(d.match.rule_id for d in diagnose_lines(log.read_text().splitlines(), str(log), rules, None))
    # Canary rules match crashes the canary builds, not logs: tests/test_canary_rules.py covers each.
    covered |= {rule.id for rule in rules.rules if rule.conditions.kinds == ("canary",)}
    # Serving-watch rules match crashes ddtreed/health/serving.py builds: tests/test_daemon_serving.py.
    covered |= {rule.id for rule in rules.rules if rule.conditions.kinds == ("serving",)}
    assert {rule.id for rule in rules.rules} - covered == set()


def test_founding_log_with_context_names_8_and_33(rules):
    context = ServiceContext(speculative_algorithm="DDTREE", block_size=8, ddtree_budget=32, tp_size=8)
    [diagnosis] = diagnose_log(rules, CORPUS / "logs" / "ddtree-verify-width-8-vs-33.log", context)
    assert diagnosis.match.rule_id == "ddtree-verify-graph-width"
    assert diagnosis.match.precise
    assert diagnosis.match.remediations[0] == "ddtree-verify-graph-width"
    assert "8 tokens wide" in diagnosis.match.diagnosis and "33" in diagnosis.match.diagnosis
    assert diagnosis.ranks == ["TP0", "TP3"]


def test_founding_log_with_other_numbers_is_not_the_width_rule(rules):
    context = ServiceContext(speculative_algorithm="DDTREE", block_size=16, ddtree_budget=15, tp_size=8)
    [diagnosis] = diagnose_log(rules, CORPUS / "logs" / "ddtree-verify-width-8-vs-33.log", context)
    assert diagnosis.match.rule_id == "cuda-graph-shape-mismatch"
    assert diagnosis.match.category == "cuda-graph-shape-mismatch"
    width = next(e for e in diagnosis.explanations if e.rule_id == "ddtree-verify-graph-width")
    assert not width.matched and "is false" in width.reasons[-1]
