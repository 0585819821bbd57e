"""Rule regexes cannot hang diagnosis: long messages finish, catastrophic patterns are refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

from ddtreed.cli import main
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.rules.regex import PatternError, compile_rule_pattern, lint
from ddtreed.tracebacks import assemble_lines

ROOT = Path(__file__).resolve().parent.parent
# Generous for a loaded 2-core box; before RE2 a 64 KB message took minutes (issue 16.3).
DEADLINE_S = 120


def _long_message_log(path: Path, size: int = 64 * 1024) -> Path:
    words = "the piece wise graph runner required tensor failed to "  # no rule's literal, many near-misses
    message = (words * (size // len(words) + 1))[:size]
    path.write_text(
        "[2026-12-01 08:01:22] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 1, in capture\n'
        "    run()\n"
        f"RuntimeError: {message}\n"
    )
    return path


def test_64kb_message_is_diagnosed_by_the_real_cli(tmp_path):
    log = _long_message_log(tmp_path / "long.log")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "ddtreed", "diagnose", "--json", str(log)],
                          capture_output=True, text=True, timeout=DEADLINE_S, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    [incident] = report["incidents"]
    assert incident["exception"] == "RuntimeError"
    assert incident["category"]  # whatever it is, it was decided


def test_every_shipped_pattern_compiles_in_the_linear_engine():
    rules = load_rules([shipped("rules")])
    for rule in rules.rules:
        for pattern in rule.conditions.messages + rule.conditions.frames:
            assert type(pattern.program).__module__.startswith("re2"), (rule.id, pattern.pattern)


def _rule_file(directory: Path, message: str) -> Path:
    directory.mkdir()
    path = directory / "bad.toml"
    path.write_text(
        '[[rule]]\nid = "hang"\ncategory = "other"\ntitle = "t"\nmeaning = "m"\n'
        'diagnosis = "d"\n[rule.match]\n' f"message = '{message}'\n")
    return path


def test_rules_check_rejects_a_nested_quantifier_in_one_line(tmp_path, capsys):
    path = _rule_file(tmp_path / "rules", "(a+)+$")
    assert main(["rules", "check", "--rules-dir", str(path.parent)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"{path}:8: match.message: ")
    assert "nests a quantifier" in err[0]


def test_rules_check_rejects_lookarounds_naming_the_engine(tmp_path, capsys):
    path = _rule_file(tmp_path / "rules", "foo(?!bar)")
    assert main(["rules", "check", "--rules-dir", str(path.parent)]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{path}:8: match.message: ") and "RE2" in line


def test_lint_allows_bounded_and_single_quantifiers():
    for fine in (r"(?P<detail>[^\n]{0,160})", r"(ab)?c+", r"x(?:y|z)*", r"CHECK_EQ\(.*?\) failed"):
        assert lint(fine) is None, fine
    for bad in (r"(a+)+$", r"(?:\w+\s?)*x", r"((ab)*c)+"):
        assert lint(bad), bad
    try:
        compile_rule_pattern(r"(a*)*b")
    except PatternError as error:
        assert "nests a quantifier" in str(error)
    else:
        raise AssertionError("nested quantifier accepted")


def test_time_budget_exhausted_still_gives_a_diagnosis(tmp_path):
    rules = load_rules([shipped("rules")])
    log = _long_message_log(tmp_path / "long.log", size=1024)
    [group] = assemble_lines(log.read_text().splitlines(), str(log))
    diagnosis = rules.diagnose(group, budget_s=0.0)
    assert diagnosis.match.category
    assert any("time budget" in note for note in diagnosis.notes)
