"""benchmarks/footprint_paired.py with tiny seconds: both daemons run, one JSON object, every field.

The baseline is HEAD (a shallow clone has it). Nothing here looks at how fast anything was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"

pytestmark = pytest.mark.slow


def test_both_sides_ran_at_once_and_every_figure_is_printed():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "footprint_paired.py"), "--against", "HEAD",
                           "--rounds", "2", "--seconds", "0.5", "--lines-per-s", "100"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 1, "one JSON object on stdout"
    result = json.loads(done.stdout)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert result["benchmark"] == "footprint_paired" and result["baseline_rev"] == head
    assert result["candidate_rev"].startswith(head) and result["code_path"]
    assert result["rounds"] == 2 and result["lines_per_s_target"] == 100
    assert result["started_first"] == ["candidate", "baseline"], "rounds alternate which side starts first"
    # each daemon imported its own tree's package, not the other's nor the installed one
    assert result["imported_from"] == {"candidate": ["candidate tree: ddtreed/__init__.py"],
                                       "baseline": ["baseline tree: ddtreed/__init__.py"]}
    for side in ("candidate", "baseline"):
        for key in ("cpu_percent", "cpu_percent_ticks", "cpu_us_per_wakeup", "wakeups_per_s", "rss_mb", "uss_mb",
                    "service_lines_per_s", "cpu_percent_service"):
            figure = result[side][key]
            assert {"min", "median", "max", "per_round"} <= set(figure) and len(figure["per_round"]) == 2
        assert result[side]["rss_mb"]["median"] > 0
        assert result[side]["cpu_clock"] in (["schedstat ns"], ["psutil ticks"])
    for key in ("cpu_percent", "cpu_us_per_wakeup", "wakeups_per_s", "rss_mb"):
        difference = result["difference"][key]
        assert difference["per_round"] == [round(c - b, 2) for c, b in zip(result["candidate"][key]["per_round"],
                                                                            result["baseline"][key]["per_round"])]
        assert "median" in difference
    for key in ("load_before", "load_after"):
        assert {"loadavg_1m", "cpus"} <= set(result[key])
    assert len(result["round_loads"]) == 2
    assert set(result["goal_met"]) == {"candidate", "baseline"}
    rounds = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert [entry["round"] for entry in rounds] == [0, 1], "each round said on stderr as it ends"


def test_the_issue19_runner_reads_the_paired_goal():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "issue19.py"), "--quick", "--only", "cpu_1000_paired",
                           "--against", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    [goal] = document["goals"]
    assert goal["id"] == "cpu_1000_paired" and "error" not in goal, goal.get("error")
    assert goal["command"] == "python benchmarks/footprint_paired.py --against HEAD --rounds 1 --seconds 1 " \
                              "--lines-per-s 1000"
    assert goal["candidate"]["median"] >= 0 and goal["baseline"]["median"] >= 0
    assert goal["met"] == (goal["candidate"]["median"] <= 2)
    assert set(goal["extras"]) == {"cpu_us_per_wakeup", "wakeups_per_s"}
