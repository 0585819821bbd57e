"""The read part of detection alone: the daemon's own Follower with 20 decode lines/s around a crash.

Code path timed: `LocalHost().open_follower([path])` (the follower the daemon reads service logs
with, its default pacing), waited on and read the way `ServiceRun.pump(0.2)` does
(`wait(0.2)`, then `read()`), on a file a second process appends to: decode progress lines at
`--lines-per-s` (default 20), and on cue a crash's traceback header line. Measured: from the
return of the crash write to the return of the read that holds it, and the follower's own count
of reads and hold-offs. Same-run baseline: the same, with a `Follower(min_read_interval_s=0)`
(no pacing at all). The SQLite commit and the diagnosis are left out on purpose: on a shared box
they swamp this part (detection_latency.py times the whole path). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import emit, load_info, percentile, quiet_logs, spread

from ddtreed.service.host import LocalHost  # noqa: E402
from ddtreed.logs import Follower  # noqa: E402

WRITER = (
    "import os, sys, threading, time\n"
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
    "period = 1.0 / float(sys.argv[2])\n"
    "lock = threading.Lock()\n"
    "def background():\n"
    "    while True:\n"
    "        with lock:\n"
    "            os.write(fd, b'[2026-12-01 08:00:00 TP0] Decode batch, #running-req: 4, #token: 977, '\n"
    "                         b'accept len: 3.10, cuda graph: True, gen throughput (token/s): 812.40\\n')\n"
    "        time.sleep(period)\n"
    "threading.Thread(target=background, daemon=True).start()\n"
    "for _ in sys.stdin:\n"
    "    with lock:\n"
    "        os.write(fd, b'[2026-12-01 08:00:00 TP0] Scheduler hit an exception: '\n"
    "                     b'Traceback (most recent call last):\\n')\n"
    "        print(f'{time.time():.6f}', flush=True)\n"
)


def measure(follower, path: Path, events: int, lines_per_s: float) -> tuple[list[float], int, int]:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(lines_per_s)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    values = []
    try:
        for _ in range(events):
            settle_until = time.monotonic() + random.uniform(0.2, 0.4)  # the cue lands anywhere in the traffic
            while time.monotonic() < settle_until:
                follower.wait(0.2)
                follower.read()
            writer.stdin.write("go\n")
            writer.stdin.flush()
            while True:
                follower.wait(0.2)
                chunks = follower.read()
                if any("Traceback" in line for chunk in chunks for line in chunk.lines):
                    break
            read_at = time.time()
            values.append(read_at - float(writer.stdout.readline()))
    finally:
        writer.kill()
        writer.wait(10)
    return values, getattr(follower, "reads", -1), getattr(follower, "holds", -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lines-per-s", type=float, default=20.0)
    args = parser.parse_args()
    quiet_logs()
    result: dict = {"benchmark": "read_pacing", "events_per_run": args.events, "runs": args.runs,
                    "background_lines_per_s": args.lines_per_s,
                    "code_path": "LocalHost().open_follower (the daemon's Follower, default pacing): wait(0.2) "
                                 "+ read() as ServiceRun.pump, write -> read of a crash line",
                    "baseline": "Follower(min_read_interval_s=0), same file and writer, same run",
                    "load_before": load_info()}
    samples: dict[str, list[list[float]]] = {"daemon": [], "unpaced": []}
    holds: list[int] = []
    with tempfile.TemporaryDirectory(prefix="ddtreed-pacing-") as root:
        for run in range(args.runs):
            for name in ("daemon", "unpaced"):
                path = Path(root) / f"{name}-{run}.log"
                path.write_bytes(b"")
                follower = (LocalHost().open_follower([str(path)]) if name == "daemon"
                            else Follower([str(path)], min_read_interval_s=0))
                try:
                    values, _, held = measure(follower, path, args.events, args.lines_per_s)
                finally:
                    follower.close()
                samples[name].append([value * 1000 for value in values])
                if name == "daemon":
                    holds.append(held)
    for name, runs in samples.items():
        for label, fraction in (("p50", 0.5), ("p99", 0.99)):
            result[f"{name}_read_{label}_ms"] = spread([percentile(run, fraction) for run in runs], digits=3)
        result[f"{name}_read_max_ms"] = round(max(max(run) for run in runs), 3)
    result["daemon_holds_per_run"] = holds  # -1: a follower without the counter (older code)
    result["load_after"] = load_info()
    emit(result)


if __name__ == "__main__":
    main()
