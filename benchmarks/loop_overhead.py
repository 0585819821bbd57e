"""Crash → relaunch overhead of the real `ddtreed run`, with the founding patch applied each loop.

Each loop supervises a fresh fast fake service (tests/programs/fast_service.py) that prints the
founding traceback on every rank and dies by SIGKILL until the demo engine is patched. Measured
from the service's own exit stamp to the daemon's `service.started` event of the relaunch, minus
the daemon's stop of the (already dead) service (`service.stopping` → `service.stopped`);
`crash_to_relaunch_with_stop` is the whole interval, that stop included.
Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import emit, events, load_info, percentile, spread, start_daemon, stop_daemon, wait_for

import fast_service  # noqa: E402  (tests/programs, put on sys.path by _common)
from ddtreed.demo import free_port  # noqa: E402


def one_loop(directory: Path) -> dict[str, float]:
    marks = directory / "service-events.txt"
    config = fast_service.write_config(directory, port=free_port(), extra_args=("--events", str(marks)))
    log_path = directory / "daemon.jsonl"
    daemon = start_daemon(config, log_path)
    try:
        resolved = wait_for(lambda: any(e["event"] == "incident_resolved" for e in events(log_path)), 60.0)
    finally:
        stop_daemon(daemon)
    if not resolved:
        raise SystemExit(f"loop in {directory} did not resolve; see {log_path}")
    found = events(log_path)
    exit_at = next(float(line.split()[1]) for line in marks.read_text().splitlines() if line.startswith("exit"))
    stopping = next(e["at"] for e in found if e["event"] == "service.stopping" and e.get("reason") == "crash")
    stopped = next(e["at"] for e in found if e["event"] == "service.stopped" and e.get("reason") == "crash")
    opened = next(e["at"] for e in found if e["event"] == "incident_opened")
    applied = next(e["at"] for e in found if e["event"] == "remediation_applied")
    relaunched = next(e["at"] for e in found if e["event"] == "service.started" and "incident_id" in e)
    return {
        "crash_to_relaunch": relaunched - exit_at - (stopped - stopping),
        "crash_to_relaunch_with_stop": relaunched - exit_at,  # the stop of the dead tree included
        "crash_to_decision": stopping - exit_at,  # log read + assembler settle window
        "stop": stopped - stopping,
        "diagnose_and_record": opened - stopped,
        "apply_patch": applied - opened,
        "apply_to_relaunch": relaunched - applied,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loops", type=int, default=10, help="loops per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs: list[list[dict[str, float]]] = []
    started = time.monotonic()
    load_before = load_info()
    with tempfile.TemporaryDirectory(prefix="ddtreed-loop-") as root:
        for run in range(args.runs):
            samples = []
            for index in range(args.loops):
                directory = Path(root) / f"run{run}-loop{index}"
                directory.mkdir()
                samples.append(one_loop(directory))
            runs.append(samples)
    result = {"benchmark": "loop_overhead",
              "code_path": "the real `ddtreed run` process on tests/programs/fast_service.py: its JSON events "
                           "against the service's own exit stamp",
              "baseline": "none needed: a wall-clock interval; the parts below say where it goes",
              "runs": args.runs, "loops_per_run": args.loops, "load_before": load_before}
    for part in ("crash_to_relaunch", "crash_to_relaunch_with_stop", "crash_to_decision", "stop",
                 "diagnose_and_record", "apply_patch", "apply_to_relaunch"):
        p50s = [percentile([s[part] * 1000 for s in samples], 0.5) for samples in runs]
        result[f"{part}_p50_ms"] = spread(p50s, digits=1)
    result["crash_to_relaunch_p99_ms_per_run"] = [
        round(percentile([s["crash_to_relaunch"] * 1000 for s in samples], 0.99), 1) for samples in runs]
    result["load_after"] = load_info()
    result["goal_p50_ms"] = 100
    result["goal_met"] = result["crash_to_relaunch_p50_ms"]["median"] <= 100
    result["wall_s"] = round(time.monotonic() - started, 1)
    emit(result)


if __name__ == "__main__":
    main()
