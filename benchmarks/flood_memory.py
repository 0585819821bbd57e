"""Peak memory of the real `ddtreed run` when 100,000 tracebacks land in its service's log at once,
and how long a SIGTERM sent during that flood takes to end the daemon.

The service (tests/programs/fast_service.py, serving) is supervised; the flood is appended to its
stderr log in one write burst, as a crash-looping scheduler with many ranks would. The daemon's
peak RSS is its kernel high-water mark (VmHWM in /proc/PID/status), so no short peak is missed;
the same-run baseline is its RSS just before the flood. A second daemon gets the flood and a
SIGTERM `--term-after-s` later (each delay
hits another phase: reading, diagnosing, stopping the service, draining, relaunching). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path

from _common import emit, events, start_daemon, stop_daemon, wait_for

import fast_service  # noqa: E402  (tests/programs, put on sys.path by _common)
from ddtreed.demo import free_port  # noqa: E402
from ddtreed.ops.status import read_status  # noqa: E402

MB = 1024 * 1024


def traceback_text(index: int, frames: int) -> str:
    lines = ["Traceback (most recent call last):"]
    for depth in range(frames):
        lines += [f'  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/m{depth}.py", '
                  f"line {100 + depth}, in step_{depth}", f"    result = self.step_{depth + 1}(batch)"]
    lines.append(f"RuntimeError: flood {index}: The size of tensor a (8) must match the size of tensor b (33)")
    return "\n".join(lines) + "\n"


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def serving_daemon(directory: Path):
    config = fast_service.write_config(directory, port=free_port(), extra_args=("--disable-cuda-graph",))
    log_path = directory / "daemon.jsonl"
    daemon = start_daemon(config, log_path)
    state_dir = directory / "state"

    def running() -> bool:
        status = read_status(state_dir)
        return status is not None and status.pid == daemon.pid and status.state == "running"

    if not wait_for(running, 120):
        stop_daemon(daemon)
        raise SystemExit(f"the daemon never served: {log_path.read_text()[-2000:]}")
    return daemon, directory / "logs" / "service.stderr.log", log_path


def write_flood(path: Path, count: int, frames: int) -> int:
    written = 0
    with open(path, "a") as handle:
        batch = []
        for index in range(count):
            batch.append(traceback_text(index, frames))
            if len(batch) == 1000:
                written += handle.write("".join(batch))
                batch = []
        written += handle.write("".join(batch))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tracebacks", type=int, default=100_000)
    parser.add_argument("--frames", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=60.0, help="longest wait for the flood to be handled")
    parser.add_argument("--term-after-s", default="0.5,1,2,4",
                        help="SIGTERM this long after the flood was written (one fresh daemon each)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ddtreed-flood-"))

    daemon, stderr_log, log_path = serving_daemon(root / "memory")
    try:
        baseline_kb = status_kb(daemon.pid, "VmRSS")
        started = time.monotonic()
        flood_bytes = write_flood(stderr_log, args.tracebacks, args.frames)
        wait_for(lambda: any(e.get("event") == "incident_opened" for e in events(log_path)), args.settle_s, 0.2)
        handled_s = time.monotonic() - started
        time.sleep(2.0)  # the relaunch after the incident, so its memory counts too
        peak_kb = status_kb(daemon.pid, "VmHWM")
        after_kb = status_kb(daemon.pid, "VmRSS")
    finally:
        stop_daemon(daemon)
    opened = [e for e in events(log_path) if e.get("event") == "incident_opened"]

    term_s = {}
    for point in [float(value) for value in args.term_after_s.split(",")]:
        daemon, stderr_log, _ = serving_daemon(root / f"sigterm-{point}")
        try:
            write_flood(stderr_log, args.tracebacks, args.frames)
            time.sleep(point)
            sent = time.monotonic()
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(120)
            except Exception:  # noqa: BLE001  (a hung daemon is a result: the time says it)
                pass
            term_s[str(point)] = round(time.monotonic() - sent, 2)
        finally:
            stop_daemon(daemon)
    emit({
        "benchmark": "flood_memory", "tracebacks": args.tracebacks, "frames": args.frames,
        "flood_mb": round(flood_bytes / MB, 1),
        "baseline_rss_mb": round(baseline_kb / 1024, 1), "peak_rss_mb": round(peak_kb / 1024, 1),
        "peak_over_baseline_mb": round((peak_kb - baseline_kb) / 1024, 1),
        "rss_after_mb": round(after_kb / 1024, 1), "incidents_opened": len(opened),
        "flood_handled_s": round(handled_s, 2),
        "sigterm_to_exit_s_by_delay": term_s, "sigterm_to_exit_s_max": max(term_s.values()),
        "goal": {"peak_rss_mb": 60, "sigterm_to_exit_s_max": 2.0},
    })


if __name__ == "__main__":
    main()
