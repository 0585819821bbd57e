"""`ddtreed diagnose` and `ddtreed rules list|test` as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.cli import main

ROOT = Path(__file__).parent.parent
FOUNDING = ROOT / "tests" / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log"
CASES = ROOT / "tests" / "cases"


@pytest.fixture
def founding_config(tmp_path) -> Path:
    config = tmp_path / "ddtreed.toml"
    config.write_text(f'''
[service]
argv = ["python", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.6", "--tp", "8",
        "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/nonexistent/draft",
        "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "32", "--page-size", "1"]
python = "{tmp_path}/no-such-python"
[paths]
state_dir = "{tmp_path}/state"
log_dir = "{tmp_path}/logs"
''')
    return config


@pytest.fixture
def founding_without_args(tmp_path) -> Path:
    """The founding log without its `server_args=` line: no launch context at all."""
    log = tmp_path / "founding-no-args.log"
    log.write_text("".join(line for line in FOUNDING.read_text().splitlines(keepends=True)
                           if "server_args=" not in line))
    return log


def run_json(capsys, *argv: str) -> list[dict]:
    assert main(["diagnose", *argv, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_founding_log_with_config_is_the_ddtree_width_rule(capsys, founding_config):
    [report] = run_json(capsys, str(FOUNDING), "--config", str(founding_config))
    [incident] = report["incidents"]
    assert incident["rule_id"] == "ddtree-verify-graph-width"
    assert incident["remediations"][0] == "ddtree-verify-graph-width"
    assert "8 tokens wide" in incident["diagnosis"] and "= 33" in incident["diagnosis"]
    assert incident["ranks"] == ["TP0", "TP3"]
    assert incident["params"]["a"] == 8 and incident["params"]["b"] == 33


def test_founding_log_without_context_still_names_the_category(capsys, founding_without_args):
    [report] = run_json(capsys, str(founding_without_args))
    [incident] = report["incidents"]
    assert incident["category"] == "cuda-graph-shape-mismatch"
    assert incident["rule_id"] != "ddtree-verify-graph-width"
    assert incident["exception"] == "RuntimeError"
    assert incident["message"].startswith("The size of tensor a (8)")


def test_one_json_object_per_file(capsys):
    files = [str(FOUNDING), str(CASES / "http-port-errno-98.log")]
    reports = run_json(capsys, *files)
    assert [r["path"] for r in reports] == files
    assert reports[1]["incidents"][0]["category"] == "port-in-use"


def test_a_log_without_crashes_has_no_incidents(capsys, tmp_path):
    quiet = tmp_path / "quiet.log"
    quiet.write_text("[2026-01-01 00:00:00] The server is fired up and ready to roll!\n")
    assert run_json(capsys, str(quiet)) == [{"path": str(quiet), "incidents": []}]


def test_explain_shows_signature_steps_and_rule_reasons(capsys, founding_without_args):
    assert main(["diagnose", str(founding_without_args), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "step: numbers 8, 33, 0 replaced by <n>" in out
    assert "MATCH cuda-graph-shape-mismatch" in out
    assert "needs the launch context" in out
    assert "would try:  disable-cuda-graph (offline: nothing applied)" in out


def test_missing_log_file_is_one_line_and_exit_1(capsys, tmp_path):
    assert main(["diagnose", str(tmp_path / "nope.log")]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == f"ddtreed: error: {tmp_path / 'nope.log'}: no such log file"
    assert captured.out == ""


def test_rules_list_json(capsys):
    assert main(["rules", "list", "--json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    founding = next(rule for rule in rules if rule["id"] == "ddtree-verify-graph-width")
    assert founding["precise"] and founding["when"] == "a == block_size and b == ddtree_budget + 1"


def test_rules_test_shows_how_a_rule_matches(capsys):
    rule_file = ROOT / "ddtreed" / "data" / "rules" / "cuda-graph.toml"
    assert main(["rules", "test", str(rule_file), str(FOUNDING)]) == 0
    out = capsys.readouterr().out
    assert "MATCH cuda-graph-shape-mismatch" in out
    assert "'a': 8" in out and "'b': 33" in out


def test_rules_test_exit_1_when_nothing_matches(capsys):
    rule_file = ROOT / "ddtreed" / "data" / "rules" / "distributed.toml"
    assert main(["rules", "test", str(rule_file), str(FOUNDING)]) == 1
    assert "MATCH" not in capsys.readouterr().out


def test_json_stdout_stays_clean_in_a_real_process():
    result = subprocess.run([sys.executable, "-m", "ddtreed", "diagnose", str(FOUNDING), "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["incidents"][0]["category"] == "cuda-graph-shape-mismatch"
