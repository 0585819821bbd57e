"""What the detection path costs between "crash read" and "incident committed", part by part.

`handle_crash` does, before the incident row exists: `RuleSet.diagnose`, then
`Store.open_incident` (one SQLite transaction, WAL, synchronous=FULL: an fsync of the WAL per
commit); since f78ee50 `lifecycle.enter("crashed")` and `lifecycle.enter("diagnosing")` (each a
`StatusBoard.publish` → `write_status`: temp file, rename) come after the row, before they did. This times the
real functions on a real state dir (`--events` times each, interleaved), and beside them, in the
same run: the snapshot written the way it was up to 16ef28d (`host.write_atomic`: fsync of the
file and of the directory; `write_status` now renames without fsync), and the same
`open_incident` on a store whose connection runs `PRAGMA synchronous=NORMAL` (WAL: durable across a
crash of ddtreed, the last commits can be lost on a power cut).

`--incidents N` also runs the real `Daemon` (in a thread) N times on a fresh state dir against
`tests/programs/fast_service.py` and counts the SQLite write transactions of one incident on the
daemon's own store connection (its SQL traced), from the one that opens the incident to the one
that ends it: `auto` (the founding crash, the patch, restart, verification, resolved) and
`off` (policy off: recorded, not remediated). Same-run baseline: `benchmarks/compare.py --against
REV -- record_path.py --events 20 --incidents 3` runs this on REV's code too. Beside it, the
cost of two steps as two FULL commits and as one (`Store.together`), on a real store.
Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from _common import emit, load_info, percentile, quiet_logs, spread

import fast_service  # noqa: E402  (tests/programs, on sys.path through _common)
from ddtreed.service.host import write_atomic  # noqa: E402
from ddtreed.incidents import Store  # noqa: E402
from ddtreed.paths import shipped  # noqa: E402
from ddtreed.records import ServiceContext  # noqa: E402
from ddtreed.rules import load_rules  # noqa: E402
from ddtreed.ops.status import DaemonStatus, status_path, write_status  # noqa: E402
from ddtreed.tracebacks import assemble_lines  # noqa: E402

CONTEXT = ServiceContext(speculative_algorithm="DDTREE", block_size=8, ddtree_budget=32, tp_size=2)


def snapshot_with_fsync(state_dir: Path, status: DaemonStatus) -> None:
    """How the snapshot was written up to 16ef28d: `host.write_atomic` (fsync file and directory)."""
    status.updated_at = time.time()
    data = (json.dumps(status.to_dict(), indent=1) + "\n").encode()
    write_atomic(str(status_path(state_dir)), data, mode=0o600)


def timed(function, *args) -> float:
    started = time.perf_counter()
    function(*args)
    return (time.perf_counter() - started) * 1000


def stats(values: list[float]) -> dict:
    return {"p50": round(percentile(values, 0.5), 3), "p99": round(percentile(values, 0.99), 3),
            "max": round(max(values), 3)}


def _transactions(statements: list[str]) -> list[list[str]]:
    """The write transactions in a trace: each BEGIN IMMEDIATE … COMMIT, its statements."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for statement in statements:
        head = statement.strip().upper()
        if head.startswith("BEGIN IMMEDIATE"):
            current = []
        elif head.startswith("COMMIT") and current is not None:
            found.append(current)
            current = None
        elif current is not None and head.split(" ", 1)[0] in ("INSERT", "UPDATE", "DELETE"):
            label = _label(statement)
            if not current or current[-1] != label:  # a trigger's statements are traced under it
                current.append(label)
    return found


def _label(statement: str) -> str:
    """`steps: healthy`, `incidents: status 'resolved'`, else the statement's first words."""
    text = " ".join(statement.split())
    plain = text.replace('"', "").replace("[", "").replace("]", "")
    if plain.upper().startswith("INSERT INTO STEPS"):
        return "steps: " + text.rsplit("'", 2)[-2]  # `step` is the last column: its value last
    if plain.lower().startswith("update incidents set status"):
        return "incidents: status " + text.split("=", 1)[1].split(",", 1)[0].strip()
    return plain[:70]


def incident_transactions(directory: Path, mode: str) -> list[list[str]]:
    """One incident through the real daemon: the write transactions from its opening to its end."""
    import sqlite3
    import threading

    from ddtreed.config import load
    from ddtreed.demo import free_port
    from ddtreed.loop.daemon import Daemon

    config = load(fast_service.write_config(directory, port=free_port(), policy={"mode": mode}))
    daemon = Daemon(config)
    statements: list[str] = []
    daemon.store.current.db.conn.set_trace_callback(statements.append)
    thread = threading.Thread(target=daemon.run, name="daemon", daemon=True)
    thread.start()
    database = directory / "state" / "incidents.sqlite3"
    ended = "incidents: status 'resolved'" if mode == "auto" else "steps: not-remediated"  # and its finish
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and thread.is_alive():
            done = database.exists() and sqlite3.connect(f"file:{database}?mode=ro", uri=True).execute(
                "SELECT count(*) FROM steps WHERE step = ?",
                ["not-remediated" if mode == "off" else "verified"]).fetchone()[0]
            if done and any(ended in label for t in _transactions(list(statements)) for label in t):
                break
            time.sleep(0.05)
        else:
            raise SystemExit(f"record_path: the {mode} incident did not end; see {directory}")
    finally:
        daemon.request_stop()
        thread.join(60)
    transactions = _transactions(list(statements))
    first = next(i for i, t in enumerate(transactions) if any(s.startswith("INSERT INTO incidents") for s in t))
    last = next(i for i, t in enumerate(transactions) if ended in t)
    if mode == "off":  # the finish that follows the step (the same transaction once batched)
        last = next(i for i in range(last, len(transactions))
                    if any(s.startswith("incidents: status") for s in transactions[i]))
    return transactions[first:last + 1]


def steps_cost(directory: Path, rounds: int) -> dict:
    """Two steps of one incident as two FULL commits, and as one (`Store.together`), same store."""
    store = Store(directory / "incidents.sqlite3")
    incident = store.open_incident("crash", ())
    apart, together = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        store.add_step(incident, "not-remediated", "policy off")
        store.finish(incident, "open", "policy off")
        apart.append((time.perf_counter() - started) * 1000)
        if hasattr(store, "together"):
            started = time.perf_counter()
            store.together(lambda s: (s.add_step(incident, "not-remediated", "policy off"),
                                      s.finish(incident, "open", "policy off")))
            together.append((time.perf_counter() - started) * 1000)
    store.close()
    return {"two_commits_ms": stats(apart), **({"one_commit_ms": stats(together)} if together else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--incidents", type=int, default=0,
                        help="also count the transactions of N real incidents per policy (auto, off)")
    args = parser.parse_args()
    quiet_logs(50)
    rules = load_rules([shipped("rules")])
    crashes = assemble_lines(fast_service.founding_traceback(["TP1", "TP0"]).splitlines())[0]
    load_before = load_info()
    parts: dict[str, list[float]] = {name: [] for name in (
        "status_write", "status_write_fsync", "diagnose", "open_incident_full",
        "open_incident_normal")}
    with tempfile.TemporaryDirectory(prefix="ddtreed-record-") as root:
        full_dir, normal_dir = Path(root) / "full", Path(root) / "normal"
        for directory in (full_dir, normal_dir):
            directory.mkdir(mode=0o700)
        full, normal = Store(full_dir / "incidents.sqlite3"), Store(normal_dir / "incidents.sqlite3")
        normal.db.execute("PRAGMA synchronous=NORMAL")
        status = DaemonStatus(pid=os.getpid(), state="running", status_text="serving")
        for _ in range(args.events):
            parts["status_write"].append(timed(write_status, full_dir, status))
            parts["status_write_fsync"].append(timed(snapshot_with_fsync, normal_dir, status))
            started = time.perf_counter()
            diagnosis = rules.diagnose(crashes, CONTEXT)
            parts["diagnose"].append((time.perf_counter() - started) * 1000)
            for store, key in ((full, "open_incident_full"), (normal, "open_incident_normal")):
                parts[key].append(timed(store.open_incident, "crash", crashes, diagnosis.signature,
                                        diagnosis.match, CONTEXT))
        full.close()
        normal.close()
    result = {"benchmark": "record_path", "events": args.events,
              "code_path": "ddtreed.ops.status.write_status, RuleSet.diagnose (shipped rules), Store.open_incident",
              "baseline": "same run: the snapshot by host.write_atomic (fsyncs, as up to 16ef28d); "
                          "open_incident with PRAGMA synchronous=NORMAL",
              "load_before": load_before, "load_after": load_info()}
    result.update({f"{name}_ms": stats(values) for name, values in parts.items()})
    # What handle_crash pays before the row exists: diagnose and the commit (since f78ee50);
    # before it, two status writes too (with their fsyncs up to 16ef28d).
    now = [b + c for b, c in zip(parts["diagnose"], parts["open_incident_full"])]
    snapshots_first = [2 * a + b + c for a, b, c in zip(parts["status_write"], parts["diagnose"],
                                                        parts["open_incident_full"])]
    before = [2 * a + b + c for a, b, c in zip(parts["status_write_fsync"], parts["diagnose"],
                                               parts["open_incident_full"])]
    lean = [b + c for b, c in zip(parts["diagnose"], parts["open_incident_normal"])]
    result["record_now_ms"] = stats(now)
    result["record_with_snapshots_first_ms"] = stats(snapshots_first)
    result["record_with_status_fsync_ms"] = stats(before)
    result["record_with_synchronous_normal_ms"] = stats(lean)
    if args.incidents:
        with tempfile.TemporaryDirectory(prefix="ddtreed-record-") as root:
            result["two_steps"] = steps_cost(Path(root), max(args.events, 3))
            for mode in ("auto", "off"):
                runs = [incident_transactions(Path(root) / f"{mode}-{index}", mode) for index in range(args.incidents)]
                result[f"transactions_per_incident_{mode}"] = spread([len(run) for run in runs])
                result[f"transactions_{mode}_example"] = runs[-1]
        result["load_after"] = load_info()
    emit(result)


if __name__ == "__main__":
    main()
