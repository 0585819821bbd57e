"""Real SGLang 0.5.16 output (logs from the H200, tests/fixtures/sglang-0.5.16) through the real
`ddtreed diagnose --json`, plus the founding log without --config, in colour and from stdin."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.cli import main

HERE = Path(__file__).parent
REAL = HERE / "fixtures" / "sglang-0.5.16"
FOUNDING = HERE / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log"
ROOT = HERE.parent


def diagnose_json(path, capsys, *extra: str) -> dict:
    assert main(["diagnose", str(path), "--json", *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0])


def only_incident(path, capsys) -> dict:
    report = diagnose_json(path, capsys)
    assert len(report["incidents"]) == 1, [i["category"] for i in report["incidents"]]
    incident = report["incidents"][0]
    for key in ("category", "rule_id", "diagnosis", "params", "remediations", "signature", "exception",
                "message", "ranks", "confidence", "evidence", "phase", "last_error_line"):
        assert key in incident, key
    return incident


def test_kv_pool_too_small_with_the_flag_advice(capsys):
    incident = only_incident(REAL / "memfrac_1e-5.log", capsys)
    assert incident["category"] == "kv-pool-too-small"
    assert incident["remediations"] == ["raise-mem-fraction-static"]
    assert incident["params"]["current_fraction"] == "1e-05"
    assert incident["params"]["minimum_fraction"] == 0.001
    assert "--mem-fraction-static above 0.001" in incident["advice"]
    assert incident["phase"] == "kv-pool"  # after `Load weight end`, before the pool
    assert incident["last_error_line"].startswith("ValueError: Loaded weights leave no GPU memory")


def test_capture_time_width_assertion_is_a_graph_width_mismatch(capsys):
    incident = only_incident(REAL / "width.log", capsys)
    assert incident["category"] == "cuda-graph-shape-mismatch"
    assert incident["rule_id"] == "verify-graph-width-at-capture"
    assert (incident["params"]["a"], incident["params"]["b"]) == (576, 624)
    assert incident["phase"] == "graph-capture"
    assert incident["params"]["captured_graph"] == "verify"
    assert incident["params"]["graph_tokens_per_req"] == 12
    assert incident["remediations"] == ["verify-graph-capture-width", "disable-cuda-graph"]  # NGRAM: no DDTree patch


def test_capture_time_width_under_ddtree_reaches_the_founding_remediation(tmp_path, capsys):
    # The same real crash, with the launch context of a DDTree service whose block (12) was used as
    # the verify width while the tree needs budget + 1 = 13 per request: 48 x 12 = 576, 48 x 13 = 624.
    text = (REAL / "width.log").read_text()
    text = text.replace("speculative_algorithm='NGRAM'", "speculative_algorithm='DDTREE'", 1)
    text = text.replace("speculative_dflash_block_size=None", "speculative_dflash_block_size=12, "
                        "speculative_ddtree_budget=12", 1)
    log = tmp_path / "width-ddtree.log"
    log.write_text(text)
    incident = only_incident(log, capsys)
    assert incident["rule_id"] == "ddtree-verify-graph-width-at-capture"
    assert incident["precise"] is True
    assert incident["remediations"][0] == "ddtree-verify-graph-width"
    assert "576" in incident["diagnosis"] and "12+1" in incident["diagnosis"]


def test_port_in_use_error_line_without_traceback(capsys):
    incident = only_incident(REAL / "portinuse.log", capsys)
    assert incident["category"] == "port-in-use"
    assert incident["kind"] == "error-line"
    assert "[Errno 98]" in incident["last_error_line"]
    assert incident["phase"] != "serving"  # the false ready line comes after the error


def test_argparse_rejection_is_unsupported_config(capsys):
    incident = only_incident(REAL / "bad_unknown_flag.log", capsys)
    assert incident["category"] == "unsupported-config"
    assert incident["rule_id"] == "launch-arguments-rejected"
    assert "--no-such-flag 3" in incident["diagnosis"]


def test_oom_names_the_process_holding_the_gpu(capsys):
    incident = only_incident(REAL / "hog_3.log", capsys)
    assert incident["category"] == "cuda-oom"
    assert incident["params"]["holder_pid"] == 9310
    assert incident["params"]["holder_memory"] == "136.79 GiB"
    assert "9310" in incident["diagnosis"]
    assert not any("lower" in r for r in incident["remediations"])  # never shrink SGLang blindly


def test_killed_scheduler_is_a_worker_death(capsys):
    incident = only_incident(REAL / "ck_scheduler.log", capsys)
    assert (incident["category"], incident["rule_id"]) == ("other", "worker-died-without-traceback")
    assert incident["params"]["exit_code"] == -9
    assert incident["phase"] == "serving"


@pytest.mark.parametrize("name", ["basic.log", "width2.log"])
def test_healthy_real_logs_have_no_incident(name, capsys):
    assert diagnose_json(REAL / name, capsys)["incidents"] == []


def test_founding_log_without_config_is_exact(capsys):
    incident = only_incident(FOUNDING, capsys)
    assert (incident["category"], incident["rule_id"]) == ("cuda-graph-shape-mismatch", "ddtree-verify-graph-width")
    assert incident["precise"] is True
    assert "captured 8 tokens wide" in incident["diagnosis"] and "32+1 = 33" in incident["diagnosis"]
    assert incident["remediations"][0] == "ddtree-verify-graph-width"
    assert incident["ranks"] == ["TP0", "TP3"]


def colour(line: str) -> str:
    """Python 3.13's traceback colours: file names, line numbers, functions, exception names."""
    frame = re.match(r'(\s*)File "([^"]*)", line (\d+), in (.*)$', line)
    if frame:
        indent, path, number, function = frame.groups()
        return (f'{indent}File \x1b[35m"{path}"\x1b[0m, line \x1b[35m{number}\x1b[0m, '
                f'in \x1b[35m{function}\x1b[0m')
    exception = re.match(r"(\w+Error): (.*)$", line)
    if exception:
        return f"\x1b[1;35m{exception.group(1)}\x1b[0m: \x1b[35m{exception.group(2)}\x1b[0m"
    if line.startswith("    "):
        return f"    \x1b[31m{line[4:]}\x1b[0m"
    return line


def test_coloured_founding_crash_is_still_the_width_mismatch(tmp_path, capsys):
    log = tmp_path / "coloured.log"
    log.write_text("\n".join(colour(line) for line in FOUNDING.read_text().splitlines()) + "\n")
    assert "\x1b[35m" in log.read_text()
    incident = only_incident(log, capsys)
    assert (incident["category"], incident["rule_id"]) == ("cuda-graph-shape-mismatch", "ddtree-verify-graph-width")
    assert incident["exception"] == "RuntimeError" and "\x1b" not in incident["message"]


def test_diagnose_dash_reads_stdin():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "ddtreed", "diagnose", "--json", "-"],
                          input=FOUNDING.read_text(), capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["path"] == "-"
    assert report["incidents"][0]["rule_id"] == "ddtree-verify-graph-width"


def test_explain_shows_deciding_and_outvoted_evidence(capsys):
    assert main(["diagnose", "--explain", str(REAL / "width.log")]) == 0
    out = capsys.readouterr().out
    assert "evidence:" in out
    assert re.search(r"decides phase\s+graph-capture", out)
    assert re.search(r"decides message\s+shape-mismatch", out)
    assert "decided:    cuda-graph-shape-mismatch by verify-graph-width-at-capture" in out
    assert "outvoted:" in out  # the capture-failed family also matched, and lost
