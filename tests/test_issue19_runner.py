"""benchmarks/issue19.py end to end in --quick mode: one JSON document, one table row per goal.

Two cheap goals, one of each kind of run: `typical_startup` through benchmarks/compare.py (rounds of
this tree and of the baseline commit) and `cli_help` through cli_start.py's own --before-rev. The
baseline is HEAD so that a shallow clone has it. Nothing here looks at how fast anything was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNNER = REPO / "benchmarks" / "issue19.py"

pytestmark = pytest.mark.slow


def run_runner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    table = tmp_path_factory.mktemp("issue19") / "table.md"
    done = run_runner("--quick", "--only", "typical_startup,cli_help", "--against", "HEAD", "--markdown", str(table))
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 1, "one JSON document on stdout"
    return json.loads(done.stdout), table.read_text()


def test_the_document_names_both_sides_the_rounds_and_the_load(quick):
    document, _ = quick
    assert document["benchmark"] == "issue19" and document["quick"] is True
    assert document["baseline"] == "HEAD" and document["rounds"] == 1
    assert document["candidate"]
    assert {"loadavg_1m", "cpus"} <= set(document["load_before"]) and "loadavg_1m" in document["load_after"]
    assert [goal["id"] for goal in document["goals"]] == ["typical_startup", "cli_help"]
    assert set(document["jobs"]) == {"throughput", "cli"}


def test_each_goal_has_its_command_both_spreads_its_load_and_a_verdict(quick):
    document, _ = quick
    for goal in document["goals"]:
        assert "error" not in goal, goal.get("error")
        for side in ("candidate", "baseline"):
            figure = goal[side]
            assert figure["min"] <= figure["median"] <= figure["max"], (goal["id"], side, figure)
            assert figure["median"] > 0
        assert isinstance(goal["met"], bool)
        assert goal["load"]["min"] <= goal["load"]["max"]
        assert goal["target"] > 0 and goal["unit"]
    by_id = {goal["id"]: goal for goal in document["goals"]}
    throughput = by_id["typical_startup"]
    assert throughput["command"].startswith("python benchmarks/compare.py --against HEAD --rounds 1 -- "
                                            "pipeline_throughput.py --mix typical")
    assert len(throughput["candidate"]["per_round"]) == len(throughput["baseline"]["per_round"]) == 1
    assert throughput["reference"]["median"] > 0  # the plain loop of the same runs
    assert throughput["met"] == (throughput["candidate"]["median"] >= 2_000_000)
    # compare.py ran both trees: the baseline's commit is HEAD's
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert throughput["baseline_rev"] == head
    help_goal = by_id["cli_help"]
    assert help_goal["command"] == "python benchmarks/cli_start.py --runs 1 --before-rev HEAD"
    assert help_goal["met"] == (help_goal["candidate"]["median"] <= 120)


def test_the_table_has_a_row_per_goal_with_its_command(quick):
    document, table = quick
    assert "Quick mode" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(document["goals"])
    header = table.splitlines()[2]
    assert header.startswith("| goal | command | candidate") and "| baseline" in header and "| load" in header \
        and header.endswith("| met? |")
    for row, goal in zip(rows, document["goals"]):
        assert f"(`{goal['id']}`)" in row and goal["command"] in row
        assert row.rstrip().endswith(("| met |", "| **not met** |"))


def test_list_names_every_goal_of_the_issue_and_a_wrong_name_is_refused():
    listed = run_runner("--list")
    assert listed.returncode == 0
    ids = [line.split()[0] for line in listed.stdout.splitlines()]
    for goal in ("typical_startup", "typical_serving", "typical_plain_ratio", "noisy_startup", "noisy_serving",
                 "worst_startup", "worst_serving", "worst_memory", "detect_idle", "detect_hogs", "relaunch",
                 "cpu_20", "cpu_1000", "rss", "incidents_100k", "scrape_100k", "cli_help", "cli_status",
                 "fleet_100"):
        assert goal in ids
    refused = run_runner("--only", "typical_startup,no_such_goal")
    assert refused.returncode == 2 and "no_such_goal" in refused.stderr


def test_a_saved_document_gives_the_same_goals_and_table_again(quick, tmp_path):
    document, table = quick
    saved = tmp_path / "issue19.json"
    saved.write_text(json.dumps(document))
    again_table = tmp_path / "again.md"
    done = run_runner("--from-json", str(saved), "--markdown", str(again_table))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["goals"] == document["goals"]
    assert again_table.read_text() == table
