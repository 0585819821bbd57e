"""Footprint of two `ddtreed run` daemons at once, candidate and baseline code, over the same seconds.

    python benchmarks/footprint_paired.py --against REV [--candidate REV] [--rounds 6] [--seconds 10]
                                          [--lines-per-s 1000]

`footprint.py` through `compare.py` runs one side, then the other: on a shared box the load moves
between those rounds, and with it what one wake-up costs (by 100 – 200 µs here), more than a change
moves it. This benchmark runs both sides together instead: each round starts the candidate's and
the baseline's real `ddtreed run` (started as the console script starts it, `footprint.LAUNCH`),
each supervising its own `tests/programs/fast_service.py` logging the same decode lines/s; once
both founding incidents are resolved, both daemon processes (not their services) are sampled with
psutil over the same wall-clock seconds: CPU % of a core (from the threads' schedstat, in ns;
psutil's 10 ms ticks beside it as `cpu_percent_ticks`), voluntary context switches per second
(wake-ups), CPU per wake-up, peak RSS. Rounds alternate which side starts first.

The baseline's files come from `git archive REV` (as `compare.py` exports them), so do the
candidate's with `--candidate REV` (otherwise this working tree); each daemon runs with its tree as
its working directory and first on PYTHONPATH, and reports the `ddtreed` package it imported
(`code_path`). The service program and this script are this checkout's for both sides.

Prints ONE JSON object: per side min / median / max over the rounds and each round's figure; the
per-round difference candidate − baseline and its min / median / max; the load before and after
and at the end of every round. Progress per round goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from _common import REPO, emit, events, load_info, spread, stop_daemon, wait_for
from compare import export
from footprint import LAUNCH, count_lines

import fast_service  # noqa: E402  (tests/programs, put on sys.path by _common)
from ddtreed.demo import free_port  # noqa: E402

SIDES = ("candidate", "baseline")
SAMPLE_EVERY_S = 0.5
# LAUNCH with the imported package's file said first on stderr: which code this daemon runs.
LAUNCH_SAYING = ("import sys, ddtreed; sys.stderr.write('ddtreed_imported_from ' + ddtreed.__file__ + '\\n'); "
                 "sys.stderr.flush()\n" + LAUNCH)
FIGURES = ("cpu_percent", "cpu_percent_ticks", "cpu_us_per_wakeup", "wakeups_per_s", "rss_mb", "uss_mb",
           "service_lines_per_s", "cpu_percent_service")
DIFFERENCES = ("cpu_percent", "cpu_us_per_wakeup", "wakeups_per_s", "rss_mb")


def start(code: Path, config: Path, log_path: Path) -> subprocess.Popen:
    """The real `ddtreed run` of the tree `code`, JSON events (and the import line) to `log_path`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.pop("DDTREED_BENCH_TREE", None)
    return subprocess.Popen([sys.executable, "-c", LAUNCH_SAYING, "x", "run", "--config", str(config),
                             "--log-format", "json"], stdout=open(log_path, "wb"), stderr=subprocess.STDOUT,
                            cwd=code, start_new_session=True, env=env)


def imported_from(log_path: Path) -> str | None:
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("ddtreed_imported_from "):
            return line.split(" ", 1)[1]
    return None


def cpu_ns(pid: int) -> int | None:
    """The process's CPU time in ns, its threads' `sum_exec_runtime` (/proc/PID/task/*/schedstat):
    psutil's cpu_times count 10 ms clock ticks, 20 µs of a wake-up over 10 s at 1,000 lines/s."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


class Watched:
    """One side's daemon, its service and its counters at the start of the sampled seconds."""

    def __init__(self, daemon: subprocess.Popen, service_log: Path):
        self.process = psutil.Process(daemon.pid)
        self.service_log = service_log
        self.service = next(iter(self.process.children(recursive=True)), None)

    def begin(self) -> None:
        self.lines = count_lines(self.service_log)
        self.cpu = self.process.cpu_times()
        self.cpu_ns = cpu_ns(self.process.pid)
        self.switches = self.process.num_ctx_switches().voluntary
        self.service_cpu = self.service.cpu_times() if self.service else None
        self.peak_rss = self.process.memory_info().rss

    def poll(self) -> None:
        self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)

    def end(self, wall: float) -> dict:
        cpu_now, switches_now = self.process.cpu_times(), self.process.num_ctx_switches().voluntary
        ns_now = cpu_ns(self.process.pid)
        ticks = (cpu_now.user - self.cpu.user) + (cpu_now.system - self.cpu.system)
        cpu = ticks if ns_now is None or self.cpu_ns is None else (ns_now - self.cpu_ns) / 1e9
        switches = switches_now - self.switches
        service_cpu = float("nan")
        if self.service is not None and self.service_cpu is not None:
            try:
                after = self.service.cpu_times()
                service_cpu = (after.user - self.service_cpu.user) + (after.system - self.service_cpu.system)
            except psutil.Error:
                pass
        lines = count_lines(self.service_log) - self.lines
        return {"cpu_percent": round(100.0 * cpu / wall, 2), "cpu_percent_ticks": round(100.0 * ticks / wall, 2),
                "cpu_clock": "schedstat ns" if ns_now is not None and self.cpu_ns is not None else "psutil ticks",
                "cpu_us_per_wakeup": round(1e6 * cpu / switches, 1) if switches else float("nan"),
                "wakeups_per_s": round(switches / wall, 1), "rss_mb": round(self.peak_rss / 2**20, 1),
                "uss_mb": round(self.process.memory_full_info().uss / 2**20, 1),
                "service_lines_per_s": round(lines / wall, 1),
                "cpu_percent_service": round(100.0 * service_cpu / wall, 2)}


def one_round(codes: dict[str, Path], order: tuple[str, ...], rate: float, seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="ddtreed-footprint-paired-") as root:
        root = Path(root)
        daemons: dict[str, tuple[subprocess.Popen, Path, Path]] = {}
        try:
            for side in order:
                directory = root / side
                directory.mkdir()
                config = fast_service.write_config(directory, port=free_port(),
                                                   extra_args=("--lines-per-s", str(rate)))
                log_path = directory / "daemon.jsonl"
                daemons[side] = (start(codes[side], config, log_path), log_path, directory)
            for side, (_, log_path, _) in daemons.items():
                if not wait_for(lambda path=log_path: any(e["event"] == "incident_resolved" for e in events(path)),
                                120.0):
                    raise SystemExit(f"{side}: the daemon did not get the service healthy; see {log_path}")
            time.sleep(1.0)  # past the resolution's own work, as footprint.py samples
            watched = {side: Watched(daemon, directory / "logs" / "service.stdout.log")
                       for side, (daemon, _, directory) in daemons.items()}
            for side in order:
                watched[side].begin()
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                time.sleep(min(SAMPLE_EVERY_S, max(0.0, seconds - (time.monotonic() - started))))
                for side in order:
                    watched[side].poll()
            wall = time.monotonic() - started
            result = {side: watched[side].end(wall) for side in order}
            for side, (_, log_path, _) in daemons.items():
                found = imported_from(log_path)
                # the tree's own package (a temporary export: said as the tree, not its path)?
                inside = found is not None and Path(found).resolve().is_relative_to(codes[side])
                result[side]["imported_from"] = f"{side} tree: ddtreed/__init__.py" if inside else found
                result[side]["inotify"] = not any(e["event"] == "log_watch_unavailable" for e in events(log_path))
            result["seconds"] = round(wall, 2)
            return result
        finally:
            for daemon, _, _ in daemons.values():
                stop_daemon(daemon)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", required=True, help="the baseline commit (any git revision)")
    parser.add_argument("--candidate", default=None, help="the commit measured (default: this working tree)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=10.0, help="sampled per round, both sides at once")
    parser.add_argument("--lines-per-s", type=float, default=1000.0, help="each service's decode lines per second")
    args = parser.parse_args()
    load_before, started = load_info(), time.monotonic()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "ddtreed"],
                                capture_output=True, text=True).stdout.strip())
    revisions = {"candidate": f"{head}{' + uncommitted changes' if dirty else ''}"}
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ddtreed-baseline-") as baseline_tree, \
            tempfile.TemporaryDirectory(prefix="ddtreed-candidate-") as candidate_tree:
        revisions["baseline"] = export(args.against, Path(baseline_tree))
        codes = {"candidate": REPO, "baseline": Path(baseline_tree).resolve()}
        if args.candidate:
            revisions["candidate"] = export(args.candidate, Path(candidate_tree))
            codes["candidate"] = Path(candidate_tree).resolve()
        for index in range(args.rounds):
            order = SIDES if index % 2 == 0 else SIDES[::-1]
            record = one_round(codes, order, args.lines_per_s, args.seconds)
            record.update(round=index, started_first=order[0], load=load_info())
            rounds.append(record)
            print(json.dumps(record), file=sys.stderr, flush=True)
    result: dict = {
        "benchmark": "footprint_paired",
        "code_path": "the real `ddtreed run` process of each tree (psutil on its pid; LAUNCH of footprint.py), "
                     "each serving its own tests/programs/fast_service.py after the founding incident "
                     "resolved; both sides sampled over the same seconds",
        "candidate_rev": revisions["candidate"], "baseline_rev": revisions["baseline"],
        "imported_from": {side: sorted({r[side]["imported_from"] or "?" for r in rounds}) for side in SIDES},
        "rounds": args.rounds, "seconds_per_round": args.seconds, "lines_per_s_target": args.lines_per_s,
        "load_before": load_before}
    for side in SIDES:
        result[side] = {key: dict(spread([r[side][key] for r in rounds], digits=2),
                                  per_round=[r[side][key] for r in rounds]) for key in FIGURES}
        result[side]["inotify"] = all(r[side]["inotify"] for r in rounds)
        result[side]["cpu_clock"] = sorted({r[side]["cpu_clock"] for r in rounds})
    result["difference"] = {}
    for key in DIFFERENCES:
        per_round = [round(r["candidate"][key] - r["baseline"][key], 2) for r in rounds]
        result["difference"][key] = dict(spread(per_round, digits=2), per_round=per_round)
    result["difference"]["is"] = "candidate − baseline, per round (same seconds)"
    result["started_first"] = [r["started_first"] for r in rounds]
    result["round_loads"] = [r["load"]["loadavg_1m"] for r in rounds]
    result.update(load_after=load_info(), wall_s=round(time.monotonic() - started, 1), goal_cpu_percent=2)
    result["goal_met"] = {side: result[side]["cpu_percent"]["median"] <= 2 for side in SIDES}
    emit(result)


if __name__ == "__main__":
    main()
