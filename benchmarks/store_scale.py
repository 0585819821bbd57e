"""The incident store at scale: `ddtreed incidents` and a metrics scrape against 100,000 incidents.

Builds a store of N incidents shaped like the daemon's (each with its steps, a traceback record and
a remediation list), once with the current schema and once with the schema before migration 0009
(the baseline, same rows, same run), then times, on each:

- `list`: `Store.list_incidents(50)` in-process (what `ddtreed incidents` runs),
- `cli`: the real `python -m ddtreed incidents --state-dir …` process, start to exit,
- `cli_status`: the real `python -m ddtreed status --state-dir …` process,
- `scrape`: `Store.counts()` (what every metrics scrape runs),
- `prune`: `incidents.retention.prune` with the [incidents] defaults (keep 10,000, 180 days) in
  the daemon's batches of 500 on a copy: per-batch time (what one loop turn spends), the file
  size before, after (SQLite keeps the freed pages for new incidents) and after a VACUUM.
The incidents span N minutes (one a minute), so at 100,000 about 70 days: the age limit takes
none; the count limit takes all but the protected ones (open, unacknowledged escalated).

Prints one JSON object. Usage: python benchmarks/store_scale.py [--incidents 100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

KEEP, MAX_AGE_DAYS = 10_000, 180.0  # the [incidents] defaults
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
    """The baseline: the old code's SQL on the old schema (its list / scrape queries), the old
    CLI. Current: the real `Store.list_incidents(50)` and `Store.counts()` (the metrics scrape),
    the real CLIs, and retention's `prune` in the daemon's batches."""
    path = state_dir / "incidents.sqlite3"
    env = dict(os.environ, PYTHONPATH=str(repo))
    if baseline:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        result: dict[str, object] = {
            "list": timed(lambda: conn.execute(LIST_SQL).fetchall(), runs),
            "scrape": timed(lambda: conn.execute(BASELINE_COUNTS_SQL).fetchall(), runs),
        }
        conn.close()
    else:
        from ddtreed.incidents import Store

        store = Store(path, create=False, read_only=True)
        result = {"list": timed(lambda: store.list_incidents(50), runs),
                  "scrape": timed(store.counts, runs)}
        store.close()
    result["cli_code"] = str(repo)
    commands = {"cli": ["incidents"], "cli_status": ["status"]}
    for name, argv in commands.items():
        command = [sys.executable, "-m", "ddtreed", *argv, "--state-dir", str(state_dir)]
        walls, cpus = [], []
        for _ in range(runs):  # wall, and CPU of the child (user + sys): the box is shared
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            began = time.perf_counter()
            subprocess.run(command, env=env, check=name == "cli", capture_output=True, cwd=repo)
            walls.append((time.perf_counter() - began) * 1000.0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000.0)
        result[name] = spread(walls)
        result[f"{name}_cpu"] = spread(cpus)
    copy = state_dir.parent / (state_dir.name + "-prune") / "incidents.sqlite3"
    copy.parent.mkdir()
    shutil.copy(path, copy)
    before = copy.stat().st_size
    if baseline:
        result["prune"] = {"size_before_mib": round(before / 2**20, 1), "note": "the old code never pruned"}
        return result
    from ddtreed.incidents import Store
    from ddtreed.incidents.retention import BATCH, DAY_S, sweep

    store = Store(copy)
    batches: list[float] = []
    batches_cpu: list[float] = []
    deleted, cursor = 0, None
    start = time.perf_counter()
    while True:  # what the daemon's turns do with a backlog: one batch per turn
        began, began_cpu = time.perf_counter(), time.process_time()
        done, cursor = sweep(store, KEEP, MAX_AGE_DAYS * DAY_S, limit=BATCH, after=cursor)
        batches.append((time.perf_counter() - began) * 1000.0)
        batches_cpu.append((time.process_time() - began_cpu) * 1000.0)
        deleted += done
        if cursor is None:
            break
    total_ms = (time.perf_counter() - start) * 1000.0
    left = store.counts()
    store.close()
    after = copy.stat().st_size
    vacuum = sqlite3.connect(copy)
    vacuum.execute("VACUUM")
    vacuum.close()
    result["prune"] = {
        "keep": KEEP, "max_age_days": MAX_AGE_DAYS, "deleted": deleted, "left": left["incidents_total"],
        "left_open": left["open_incidents"],
        "left_by_status": _by_status(left),
        "batches": len(batches), "batch_ms": spread(batches), "batch_cpu_ms": spread(batches_cpu),
        "total_ms": round(total_ms, 1),
        "size_before_mib": round(before / 2**20, 1),
        "size_after_prune_mib": round(after / 2**20, 1),  # free pages, reused by new incidents
        "size_after_vacuum_mib": round(copy.stat().st_size / 2**20, 1)}
    return result


def _by_status(counts: dict) -> dict[str, int]:
    totals: dict[str, int] = {}
    for row in counts["incidents"]:
        totals[row["status"]] = totals.get(row["status"], 0) + row["count"]
    return totals


def spread(values: list[float]) -> dict[str, float]:
    return {"min_ms": round(min(values), 3), "median_ms": round(statistics.median(values), 3),
            "max_ms": round(max(values), 3)}


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
    import structlog  # only errors from the library: stdout is the one JSON object

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    load = os.getloadavg()
    out: dict[str, object] = {"benchmark": "store_scale", "incidents": args.incidents,
                              "runs": args.runs, "loadavg_at_start": [round(x, 2) for x in load],
                              "code_path": "Store.list_incidents / Store.counts / incidents.retention.prune "
                                           "and the real `ddtreed incidents` / `status` processes"}
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
