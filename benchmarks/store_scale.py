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

- `scrape_http`: `GET /metrics` of the daemon's real endpoint over loopback (its snapshot:
  a status and `Store.counts()`), wall per scrape, and `Store.counts()` alone beside it,
- `readers` (on the current store): the real `ddtreed incidents`, `incidents --json`,
  `incidents show ID` and `incidents show ID --json` processes of this checkout and of
  `--readers-before-rev` (default d068f31: the readers through the sqlite-utils store), runs
  interleaved command by command; wall and child CPU, whether both printed the same bytes, and
  `-X importtime` of each (total, the top modules imported by ddtreed's code); both trees'
  bytecode compiled first, as an install has it.

Prints one JSON object. Usage: python benchmarks/store_scale.py [--incidents 100000] [--runs 5]
[--current-only]
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


def scrape_http(state_dir: Path, scrapes: int) -> dict[str, object]:
    """What Prometheus gets: `GET /metrics` of the daemon's real endpoint (`ops.metrics.start_metrics`,
    the snapshot the daemon passes it: its status and `Store.counts()`), over loopback HTTP."""
    import urllib.request

    from ddtreed.incidents import Store
    from ddtreed.ops.metrics import start_metrics
    from ddtreed.ops.status import DaemonStatus

    status = DaemonStatus(pid=os.getpid(), state="running", status_text="serving")
    store = Store(state_dir / "incidents.sqlite3", create=False)
    server = start_metrics("127.0.0.1:0", lambda: (status, store.counts()))
    assert server is not None
    url = "http://{}:{}/metrics".format(*server.address)
    walls, counts, body = [], [], b""
    try:
        for _ in range(scrapes):
            began = time.perf_counter()
            with urllib.request.urlopen(url, timeout=30) as response:
                body = response.read()
            walls.append((time.perf_counter() - began) * 1000.0)
        counts = [timed(store.counts, 1)["median_ms"] for _ in range(scrapes)]
    finally:
        server.close()
        store.close()
    total = next((line for line in body.decode().splitlines()
                  if line.startswith("ddtreed_incidents_total")), "")
    return {"scrapes": scrapes, "wall_ms": spread(walls), "counts_ms": spread(counts),
            "body_bytes": len(body), "incidents_total_line": total}


def readers(state_dir: Path, runs: int, old: Path, incident_id: int) -> dict[str, object]:
    """The CLI readers of this checkout against those of `old`, same store, runs interleaved."""
    from cli_start import importtime  # benchmarks/ is sys.path[0] when run as a script

    commands = {"list": ["incidents"], "list_json": ["incidents", "--json"],
                "show": ["incidents", "show", str(incident_id)],
                "show_json": ["incidents", "show", str(incident_id), "--json"]}
    # Bytecode first, as `pip install` leaves it (a run with PYTHONDONTWRITEBYTECODE would
    # otherwise compile every ddtreed module from source on each start, both sides alike).
    for tree in (REPO, old):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "ddtreed")], check=True,
                       capture_output=True)
    result: dict[str, object] = {"before_code": str(old), "show_id": incident_id,
                                 "bytecode": "compiled before timing (as an install has it)"}
    for name, argv in commands.items():
        command = [sys.executable, "-m", "ddtreed", *argv, "--state-dir", str(state_dir)]
        times: dict[str, tuple[list[float], list[float]]] = {"now": ([], []), "before": ([], [])}
        outputs: dict[str, bytes] = {}
        for _ in range(runs):
            for side, repo in (("now", REPO), ("before", old)):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                began = time.perf_counter()
                done = subprocess.run(command, env=dict(os.environ, PYTHONPATH=str(repo)), check=True,
                                      capture_output=True, cwd=repo)
                times[side][0].append((time.perf_counter() - began) * 1000.0)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                times[side][1].append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000.0)
                outputs[side] = done.stdout
        entry: dict[str, object] = {"same_output": outputs["now"] == outputs["before"],
                                    "output_bytes": len(outputs["now"])}
        for side, repo in (("now", REPO), ("before", old)):
            outside, ours, total = importtime(command[1:], top=6, cwd=repo)
            entry[side] = {"wall_ms": spread(times[side][0]), "cpu_ms": spread(times[side][1]),
                           "importtime_total_ms": total, "importtime_top_imported_by_ddtreed": outside,
                           "importtime_top_ddtreed_modules": ours}
        result[name] = entry
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
    parser.add_argument("--readers-before-rev", default="d068f31",
                        help="the code whose CLI readers `readers` compares with this checkout's")
    parser.add_argument("--current-only", action="store_true",
                        help="only the current store: `readers` and `scrape_http` (no old schema, no prune)")
    args = parser.parse_args()
    import structlog  # only errors from the library: stdout is the one JSON object

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    load = os.getloadavg()
    out: dict[str, object] = {"benchmark": "store_scale", "incidents": args.incidents,
                              "runs": args.runs, "loadavg_at_start": [round(x, 2) for x in load],
                              "code_path": "Store.list_incidents / Store.counts / incidents.retention.prune "
                                           "and the real `ddtreed incidents` / `status` processes"}
    with tempfile.TemporaryDirectory() as tmp:
        trees = [] if args.current_only else [baseline_checkout(args.baseline_rev, Path(tmp) / "baseline-code")]
        readers_old = baseline_checkout(args.readers_before_rev, Path(tmp) / "readers-before-code")
        trees.append(readers_old)
        try:
            sides = (("current", MIGRATIONS, REPO),) if args.current_only else (
                ("baseline", BEFORE_SCALE, trees[0]), ("current", MIGRATIONS, REPO))
            for name, migrations, repo in sides:
                state = Path(tmp) / name
                build(state / "incidents.sqlite3", args.incidents, migrations)
                if not args.current_only:
                    out[name] = measure(state, args.runs, repo, baseline=repo is not REPO)
            out["scrape_http"] = scrape_http(Path(tmp) / "current", max(20, args.runs))
            out["readers"] = readers(Path(tmp) / "current", args.runs, readers_old, args.incidents // 2)
        finally:
            for tree in trees:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                               check=False)
    out["baseline_rev"] = args.baseline_rev
    out["readers_before_rev"] = args.readers_before_rev
    out["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
