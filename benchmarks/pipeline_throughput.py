"""Lines per second through the daemon's own path, `ServiceRun.pump`, on real-SGLang log mixes.

Code path timed: `ddtreed.service.service_run.ServiceRun.pump(0.2)` exactly as `Daemon._watch` calls it
(`on_turn`, `Follower.wait`, `Follower.read`, `Assembler(eager=True).feed`, `MilestoneTracker.feed`,
`Assembler.take`), on a `ServiceRun` built from a real config, following the service's log path
(`<log_dir>/service.stdout.log`, opened through `LocalHost.open_follower` as `ServiceRun.start`
does) that already holds the whole mix: the catch-up of a backlog, which is the daemon's fastest
case. No process is spawned (nothing else of `start()` is timed). Every crash group `pump` returns
then goes through `RuleSet.diagnose` (shipped rules, signature inside), timed apart.

Then the same file again through a second `ServiceRun` with the serving watch attached, as
`Daemon._watch` does once the launch is verified (`health.serving.watch_service`: every chunk also
goes to `ServingWatch.feed`, which reads each decode line): the daemon's path while it serves,
`serving_lines_per_s`. The first pass is its path before verification (startup, a backlog).

Baseline in the same process, right after each run: a plain `for line in f` loop (text mode)
with the same needles (the assembler's `TAGGED_NEEDLES`, the milestone needles, and the untagged
check `line[0] != "[" or not line[1].isdigit()`). drain3's `TemplateMiner` is a second baseline
(first `--drain3-lines` lines, once per mix).

Each mix (benchmarks/mixes.py: typical, noisy, worst) is measured `--runs` times, each run in a
fresh child process (its own peak RSS); prints ONE JSON object per mix.
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

from _common import REPO, emit, load_info, quiet_logs, spread

import mixes

GOALS = {"typical": 2_000_000, "noisy": 1_000_000, "worst": 200_000}
DEFAULT_LINES = {"typical": 2_000_000, "noisy": 1_000_000, "worst": 500_000}
PUMP_TIMEOUT_S = 0.2  # Daemon._watch: self.service.pump(TURN_S)


class CountingFeed:
    """The follower `ServiceRun.start` opens, counting the lines its reads hand out: by the count a
    `BlockChunk` carries, so that counting does not split lines the daemon never splits."""

    def __init__(self, follower):
        self.follower, self.lines, self.reads = follower, 0, 0

    def read(self):
        chunks = self.follower.read()
        self.reads += 1
        for chunk in chunks:
            count = getattr(chunk, "line_count", None)
            self.lines += len(chunk.lines) if count is None else count
        return chunks

    def wait(self, timeout: float) -> bool:
        return self.follower.wait(timeout)

    def close(self) -> None:
        self.follower.close()


def service_run(directory: Path):
    """A ServiceRun from a real config; its follower on the service's stdout log path."""
    from ddtreed.clock import SystemClock
    from ddtreed.config import load
    from ddtreed.service.host import LocalHost
    from ddtreed.service.service_run import ServiceRun

    config_path = directory / "ddtreed.toml"
    config_path.write_text(f'[service]\nargv = ["{sys.executable}", "-c", "pass"]\n\n[paths]\n'
                           f'log_dir = "{directory / "logs"}"\nstate_dir = "{directory / "state"}"\n')
    config = load(config_path)
    host = LocalHost()
    run = ServiceRun(host, config, list(config.service.argv), {}, SystemClock())
    return run, host, run.supervisor.log_paths + list(config.paths.extra_logs)


SERVING_BASELINE = 3.0  # a learned accept length (the mixes' decode lines: 1.0-5.0): collapse checks on


def decode_reader() -> str:
    """"native" where ddtreed._fastscan read the decode lines, "python" where `re` did (older commits)."""
    from ddtreed.health import serving

    return serving.decode_reader() if hasattr(serving, "decode_reader") else "python"


def serving_pass(path: str, expected: int) -> tuple[int, float, float]:
    """The pump over the whole file with the serving watch attached: (lines, wall s, CPU s)."""
    from ddtreed.clock import SystemClock
    from ddtreed.health.serving import watch_service

    with tempfile.TemporaryDirectory(prefix="ddtreed-pump-") as directory:
        directory = Path(directory)
        run, host, log_paths = service_run(directory)
        os.makedirs(os.path.dirname(log_paths[0]), exist_ok=True)
        os.link(path, log_paths[0])
        for other in log_paths[1:]:
            Path(other).touch()
        watch_service(run, run.config.probe, None, baseline=SERVING_BASELINE, clock=SystemClock(),
                      on_ok=lambda: None)
        feed = CountingFeed(host.open_follower(log_paths))
        run.follower = feed
        started, cpu_started = time.perf_counter(), time.process_time()
        while feed.lines < expected:
            run.pump(PUMP_TIMEOUT_S)
            if time.perf_counter() - started > 600:
                raise SystemExit(f"serving pass: only {feed.lines} of {expected} lines after 600 s")
        run.assembler.take(time.time(), final=True)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        run.close()
    return feed.lines, elapsed, cpu


def child(mix: str, path: str, expected: int) -> dict:
    """One run: the pump over the whole file, the plain loop, then the serving pass, in this process."""
    quiet_logs()
    from ddtreed.paths import shipped
    from ddtreed.rules import load_rules

    rules = load_rules([shipped("rules")])
    with tempfile.TemporaryDirectory(prefix="ddtreed-pump-") as directory:
        directory = Path(directory)
        run, host, log_paths = service_run(directory)
        os.makedirs(os.path.dirname(log_paths[0]), exist_ok=True)
        os.link(path, log_paths[0])  # the mix is what the service wrote to its stdout log
        for other in log_paths[1:]:
            Path(other).touch()
        rss_start = _rss_mib()
        feed = CountingFeed(host.open_follower(log_paths))
        run.follower = feed
        groups = crashes = 0
        rules_s = rules_cpu = 0.0
        rss_half = None
        started, cpu_started = time.perf_counter(), time.process_time()
        while feed.lines < expected:
            found = run.pump(PUMP_TIMEOUT_S)
            if found:
                before, cpu_before = time.perf_counter(), time.process_time()
                for group in found:
                    rules.diagnose(group, None)
                rules_s += time.perf_counter() - before
                rules_cpu += time.process_time() - cpu_before
                groups += len(found)
                crashes += sum(len(group) for group in found)
            if rss_half is None and feed.lines >= expected // 2:
                rss_half = _rss_mib()
            if time.perf_counter() - started > 600:
                raise SystemExit(f"{mix}: only {feed.lines} of {expected} lines after 600 s")
        last = run.assembler.take(time.time(), final=True)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        groups += len(last)
        crashes += sum(len(group) for group in last)
        milestones = len(run.milestones.milestones)
        run.close()
    plain_lines, plain_s, plain_cpu, plain_hits = plain_loop(path)
    serving_lines, serving_s, serving_cpu = serving_pass(path, expected)
    pump_s = elapsed - rules_s
    return {"lines": feed.lines, "reads": feed.reads, "seconds": elapsed, "rules_seconds": rules_s,
            "lines_per_s": feed.lines / pump_s, "lines_per_s_with_rules": feed.lines / elapsed,
            "plain_loop_lines_per_s": plain_lines / plain_s, "plain_loop_hits": plain_hits,
            "lines_per_cpu_s": feed.lines / (cpu - rules_cpu),
            "plain_loop_lines_per_cpu_s": plain_lines / plain_cpu,
            "serving_lines_per_s": serving_lines / serving_s, "serving_lines_per_cpu_s": serving_lines / serving_cpu,
            "groups": groups, "crashes": crashes, "milestones": milestones,
            "rss_mib_start": rss_start, "rss_mib_half": rss_half, "rss_mib_end": _rss_mib()}


def plain_loop(path: str) -> tuple[int, float, float, int]:
    """The honest floor: `for line in f` with the same needles and the untagged check."""
    from ddtreed.health.probes import _NEEDLES as milestone_needles
    from ddtreed.tracebacks.grammar import TAGGED_NEEDLES

    needles = tuple(TAGGED_NEEDLES) + tuple(milestone_needles)
    count = hits = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            count += 1
            if line[:1] != "[" or not line[1:2].isdigit() or any(needle in line for needle in needles):
                hits += 1
    return count, time.perf_counter() - started, time.process_time() - cpu_started, hits


def drain3_rate(path: str, limit: int) -> float:
    from drain3 import TemplateMiner

    miner = TemplateMiner()
    count = 0
    started = time.perf_counter()
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            miner.add_log_message(line.rstrip("\n"))
            count += 1
            if count >= limit:
                break
    return count / (time.perf_counter() - started)


def _rss_mib() -> float:
    """Peak RSS of this process (VmHWM: ru_maxrss would carry the parent's peak over the exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def measure_mix(mix: str, lines: int, runs: int, drain3_lines: int, directory: Path) -> dict:
    path = directory / f"{mix}.log"
    written = mixes.generate(str(path), mix, lines)
    load_before = load_info()
    samples = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, __file__, "--child", mix, str(path), str(written.lines)],
                             cwd=REPO, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"{mix} run failed:\n{out.stderr[-3000:]}")
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    drain3 = drain3_rate(str(path), drain3_lines) if drain3_lines > 0 else None
    path.unlink()
    rate = spread([s["lines_per_s"] for s in samples])
    plain = spread([s["plain_loop_lines_per_s"] for s in samples])
    ratios = spread([s["plain_loop_lines_per_s"] / s["lines_per_s"] for s in samples], digits=2)
    first = samples[0]
    result = {
        "benchmark": "pipeline_throughput", "mix": mix,
        "code_path": "ServiceRun.pump(0.2) (Follower via LocalHost.open_follower, Assembler(eager=True), "
                     "MilestoneTracker), then RuleSet.diagnose per crash group (timed apart); serving_*: "
                     "the same pump with the serving watch attached as Daemon._watch does (ServingWatch.feed)",
        "baseline": "plain `for line in f` loop, same needles + untagged check, same process, right after",
        # which code read the serving pass's decode lines: ddtreed._fastscan (C) or `re`
        "decode_reader": decode_reader(),
        "runs": runs, "lines": first["lines"], "bytes": written.bytes,
        "long_lines": written.long_lines, "untagged_lines": written.untagged,
        "lines_per_s": rate,
        "plain_loop_lines_per_s": plain,
        "slower_than_plain_loop_x": ratios,
        "lines_per_cpu_s": spread([s["lines_per_cpu_s"] for s in samples]),
        "plain_loop_lines_per_cpu_s": spread([s["plain_loop_lines_per_cpu_s"] for s in samples]),
        "slower_than_plain_loop_cpu_x": spread([s["plain_loop_lines_per_cpu_s"] / s["lines_per_cpu_s"]
                                                for s in samples], digits=2),
        "serving_lines_per_s": spread([s["serving_lines_per_s"] for s in samples]),
        "serving_lines_per_cpu_s": spread([s["serving_lines_per_cpu_s"] for s in samples]),
        "serving_slower_than_plain_loop_x": spread([s["plain_loop_lines_per_s"] / s["serving_lines_per_s"]
                                                    for s in samples], digits=2),
        "lines_per_s_with_rules": spread([s["lines_per_s_with_rules"] for s in samples]),
        "rules_seconds": spread([s["rules_seconds"] for s in samples], digits=3),
        "drain3_lines_per_s": round(drain3) if drain3 else None,
        "tracebacks_written": written.tracebacks,
        "crashes_found": first["crashes"], "groups_found": first["groups"],
        "reads": first["reads"],
        "rss_mib_start_half_end": [first["rss_mib_start"], first["rss_mib_half"], first["rss_mib_end"]],
        "rss_mib_end_max": max(s["rss_mib_end"] for s in samples),
        "load_before": load_before, "load_after": load_info(),
        "goal_lines_per_s": GOALS[mix],
    }
    # The daemon spends its life serving: the goal holds only if both paths reach it.
    serving = result["serving_lines_per_s"]["median"]
    serving_ratio = result["serving_slower_than_plain_loop_x"]["median"]
    result["goal_met"] = (min(rate["median"], serving) >= GOALS[mix]
                          and (mix != "typical" or max(ratios["median"], serving_ratio) <= 3.0))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mix", choices=mixes.MIXES + ("all",), default="all")
    parser.add_argument("--lines", type=int, default=None, help="lines per mix (default: per mix)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drain3-lines", type=int, default=100_000)
    parser.add_argument("--child", nargs=3, metavar=("MIX", "PATH", "LINES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mix, path, expected = args.child
        print(json.dumps(child(mix, path, int(expected))))
        return
    chosen = mixes.MIXES if args.mix == "all" else (args.mix,)
    with tempfile.TemporaryDirectory(prefix="ddtreed-bench-") as directory:
        for mix in chosen:
            emit(measure_mix(mix, args.lines or DEFAULT_LINES[mix], args.runs, args.drain3_lines,
                             Path(directory)))


if __name__ == "__main__":
    main()
