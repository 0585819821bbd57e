"""Detection latency through the real daemon: from a rank's last traceback write to the incident row.

Code path timed: the real `ddtreed.loop.daemon.Daemon` (built from a real config by `wiring.build`, its
`run()` loop in a thread of this process) supervising a real service process
(benchmarks/bench_service.py) that logs SGLang decode lines at `--lines-per-s` (default 20) and
serves HTTP. On cue (SIGUSR2) the service writes the founding traceback of its two TP ranks (the
last exception line in a second write), stamps the time that write returned and dies (SIGKILL, as
SGLang's launcher ends the tree after a rank's traceback). The daemon does
what it always does: `ServiceRun.pump(0.2)` (follower, assembler, milestones) → `observed`
(crash text from a live service waits for its exit) → `handle_crash`: the first write for the
crash: `DurableStore.open_incident` for a new incident, `record_recurrence` for the next crash of
an incident still open (policy `off` leaves it open, so within `restart_window_s` every other cue
is one) → `RuleSet.diagnose` and, for a new incident, `set_diagnosis` → `DurableStore.make_durable`.
(Since session 15 the ranks' one signature is recorded before the rules run; up to 111ddf0 the
diagnosis came first, and was usually already made during the exit wait.)

Two points are timed, and printed apart so that neither is read for the other:
- `detect_*`: the row COMMITTED. Since session 7 that commit is WAL `synchronous=NORMAL` (no
  fsync): the row survives a crash or kill of the daemon, not a power cut. Up to 3c1ac62 the same
  call committed at FULL, so there it is also the durable point.
- `durable_*`: `make_durable()` returned (one fdatasync of the -wal): the row survives a power cut.
  The daemon signals, stops or restarts nothing and publishes nothing before this point. On code
  without `make_durable` (up to 3c1ac62) it is the commit itself (FULL).
The only addition is a probe around those calls that notes when they returned (and around
`handle_crash`, to know which crash a write is for). Every event is timed: on code that
records a recurrence only after the stop (up to de76d0a) those events include the stop. Then
the daemon records the exit and relaunches the service unchanged; the next cue follows once it
is `running` again, after a random 0–100 ms, so that the cue lands anywhere between two paced
reads of the background traffic.

Per condition (`idle`: no hogs of ours; `hogs`: two processes spinning on both cores) `--runs`
runs of `--events` events each; prints ONE JSON object with p50/p99/max per run and
min/median/max over the runs, split into read (write → the chunk read: the crash's
`detected_at`) and record (read → commit), and by kind (`_new`, `_recurrence`). The same-run
baseline is a bare `Follower` waiting on the same file with pacing off (`min_read_interval_s=0`)
in this process: write → read only. Beside it, the disk's own floor under any durable commit:
an 8 KiB append and `fdatasync` in the same directory (`fsync_floor_*`). `--restart-window-s
0.001` makes every cue a new incident (the `open_incident` path alone).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import CpuHogs, emit, load_info, percentile, quiet_logs, spread

import fast_service  # noqa: E402  (tests/programs, on sys.path through _common)
from ddtreed.config import load  # noqa: E402
from ddtreed.loop.daemon import Daemon  # noqa: E402
from ddtreed.demo import free_port  # noqa: E402

SERVICE = Path(__file__).resolve().parent / "bench_service.py"
GOALS_MS = {"idle": 5.0, "hogs": 25.0}
DAEMON_NICE = 0  # --daemon-nice: what a raised priority of the daemon would buy (needs CAP_SYS_NICE)
BREAKDOWN: list[dict] = []  # per timed event of the condition under way: where its record part went


def summarise_breakdown(rows: list[dict], prefix: str) -> dict:
    """p50 / p99 of each phase over the events; the daemon's first crash (a fresh process: cold
    caches, RE2 automata not yet built) apart, since a 20-event run's p99 is about its maximum."""
    out: dict = {}
    for subset, label in (([r for r in rows if not r["first"]], "later"), ([r for r in rows if r["first"]], "first")):
        for key in sorted({k for r in subset for k in r if k != "first"}):
            values = [r[key] for r in subset if key in r]
            out[f"phase_{key}_{prefix}_{label}"] = {"p50": round(percentile(values, 0.5), 3),
                                                   "p99": round(percentile(values, 0.99), 3)}
    return out


def write_config(directory: Path, lines_per_s: float, restart_window_s: float = 1.0) -> Path:
    port = free_port()
    marks = directory / "service-events.txt"
    base = load(fast_service.write_config(directory, port=port))
    argv = [base.service.argv[0], str(SERVICE), *base.service.argv[2:],
            "--lines-per-s", str(lines_per_s), "--events", str(marks)]
    return fast_service.write_config(directory, port=port, service={"argv": argv},
                                     policy={"mode": "off", "max_restarts": 100000,
                                             "restart_window_s": restart_window_s})


class Probe:
    """When the daemon's first durable write for a crash returned: `store.open_incident` for a new
    incident, `store.record_recurrence` for the next crash of a still-open one (a crash loop's;
    with policy `off` every other cue is one). `handle_crash` is wrapped only to know which crash
    group the write is for (its earliest `detected_at`); a group that is not the cue's founding
    traceback (e.g. a probe that timed out on a loaded box) is reported apart."""

    def __init__(self, daemon: Daemon):
        self.commits: list[tuple[float, float, str]] = []  # (committed, earliest detected_at, kind)
        self.durable: list[float] = []  # when the commit of the same index was made durable
        self.syncs = getattr(daemon.store, "make_durable", None) is not None  # else: FULL commits
        self.event = threading.Event()
        self.others: list[dict] = []
        self.pending: tuple | None = None  # the crash group handle_crash is on, until its first write
        import ddtreed.loop.daemon as daemon_module

        handle_crash = daemon_module.handle_crash

        def handle(loop, crashes, *args, **kwargs):
            self.pending = tuple(crashes)
            self.phases = {"entered": time.time()}
            try:
                return handle_crash(loop, crashes, *args, **kwargs)
            finally:
                self.pending = None

        daemon_module.handle_crash = handle
        self._restore = lambda: setattr(daemon_module, "handle_crash", handle_crash)
        for name, kind in (("open_incident", "new"), ("record_recurrence", "recurrence")):
            self._wrap(daemon.store, name, kind)
        if self.syncs:
            self._wrap_sync(daemon.store)
        # Where the record part goes (wall and this thread's CPU of each call on the crash path
        # before the durable write): the diagnosis, the recurrence lookup (a read transaction).
        self.phases: dict[str, float] = {}
        self.breakdown: list[dict] = []  # one per timed event, aligned with commits
        rules = daemon.rules
        self._timed(rules, "diagnose", "diagnose")
        self._timed(daemon.store, "open_incident_for", "lookup")

    def _timed(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                if self.pending is not None and label not in self.phases:  # the first call per crash
                    self.phases[f"{label}_ms"] = (time.perf_counter() - wall) * 1000
                    self.phases[f"{label}_cpu_ms"] = (time.thread_time() - cpu) * 1000

        setattr(owner, name, timed)

    def _wrap(self, store, name: str, kind: str) -> None:
        original = getattr(store, name)

        def write(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            result = original(*args, **kwargs)
            if self.pending is not None:
                self.phases["write_ms"] = (time.perf_counter() - wall) * 1000
                self.phases["write_cpu_ms"] = (time.thread_time() - cpu) * 1000
            crashes, self.pending = self.pending, None
            if crashes is None:  # not the first write for a crash group
                return result
            if any(c.kind == "traceback" for c in crashes):  # the cue's founding traceback
                detected = min((c.detected_at for c in crashes if c.detected_at), default=float("nan"))
                self.commits.append((time.time(), detected, kind))
                phases = {k: round(v, 3) for k, v in self.phases.items() if k != "entered"}
                phases["pump_to_handle_ms"] = round((self.phases.get("entered", detected) - detected) * 1000, 3)
                self.breakdown.append(phases)
                if self.syncs:
                    self.awaiting = len(self.commits) - 1  # its make_durable() comes next
                else:
                    self.durable.append(self.commits[-1][0])
                    self.event.set()
            else:
                self.others.append({"kind": crashes[0].kind, "message": crashes[0].message[:200], "write": name})
            return result

        setattr(store, name, write)

    def _wrap_sync(self, store) -> None:
        original = store.make_durable
        self.awaiting: int | None = None

        def make_durable(*args, **kwargs):
            wall = time.perf_counter()
            result = original(*args, **kwargs)
            if self.awaiting is not None and self.awaiting == len(self.durable):
                self.durable.append(time.time())
                self.breakdown[self.awaiting]["sync_ms"] = round((time.perf_counter() - wall) * 1000, 3)
                self.awaiting = None
                self.event.set()
            return result

        store.make_durable = make_durable

    def close(self) -> None:
        self._restore()


def crash_stamps(path: Path) -> list[float]:
    if not path.exists():
        return []
    return [float(line.split()[1]) for line in path.read_text().splitlines() if line.startswith("crash ")]


def measure(directory: Path, events: int, lines_per_s: float,
            misses: list[dict], restart_window_s: float = 1.0) -> list[tuple[float, float, float, str, float]]:
    """(total, read, record, kind) in seconds per event, through one daemon life."""
    config = load(write_config(directory, lines_per_s, restart_window_s))
    marks = directory / "service-events.txt"
    daemon = Daemon(config)
    probe = Probe(daemon)
    def run() -> None:
        if DAEMON_NICE:  # this thread only (Linux nice is per thread); the service it forks inherits it
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), DAEMON_NICE)
        daemon.run()

    thread = threading.Thread(target=run, name="daemon", daemon=True)
    thread.start()
    samples = []
    try:
        for index in range(events):
            deadline = time.monotonic() + 60
            while daemon.lifecycle.state != "running" or daemon.service is None or daemon.service.pid is None:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise SystemExit(f"daemon not running (state {daemon.lifecycle.state}); see {directory}")
                time.sleep(0.01)
            time.sleep(random.uniform(0.0, 0.1))
            probe.event.clear()
            before = len(probe.commits)
            stamps_before = len(crash_stamps(marks))  # before the cue: the service may stamp at once
            os.kill(daemon.service.pid, signal.SIGUSR2)
            if not probe.event.wait(30):
                # Reported, not hidden: the JSON counts misses; the daemon's view goes to stderr.
                misses.append({"event": index, "state": daemon.lifecycle.state,
                               "states": daemon.lifecycle.history[-6:],
                               "crash_written": len(crash_stamps(marks)) > stamps_before})
                print(f"detection_latency: no incident for event {index}: {misses[-1]}", file=sys.stderr)
                continue
            committed, detected, kind = probe.commits[before]
            durable = probe.durable[before]
            stamp_deadline = time.monotonic() + 10
            while len(crash_stamps(marks)) <= stamps_before and time.monotonic() < stamp_deadline:
                time.sleep(0.005)
            if len(crash_stamps(marks)) <= stamps_before:
                misses.append({"event": index, "reason": "incident without the service's crash stamp"})
                continue
            written = crash_stamps(marks)[stamps_before]
            samples.append((committed - written, detected - written, committed - detected, kind,
                            durable - written))
    finally:
        daemon.request_stop()
        thread.join(30)
        probe.close()
        misses += [{"other_incident": other} for other in probe.others]
        BREAKDOWN.extend(dict(phases, first=index == 0) for index, phases in enumerate(probe.breakdown))
    return samples


def baseline(directory: Path, events: int) -> list[float]:
    """A bare Follower, pacing off, on a file another process writes: write → read returned."""
    import subprocess

    from ddtreed.logs import Follower

    path = directory / "bare.log"
    path.write_bytes(b"")
    writer = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
        "for _ in sys.stdin:\n"
        "    os.write(fd, b'[2026-12-01 08:00:00 TP0] Scheduler hit an exception: '\n"
        "                 b'Traceback (most recent call last):\\n')\n"
        "    print(f'{time.time():.6f}', flush=True)\n"), str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    follower = Follower([str(path)], min_read_interval_s=0)
    values = []
    try:
        for _ in range(events):
            writer.stdin.write("go\n")
            writer.stdin.flush()
            while not follower.read():
                follower.wait(0.2)
            read_at = time.time()
            values.append(read_at - float(writer.stdout.readline()))
    finally:
        writer.stdin.close()
        writer.wait(10)
        follower.close()
    return values


def fsync_floor(directory: Path, events: int) -> list[float]:
    """What one durable append costs on this disk, in the run's own directory: an 8 KiB write at
    the end of a file, then `fdatasync` (the WAL commit of a new incident is one of these)."""
    path = directory / "fsync-floor.bin"
    descriptor = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    block, values = os.urandom(8192), []
    try:
        for _ in range(events):
            os.write(descriptor, block)
            started = time.perf_counter()
            os.fdatasync(descriptor)
            values.append(time.perf_counter() - started)
    finally:
        os.close(descriptor)
        path.unlink()
    return values


def summarise(runs: list[list[tuple[float, float, float, str, float]]], prefix: str) -> dict:
    out: dict = {}
    for index, part in ((0, "detect"), (1, "read"), (2, "record"), (4, "durable")):
        per_run = [[sample[index] * 1000 for sample in run] for run in runs]
        for label, fraction in (("p50", 0.5), ("p99", 0.99)):
            values = [percentile(run, fraction) for run in per_run]
            out[f"{part}_{label}_ms_{prefix}"] = spread(values, digits=3)
            out[f"{part}_{label}_ms_{prefix}_per_run"] = [round(v, 3) for v in values]
        out[f"{part}_max_ms_{prefix}"] = round(max(max(run) for run in per_run), 3)
    for kind in ("new", "recurrence"):  # a new incident's row / a crash loop's `recurred` step
        per_run = [[sample[0] * 1000 for sample in run if sample[3] == kind] for run in runs]
        out[f"events_{kind}_{prefix}"] = sum(len(run) for run in per_run)
        if all(per_run):
            for label, fraction in (("p50", 0.5), ("p99", 0.99)):
                out[f"detect_{label}_ms_{prefix}_{kind}"] = spread(
                    [percentile(run, fraction) for run in per_run], digits=3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=60, help="events per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--lines-per-s", type=float, default=20.0, help="background decode lines")
    parser.add_argument("--conditions", default="idle,hogs")
    parser.add_argument("--restart-window-s", type=float, default=1.0,
                        help="the policy's restart window: a cue within it of the last one is a recurrence "
                             "(0.001: every cue a new incident)")
    parser.add_argument("--daemon-nice", type=int, default=0,
                        help="nice of the daemon's thread (negative needs CAP_SYS_NICE; the service inherits it)")
    args = parser.parse_args()
    global DAEMON_NICE
    DAEMON_NICE = args.daemon_nice
    quiet_logs(50)
    result: dict = {"benchmark": "detection_latency",
                    "code_path": "Daemon.run in-process (ServiceRun.pump(0.2) -> handle_crash -> "
                                 "DurableStore.open_incident, or record_recurrence for a crash loop's "
                                 "next crash -> DurableStore.make_durable), real service process, probe on them",
                    "measures": {
                        "detect": "the crash's last traceback write -> the incident row COMMITTED "
                                  "(WAL synchronous=NORMAL where the code has make_durable: survives a "
                                  "kill of the daemon, not a power cut; FULL on older code)",
                        "durable": "-> make_durable() returned (fdatasync of the -wal: survives a power "
                                   "cut; nothing is done to the service or published before it); on "
                                   "code without make_durable, the FULL commit itself",
                        "read": "write -> the chunk read (the crash's detected_at)",
                        "record": "the chunk read -> the row committed"},
                    "baseline": "bare Follower(min_read_interval_s=0) on a file another process writes: "
                                "write -> read",
                    "events_per_run": args.events, "runs": args.runs,
                    "background_lines_per_s": args.lines_per_s, "hogs": args.hogs,
                    "restart_window_s": args.restart_window_s, "daemon_nice": args.daemon_nice,
                    "fsync_floor": "8 KiB append + fdatasync in the run's directory, same run"}
    with tempfile.TemporaryDirectory(prefix="ddtreed-detect-") as root:
        root = Path(root)
        for condition in args.conditions.split(","):
            load_before = load_info()
            with CpuHogs(args.hogs if condition == "hogs" else 0):
                runs, misses = [], []
                for run in range(args.runs):
                    directory = root / f"{condition}-{run}"
                    directory.mkdir()
                    runs.append(measure(directory, args.events, args.lines_per_s, misses, args.restart_window_s))
                bare = baseline(root / f"{condition}-0", args.events)
                floor = fsync_floor(root / f"{condition}-0", max(args.events, 50))
            result.update(summarise(runs, condition))
            result.update(summarise_breakdown(BREAKDOWN, condition))
            BREAKDOWN.clear()
            result[f"missed_events_{condition}"] = misses
            result[f"baseline_read_p50_ms_{condition}"] = round(percentile([v * 1000 for v in bare], 0.5), 3)
            result[f"baseline_read_p99_ms_{condition}"] = round(percentile([v * 1000 for v in bare], 0.99), 3)
            result[f"fsync_floor_p50_ms_{condition}"] = round(percentile([v * 1000 for v in floor], 0.5), 3)
            result[f"fsync_floor_p99_ms_{condition}"] = round(percentile([v * 1000 for v in floor], 0.99), 3)
            result[f"load_{condition}"] = {"before": load_before, "after": load_info()}
            goal = GOALS_MS.get(condition)
            if goal is not None:
                result[f"goal_p99_ms_{condition}"] = goal
                result[f"goal_met_{condition}"] = result[f"detect_p99_ms_{condition}"]["median"] <= goal
                result[f"goal_met_durable_{condition}"] = result[f"durable_p99_ms_{condition}"]["median"] <= goal
    emit(result)


if __name__ == "__main__":
    main()
