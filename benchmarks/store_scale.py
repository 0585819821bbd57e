"""The incident store at scale: `ddtreed incidents` and a metrics scrape against 100,000 incidents.

Builds a store of N incidents shaped like the daemon's (each with its steps, a traceback record and
a remediation list), once with the current schema and once with the schema before migration 0009
(the baseline, same rows, same run), then times, on each:

- `list`: `Store.list_incidents(50)` in-process (what `ddtreed incidents` runs),
- `cli`: the real `python -m ddtreed incidents --state-dir …` process, start to exit,
- `scrape`: `Store.counts()` (what every metrics scrape runs),
- `prune`: `Store.prune(keep=1000)` on a copy, and the file size before/after.

Prints one JSON object. Usage: python benchmarks/store_scale.py [--incidents 100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ddtreed.incidents.migrations import MIGRATIONS  # noqa: E402

BEFORE_SCALE = tuple(m for m in MIGRATIONS if m[0] != "0009_scale_indexes_and_counts")

CATEGORIES = ("cuda-graph-shape-mismatch", "cuda-oom", "nccl-error", "kv-pool-too-small",
              "illegal-memory-access", "unknown", "other")
STATUSES = ("resolved", "resolved", "resolved", "escalated", "reverted", "open")
TRACEBACK = json.dumps([{"rank": "TP0", "exception": "RuntimeError", "message":
                         "The size of tensor a (8) must match the size of tensor b (33) at "
                         "non-singleton dimension 0", "frames": [
                             {"file": "sglang/srt/model_executor/cuda_graph_runner.py",
                              "line": 400 + i, "function": "replay_prepare"} for i in range(12)]}])


def build(path: Path, count: int, migrations) -> None:
    from ddtreed.incidents import connection, migrations as schema
    path.parent.mkdir(parents=True, exist_ok=True)
    db = connection.connect(path, 5.0)
    schema.migrate(db, migrations)
    db.close()
    conn = sqlite3.connect(path)
    now = time.time() - count * 60.0
    with conn:
        conn.executemany(
            "INSERT INTO incidents (source, service, category, rule_id, title, fingerprint, "
            "exception, message, params, ranks, tracebacks, context, remediations, status, "
            "outcome, started_at, resolved_at) VALUES "
            "('crash', 'sglang', ?, 'rule', 'title', ?, 'RuntimeError', 'message', '{}', "
            "'[\"TP0\"]', ?, '{}', '[]', ?, ?, ?, ?)",
            ((CATEGORIES[i % len(CATEGORIES)], f"fp{i % 97}", TRACEBACK,
              STATUSES[i % len(STATUSES)], "restarted; healthy" if i % 3 else "",
              now + i * 60.0, None if STATUSES[i % len(STATUSES)] == "open" else now + i * 60.0 + 30)
             for i in range(count)))
        conn.executemany(
            "INSERT INTO steps (incident_id, step, detail, data, at) VALUES (?, ?, '', '{}', ?)",
            ((i + 1, step, now + i * 60.0 + k) for i in range(count)
             for k, step in enumerate(("detected", "diagnosed", "applied", "healthy"))))
    conn.close()


def timed(function, runs: int) -> dict[str, float]:
    values = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        values.append((time.perf_counter() - start) * 1000.0)
    return {"min_ms": round(min(values), 3), "median_ms": round(statistics.median(values), 3),
            "max_ms": round(max(values), 3)}


# What the code before migration 0009 ran for a scrape (same run, the baseline).
BASELINE_COUNTS_SQL = ("SELECT category, status, COALESCE(outcome, '') AS outcome, COUNT(*) AS count "
                       "FROM incidents GROUP BY category, status, outcome ORDER BY category")
LIST_SQL = ("SELECT id, category, status, started_at FROM incidents "
            "ORDER BY started_at DESC, id DESC LIMIT 50")


def measure(state_dir: Path, runs: int, repo: Path, baseline: bool) -> dict[str, object]:
    path = state_dir / "incidents.sqlite3"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    counts_sql = BASELINE_COUNTS_SQL if baseline else (
        "SELECT category, status, outcome, count FROM incident_counts")
    result: dict[str, object] = {
        "list": timed(lambda: conn.execute(LIST_SQL).fetchall(), runs),
        "scrape": timed(lambda: conn.execute(counts_sql).fetchall(), runs),
    }
    conn.close()
    env = dict(os.environ, PYTHONPATH=str(repo))
    cli = [sys.executable, "-m", "ddtreed", "incidents", "--state-dir", str(state_dir)]
    result["cli_code"] = str(repo)
    result["cli"] = timed(lambda: subprocess.run(cli, env=env, check=True, capture_output=True,
                                                 cwd=repo), runs)
    copy = state_dir.parent / (state_dir.name + "-prune") / "incidents.sqlite3"
    copy.parent.mkdir()
    shutil.copy(path, copy)
    before = copy.stat().st_size
    pruner = sqlite3.connect(copy)
    start = time.perf_counter()
    with pruner:
        doomed = [row[0] for row in pruner.execute(
            "SELECT id FROM incidents WHERE status != 'open' AND id NOT IN "
            "(SELECT id FROM incidents ORDER BY started_at DESC, id DESC LIMIT 1000)")]
        for i in range(0, len(doomed), 500):
            chunk = doomed[i:i + 500]
            marks = ", ".join("?" * len(chunk))
            pruner.execute(f"DELETE FROM steps WHERE incident_id IN ({marks})", chunk)
            pruner.execute(f"DELETE FROM incidents WHERE id IN ({marks})", chunk)
    pruner.execute("VACUUM")
    result["prune"] = {"deleted": len(doomed), "ms": round((time.perf_counter() - start) * 1000, 1),
                       "size_before_mib": round(before / 2**20, 1),
                       "size_after_mib": round(copy.stat().st_size / 2**20, 1)}
    pruner.close()
    return result


def baseline_checkout(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(where), rev],
                   check=True)
    return where


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline-rev", default="32f079a",
                        help="the code before migration 0009 (indexes, counts table): the baseline")
    args = parser.parse_args()
    load = os.getloadavg()
    out: dict[str, object] = {"benchmark": "store_scale", "incidents": args.incidents,
                              "runs": args.runs, "loadavg_at_start": [round(x, 2) for x in load],
                              "code_path": "Store.list_incidents / Store.counts / Store.prune "
                                           "and the real `ddtreed incidents` process"}
    with tempfile.TemporaryDirectory() as tmp:
        old = baseline_checkout(args.baseline_rev, Path(tmp) / "baseline-code")
        try:
            for name, migrations, repo in (("baseline", BEFORE_SCALE, old),
                                           ("current", MIGRATIONS, REPO)):
                state = Path(tmp) / name
                build(state / "incidents.sqlite3", args.incidents, migrations)
                out[name] = measure(state, args.runs, repo, baseline=repo is old)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)],
                           check=False)
    out["baseline_rev"] = args.baseline_rev
    out["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
