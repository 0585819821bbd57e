"""Footprint of the real `ddtreed run` while its service logs SGLang decode lines at 1,000 lines/s.

The service (tests/programs/fast_service.py) first crashes with the founding traceback; once the
daemon has patched it and the incident is resolved, the daemon process alone (not the service)
is sampled with psutil for `--seconds`: peak RSS, CPU time over wall time, and voluntary context
switches per second (each is the loop blocking again after a wake-up), and the CPU per wake-up
(`cpu_us_per_wakeup`: what one turn costs, reads and all). `--min-read-interval-ms`
sets the follower's calm-flood pacing in the daemon (default: the library's). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from _common import CODE, emit, events, load_info, spread, stop_daemon, wait_for

import fast_service  # noqa: E402  (tests/programs, put on sys.path by _common)
from ddtreed.demo import free_port  # noqa: E402
from ddtreed.logs import MIN_READ_INTERVAL_S  # noqa: E402

try:  # the flood's read cadence, where the code has one apart from the interval
    from ddtreed.logs.follower import FLOOD_HOLD_S  # noqa: E402
except ImportError:
    FLOOD_HOLD_S = None

SAMPLE_EVERY_S = 0.5
# `ddtreed run` exactly as the console script starts it (`ddtreed.cli:main`)...
LAUNCH = "import sys; sys.argv.pop(1); from ddtreed.cli import main; sys.exit(main(sys.argv[1:]))"
# ...or with the follower's default pacing replaced (the daemon builds its Follower itself). This
# imports the follower, and so structlog, before `main` runs: the process leaves out first what a
# daemon leaves out (ddtreed.lean, where the code has it) so that RSS is measured as `run` has it.
LAUNCH_PACED = ("import sys\ntry:\n    from ddtreed.lean import lean_daemon_process\nexcept ImportError:\n"
                "    pass\nelse:\n    lean_daemon_process()\nimport ddtreed.logs.follower as f\n"
                "f.MIN_READ_INTERVAL_S = float(sys.argv.pop(1))\n"
                "from ddtreed.cli import main\nsys.exit(main(sys.argv[1:]))")


def start_daemon(config: Path, log_path: Path, interval_s: float) -> subprocess.Popen:
    """The real `ddtreed run`, JSON events to `log_path`."""
    out = open(log_path, "wb")
    launch = LAUNCH if abs(interval_s - MIN_READ_INTERVAL_S) < 1e-9 else LAUNCH_PACED
    return subprocess.Popen([sys.executable, "-c", launch, str(interval_s), "run", "--config", str(config),
                             "--log-format", "json"], stdout=out, stderr=subprocess.STDOUT,
                            cwd=CODE, start_new_session=True)


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="sampled per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lines-per-s", default="20,1000",
                        help="service decode lines per second, one condition each (comma-separated)")
    parser.add_argument("--min-read-interval-ms", type=float, default=MIN_READ_INTERVAL_S * 1000.0)
    args = parser.parse_args()
    for rate in (float(value) for value in args.lines_per_s.split(",")):
        load_before = load_info()
        samples = [one_run(rate, args.seconds, args.min_read_interval_ms) for _ in range(args.runs)]
        result = {"benchmark": "footprint",
                  "code_path": "the real `ddtreed run` process (psutil on its pid) serving "
                               "tests/programs/fast_service.py after the founding incident resolved",
                  "baseline": "the service process itself, same samples (cpu_percent_service)",
                  "runs": args.runs, "seconds_per_run": args.seconds, "lines_per_s_target": rate,
                  "min_read_interval_ms": args.min_read_interval_ms,
                  "flood_hold_ms": None if FLOOD_HOLD_S is None else max(FLOOD_HOLD_S * 1000.0,
                                                                         args.min_read_interval_ms),
                  "load_before": load_before}
        for key in ("rss_mb", "uss_mb", "cpu_percent", "wakeups_per_s", "cpu_us_per_wakeup",
                    "service_lines_per_s", "cpu_percent_service"):
            result[key] = spread([s[key] for s in samples], digits=2)
        result["threads"] = max(s["threads"] for s in samples)
        result["inotify"] = all(s["inotify"] for s in samples)
        result.update({"load_after": load_info(), "goal_rss_mb": 40, "goal_cpu_percent": 2})
        result["goal_met"] = result["rss_mb"]["max"] <= 40 and result["cpu_percent"]["median"] <= 2
        emit(result)


def one_run(rate: float, seconds: float, interval_ms: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="ddtreed-footprint-") as root:
        root = Path(root)
        config = fast_service.write_config(root, port=free_port(), extra_args=("--lines-per-s", str(rate)))
        log_path = root / "daemon.jsonl"
        daemon = start_daemon(config, log_path, interval_ms / 1000.0)
        try:
            if not wait_for(lambda: any(e["event"] == "incident_resolved" for e in events(log_path)), 90.0):
                raise SystemExit(f"the daemon did not get the service healthy; see {log_path}")
            result = sample(psutil.Process(daemon.pid), root / "logs" / "service.stdout.log", seconds)
            # Without inotify (limit reached) the follower polls every 0.25 s: cheaper, but slower to notice.
            result["inotify"] = not any(e["event"] == "log_watch_unavailable" for e in events(log_path))
        finally:
            stop_daemon(daemon)
    return result


def sample(process: psutil.Process, service_log: Path, seconds: float) -> dict:
    lines_before = count_lines(service_log)
    service = next((child for child in process.children(recursive=True)), None)
    service_before = service.cpu_times() if service else None
    cpu_before = process.cpu_times()
    switches_before = process.num_ctx_switches().voluntary
    threads_before = {t.id: t.user_time + t.system_time for t in process.threads()}
    started = time.monotonic()
    peak_rss = process.memory_info().rss
    while time.monotonic() - started < seconds:
        time.sleep(min(SAMPLE_EVERY_S, max(0.0, seconds - (time.monotonic() - started))))
        peak_rss = max(peak_rss, process.memory_info().rss)
    wall = time.monotonic() - started
    cpu_after = process.cpu_times()
    service_cpu = float("nan")
    if service is not None:
        try:
            after = service.cpu_times()
            service_cpu = (after.user - service_before.user) + (after.system - service_before.system)
        except psutil.Error:
            pass
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    switches = process.num_ctx_switches().voluntary - switches_before
    # The main thread runs the loop (and, since the follower reads inotify itself, the log wait).
    main_thread = next(t for t in process.threads() if t.id == process.pid)
    main_cpu = main_thread.user_time + main_thread.system_time - threads_before.get(process.pid, 0.0)
    memory = process.memory_full_info()
    lines = count_lines(service_log) - lines_before
    return {"benchmark": "footprint", "seconds": round(wall, 1), "rss_mb": round(peak_rss / 2**20, 1),
            "uss_mb": round(memory.uss / 2**20, 1), "cpu_percent": round(100.0 * cpu / wall, 2),
            "cpu_percent_main_thread": round(100.0 * main_cpu / wall, 2),
            "cpu_percent_other_threads": round(max(0.0, 100.0 * (cpu - main_cpu) / wall), 2),
            "cpu_percent_service": round(100.0 * service_cpu / wall, 2),
            "threads": process.num_threads(), "wakeups_per_s": round(switches / wall, 1),
            # what one wake-up costs, reads and all: the loop's CPU divided by its wake-ups
            "cpu_us_per_wakeup": round(1e6 * cpu / switches, 1) if switches else float("nan"),
            "service_lines": lines,
            "service_lines_per_s": round(lines / wall, 1)}


if __name__ == "__main__":
    main()
