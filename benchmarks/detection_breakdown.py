"""Where detection's time goes: marks on the daemon's real path, per crash, after its last write.

    PYTHONPATH=$PWD python benchmarks/detection_breakdown.py [--events 30] [--lines-per-s 20]

Code path timed: `detection_latency.measure()` as is (the real `Daemon` in a thread of this
process, supervising benchmarks/bench_service.py, which logs decode lines and on cue writes the
founding traceback of two TP ranks, stamps the time and SIGKILLs itself). Wrapped, to note the
first time each point is reached per crash: `ServiceRun.pump` returning a crash group,
`observed` entered (crash text read from a live service: the settle wait for its exit follows),
`ServiceRun.sleep_until_exit` (the wait on its pidfd), the first `ServiceRun.poll()` that sees
the exit, `handle_crash` entered; and the row's commit (detection_latency's own probe). Each mark
is in ms after the service's write stamp. The first crash (cold caches) is left out. Same-run
reference: the total (`detect_ms`), as detection_latency.py prints it. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import emit, load_info, percentile

import detection_latency as latency
import ddtreed.loop.daemon as daemon_module
from ddtreed.service.service_run import ServiceRun

POINTS = ("pump_returned", "observed", "exit_wait", "exit_seen", "handle_crash")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--lines-per-s", type=float, default=20.0)
    args = parser.parse_args()
    marks: dict[int, dict[str, float]] = {}
    crash = [0]

    def mark(name: str) -> None:
        marks.setdefault(crash[0], {}).setdefault(name, time.time())

    def wrap(owner, name: str, point: str, when=lambda result: True) -> None:
        original = getattr(owner, name)

        def wrapped(*args, **kwargs):
            if point in ("observed", "handle_crash", "exit_wait"):
                mark(point)
            result = original(*args, **kwargs)
            if point not in ("observed", "handle_crash", "exit_wait") and when(result):
                mark(point)
            return result

        setattr(owner, name, wrapped)

    wrap(ServiceRun, "pump", "pump_returned", when=bool)
    wrap(ServiceRun, "poll", "exit_seen", when=lambda status: status is not None)
    wrap(ServiceRun, "sleep_until_exit", "exit_wait")
    wrap(daemon_module, "observed", "observed")
    handle_crash = daemon_module.handle_crash

    def handle(*args, **kwargs):
        mark("handle_crash")
        try:
            return handle_crash(*args, **kwargs)
        finally:
            crash[0] += 1

    daemon_module.handle_crash = handle
    load_before, misses = load_info(), []
    with tempfile.TemporaryDirectory(prefix="ddtreed-breakdown-") as root:
        samples = latency.measure(Path(root), args.events, args.lines_per_s, misses)
        stamps = latency.crash_stamps(Path(root) / "service-events.txt")
    result = {"benchmark": "detection_breakdown", "events": len(samples), "lines_per_s": args.lines_per_s,
              "code_path": "detection_latency.measure(): the real Daemon and bench_service.py; marks wrapped "
                           "around ServiceRun.pump/poll/sleep_until_exit, observed, handle_crash",
              "baseline": "the row committed (detect_ms), same events", "load_before": load_before}
    for point in POINTS:
        values = sorted((marks[i][point] - stamp) * 1000 for i, stamp in enumerate(stamps)
                        if i > 0 and point in marks.get(i, {}))
        result[f"{point}_ms"] = None if not values else {
            "n": len(values), "p50": round(statistics.median(values), 3),
            "p90": round(percentile(values, 0.9), 3), "max": round(values[-1], 3)}
    detect = sorted(sample[0] * 1000 for sample in samples[1:])
    result["detect_ms"] = {"p50": round(statistics.median(detect), 3), "p99": round(percentile(detect, 0.99), 3)}
    result["misses"] = misses
    result["load_after"] = load_info()
    emit(result)


if __name__ == "__main__":
    main()
