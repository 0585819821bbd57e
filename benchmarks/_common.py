"""Shared by the latency and footprint benchmarks: paths, percentiles, CPU hogs, a daemon runner."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "tests" / "programs"
# The ddtreed code a benchmark times: this checkout, or (benchmarks/compare.py) an older commit's
# files, so that one invocation measures the change and its baseline with the same script.
TREE_VARIABLE = "DDTREED_BENCH_TREE"
CODE = Path(os.environ.get(TREE_VARIABLE) or REPO).resolve()
for _path in (str(REPO), str(PROGRAMS), str(CODE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)


def quiet_logs(level: int = 40) -> None:
    """Only errors (level 40; 50: none of the daemon's `incident_opened` either) from the
    library's structlog events: the benchmark prints one JSON object."""
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))


def inotify_instances(pid: int | str = "self") -> int:
    """inotify instances a process holds (the per-user limit is fs.inotify.max_user_instances)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd) == "anon_inode:inotify"
        except OSError:
            continue
    return count


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 1,000 samples is the 990th smallest)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, int(round(fraction * len(ordered) + 0.4999)))
    return ordered[min(rank, len(ordered)) - 1]


def summary_ms(values_s: list[float], prefix: str) -> dict[str, float]:
    ms = [value * 1000.0 for value in values_s]
    return {f"{prefix}_p50_ms": round(percentile(ms, 0.50), 3),
            f"{prefix}_p99_ms": round(percentile(ms, 0.99), 3),
            f"{prefix}_max_ms": round(max(ms), 3) if ms else float("nan")}


def _spin(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


class CpuHogs:
    """`count` processes that each keep one core 100% busy until `stop()`."""

    def __init__(self, count: int, seconds: float = 3600.0):
        self.processes = [multiprocessing.Process(target=_spin, args=(time.time() + seconds,), daemon=True)
                          for _ in range(count)]

    def __enter__(self) -> "CpuHogs":
        for process in self.processes:
            process.start()
        return self

    def __exit__(self, *exc_info) -> None:
        for process in self.processes:
            process.terminate()
            process.join(5)


def start_daemon(config: Path, log_path: Path) -> subprocess.Popen:
    """The real `ddtreed run`, JSON events to `log_path`."""
    out = open(log_path, "wb")
    return subprocess.Popen([sys.executable, "-m", "ddtreed", "run", "--config", str(config),
                             "--log-format", "json"], stdout=out, stderr=subprocess.STDOUT,
                            cwd=CODE, start_new_session=True)  # -m: the code of CODE first


def stop_daemon(process: subprocess.Popen, timeout: float = 20.0) -> int | None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait(5)


def events(log_path: Path) -> list[dict]:
    """The daemon's structured events (JSON lines), each with `at` = epoch seconds."""
    found = []
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        stamp = record.get("timestamp")
        if stamp:
            record["at"] = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        found.append(record)
    return found


def wait_for(condition, timeout: float, interval: float = 0.02):
    """Poll until `condition()` is truthy (returned), or None at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return None


def load_info() -> dict:
    """The box's load at this moment (other users of the 2 cores are not ours to stop)."""
    one, five, fifteen = os.getloadavg()
    return {"loadavg_1m": round(one, 2), "loadavg_5m": round(five, 2), "cpus": os.cpu_count()}


def spread(values: list[float], digits: int = 0) -> dict:
    """min / median / max of the runs (digits=0: integers)."""
    ordered = sorted(values)
    middle = ordered[len(ordered) // 2] if len(ordered) % 2 else \
        (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2

    def fix(value: float):
        return round(value) if digits == 0 else round(value, digits)

    return {"min": fix(ordered[0]), "median": fix(middle), "max": fix(ordered[-1])}


def emit(result: dict) -> None:
    print(json.dumps(result, sort_keys=False))
