"""The incident store's record path on the standard library's sqlite3 (`incidents/lite.py`, what
the daemon uses) beside the same `Store` on sqlite-utils (the same-run baseline: what
`connection.py` wrapped up to 739e07a), interleaved: `open_incident`, `add_step`, `finish`, each
a real FULL-synchronous WAL commit on a real file. Thread CPU and wall per call, medians over
`--events`. Needs sqlite-utils (the `test` extra). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, emit, load_info, quiet_logs

sys.path.insert(0, str(REPO / "tests"))

import sqlite_utils  # noqa: E402
from test_incidents_support import founding_crashes  # noqa: E402

from ddtreed.incidents import Store, connection, database_path  # noqa: E402
from ddtreed.incidents.lite import Database  # noqa: E402

BACKENDS = {"stdlib_sqlite3": Database,
            "sqlite_utils": lambda raw: sqlite_utils.Database(raw, execute_plugins=False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=150)
    args = parser.parse_args()
    quiet_logs()
    load_before = load_info()
    with tempfile.TemporaryDirectory(prefix="ddtreed-store-backends-") as root:
        stores = {}
        for name, wrap in BACKENDS.items():
            connection.DATABASE = wrap
            stores[name] = Store(database_path(Path(root) / name))
        connection.DATABASE = Database
        crashes = founding_crashes(1)
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in BACKENDS}
        for event in range(args.events):
            order = list(stores.items())
            for name, store in order if event % 2 else order[::-1]:
                cpu, wall = time.thread_time(), time.perf_counter()
                incident = store.open_incident("crash", crashes, detected_at=time.time())
                _add(samples[name], "open_incident", cpu, wall)
                cpu, wall = time.thread_time(), time.perf_counter()
                store.add_step(incident, "diagnosed", "rule x", data={"evidence": ["a line"]})
                _add(samples[name], "add_step", cpu, wall)
                cpu, wall = time.thread_time(), time.perf_counter()
                store.finish(incident, "resolved", "fixed")
                _add(samples[name], "finish", cpu, wall)
        for store in stores.values():
            store.close()
    result = {"benchmark": "store_backends", "events": args.events,
              "code_path": "ddtreed.incidents.Store on a real file, connection.DATABASE swapped",
              "baseline": "sqlite_utils (the store's wrapper up to 739e07a), same run, interleaved",
              "load_before": load_before}
    for name, figures in samples.items():
        for key, values in figures.items():
            result[f"{name}.{key}_us"] = round(1e6 * statistics.median(values), 1)
    result["load_after"] = load_info()
    emit(result)


def _add(figures: dict[str, list[float]], call: str, cpu: float, wall: float) -> None:
    figures.setdefault(f"{call}_cpu", []).append(time.thread_time() - cpu)
    figures.setdefault(f"{call}_wall", []).append(time.perf_counter() - wall)


if __name__ == "__main__":
    main()
