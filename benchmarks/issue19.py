"""Every goal of issue 19 in one invocation: this checkout against a baseline commit, same run.

    python benchmarks/issue19.py [--against REV] [--rounds 3] [--only GOAL,GOAL…] [--quick]
                                 [--markdown FILE] [--list]

It re-implements no benchmark. Each goal names a field of an existing benchmark's JSON; the
benchmarks run as follows:

- through `benchmarks/compare.py --against REV --rounds N -- <benchmark> …` when the benchmark
  times ddtreed code in its own process or in a `python -m ddtreed` child started from the code
  tree (`pipeline_throughput.py`, `detection_latency.py`, `loop_overhead.py`, `footprint.py`):
  the candidate (this working tree) and REV's code alternate round by round, each round one run;
  min / median / max are over the rounds;
- with the benchmark's own same-run baseline option when it starts `ddtreed` from the repository
  itself, which `compare.py` cannot swap (`cli_start.py --before-rev REV`, `store_scale.py
  --readers-before-rev REV`, `fleet_status.py --baseline-ref REV`): both sides interleaved by the
  benchmark, `--runs N` each; min / median / max are over those runs;
  `footprint_paired.py --against REV` runs both sides at once, over the same seconds, N rounds.

The load (`os.getloadavg`) is recorded before and after each benchmark and, for `compare.py`,
after every round of each side. Where a benchmark has a baseline of its own inside each run (the
plain `for line in f` loop, the bare follower, `python -c pass`, the service's own CPU), it is
printed beside the goal as `reference`.

Prints ONE JSON document (stdout); `--markdown FILE` also writes the table
goal | command | candidate | baseline | load | met?. Progress goes to stderr. A benchmark that
fails (or cannot run here: the fleet needs root and /usr/sbin/sshd) leaves its goals with
`"error"` and the other goals still run. `--quick` is a smoke test (tiny inputs, one round unless
`--rounds` says otherwise): its figures are not measurements of the goals.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_BASELINE = "de76d0a"  # main when session 5 of issue 19's work began


def load_info() -> dict:
    one, five, _ = os.getloadavg()
    return {"loadavg_1m": round(one, 2), "loadavg_5m": round(five, 2), "cpus": os.cpu_count()}


def spread(values: list[float]) -> dict | None:
    values = [value for value in values if value is not None]
    if not values:
        return None
    ordered = sorted(values)
    half = len(ordered) // 2
    middle = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
    return {"min": ordered[0], "median": middle, "max": ordered[-1], "n": len(ordered)}


def median_of(value: Any) -> float | None:
    """A number, or the median of a benchmark's {min, median, max} (or {min_ms, median_ms, max_ms})."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        for key in ("median", "median_ms"):
            if isinstance(value.get(key), (int, float)):
                return float(value[key])
    return None


def as_spread(value: Any) -> dict | None:
    """A benchmark's own min/median/max over its runs, in this runner's shape."""
    if not isinstance(value, dict):
        return None
    for low, mid, high in (("min", "median", "max"), ("min_ms", "median_ms", "max_ms")):
        if all(isinstance(value.get(key), (int, float)) for key in (low, mid, high)):
            return {"min": float(value[low]), "median": float(value[mid]), "max": float(value[high])}
    return None


def dig(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def pick(outputs: list[dict], **match: Any) -> dict:
    """The one JSON object of a benchmark's outputs whose keys have these values (else {})."""
    for output in outputs:
        if all(output.get(key) == value for key, value in match.items()):
            return output
    return {}


# --- the benchmarks -------------------------------------------------------------------------------

@dataclass
class Job:
    """One benchmark invocation; `args(goals, quick, rounds, baseline)` gives its argv after python."""

    name: str
    driver: str  # "compare" or "native"
    args: Callable[[list["Goal"], bool, int, str], list[str]]
    needs: str = ""  # what it needs that a box may lack (said when it is skipped)


def _throughput_args(goals, quick, rounds, baseline):
    mixes = sorted({goal.id.split("_")[0] for goal in goals})
    lines = "5000" if quick else "300000"
    return ["pipeline_throughput.py", "--mix", mixes[0] if len(mixes) == 1 else "all",
            "--lines", lines, "--runs", "1", "--drain3-lines", "0"]


def _detection_args(goals, quick, rounds, baseline):
    conditions = [condition for condition in ("idle", "hogs") if any(g.id == f"detect_{condition}" for g in goals)]
    return ["detection_latency.py", "--events", "3" if quick else "20", "--runs", "1",
            "--conditions", ",".join(conditions)]


def _relaunch_args(goals, quick, rounds, baseline):
    return ["loop_overhead.py", "--loops", "1" if quick else "10", "--runs", "1"]


def _footprint_args(goals, quick, rounds, baseline):
    rates = [rate for rate in ("20", "1000") if any(g.id == f"cpu_{rate}" for g in goals)] or ["20"]
    return ["footprint.py", "--seconds", "1" if quick else "10", "--runs", "1", "--lines-per-s", ",".join(rates)]


def _paired_args(goals, quick, rounds, baseline):
    return ["footprint_paired.py", "--against", baseline, "--rounds", str(rounds), "--seconds", "1" if quick else "10",
            "--lines-per-s", "1000"]


def _store_args(goals, quick, rounds, baseline):
    if quick:
        return ["store_scale.py", "--incidents", "500", "--runs", str(rounds), "--current-only",
                "--readers-before-rev", baseline]
    return ["store_scale.py", "--incidents", "100000", "--runs", str(rounds), "--readers-before-rev", baseline]


def _cli_args(goals, quick, rounds, baseline):
    return ["cli_start.py", "--runs", str(rounds), "--before-rev", baseline]


def _fleet_args(goals, quick, rounds, baseline):
    return ["fleet_status.py", "--sizes", "3" if quick else "100", "--runs", str(rounds), "--baseline-ref", baseline]


JOBS = {job.name: job for job in (
    Job("throughput", "compare", _throughput_args),
    Job("detection", "compare", _detection_args),
    Job("relaunch", "compare", _relaunch_args),
    Job("footprint", "compare", _footprint_args),
    Job("footprint_paired", "native", _paired_args),
    Job("store", "native", _store_args),
    Job("cli", "native", _cli_args),
    Job("fleet", "native", _fleet_args, needs="root, /usr/sbin/sshd and ssh-keygen (.ci/sshd-setup.sh)"),
)}


# --- the goals ------------------------------------------------------------------------------------

@dataclass
class Goal:
    """A figure of issue 19 and where it is in its benchmark's output.

    compare jobs: `value(outputs)` reads one round's outputs (one side); `reference` likewise.
    native jobs: `sides(output)` gives (candidate spread, baseline spread, reference spread).
    """

    id: str
    text: str
    job: str
    target: float
    higher_is_better: bool
    unit: str
    field: str  # what it reads, for the reader of the JSON
    value: Callable[[list[dict]], float | None] | None = None
    reference: Callable[[list[dict]], float | None] | None = None
    reference_text: str = ""
    baseline_text: str = ""  # when the baseline is not the same figure on the baseline commit's code
    sides: Callable[[dict], tuple[dict | None, dict | None, dict | None]] | None = None
    extras: dict[str, Callable[[list[dict]], float | None]] = field(default_factory=dict)
    # native jobs: name -> output -> {"candidate": …, "baseline": …} (figures printed beside the goal)
    native_extras: dict[str, Callable[[dict], dict]] = field(default_factory=dict)

    def met(self, median: float | None) -> bool | None:
        if median is None:
            return None
        return median >= self.target if self.higher_is_better else median <= self.target


def _mix(mix: str, key: str) -> Callable[[list[dict]], float | None]:
    return lambda outputs: median_of(pick(outputs, mix=mix).get(key))


def _rss_growth(outputs: list[dict]) -> float | None:
    start_half_end = pick(outputs, mix="worst").get("rss_mib_start_half_end")
    if not start_half_end or not start_half_end[1]:
        return None
    return start_half_end[2] / start_half_end[1]


def _footprint(rate: float, key: str) -> Callable[[list[dict]], float | None]:
    return lambda outputs: median_of(pick(outputs, lines_per_s_target=rate).get(key))


def _rss(outputs: list[dict]) -> float | None:
    values = [median_of(output.get("rss_mb")) for output in outputs if output.get("benchmark") == "footprint"]
    values = [value for value in values if value is not None]
    return max(values) if values else None


def _store_list(output: dict):
    return (as_spread(dig(output, "readers.list.now.wall_ms")), as_spread(dig(output, "readers.list.before.wall_ms")),
            None)


def _store_scrape(output: dict):
    return (as_spread(dig(output, "scrape_http.wall_ms")), as_spread(dig(output, "baseline.scrape")),
            as_spread(dig(output, "scrape_http.counts_ms")))


def _cli(name: str):
    return lambda output: (as_spread(output.get(f"{name}_ms")), as_spread(output.get(f"{name}_before_ms")),
                           as_spread(output.get("python_c_pass_ms")))


def _cli_cpu(name: str) -> Callable[[dict], dict]:
    return lambda output: {"candidate": output.get(f"{name}_cpu_ms"), "baseline": output.get(f"{name}_before_cpu_ms")}


def _cli_importtime(name: str) -> Callable[[dict], dict]:
    return lambda output: {"candidate": output.get(f"{name}_importtime_total_ms"),
                           "baseline": output.get(f"{name}_before_importtime_total_ms"),
                           "top_imported_by_ddtreed": output.get(f"{name}_importtime_top_imported_by_ddtreed")}


def _fleet_extra(key: str) -> Callable[[dict], dict]:
    def read(output: dict) -> dict:
        sizes = [int(size) for size in (output.get("current_summary") or {})]
        if not sizes:
            return {}
        size = str(max(sizes))
        return {"hosts": int(size), "candidate": as_spread(dig(output, f"current_summary.{size}.{key}")),
                "baseline": as_spread(dig(output, f"baseline_summary.{size}.{key}"))}
    return read


def _fleet(output: dict):
    sizes = [int(size) for size in (output.get("current_summary") or {})]
    if not sizes:
        return None, None, None
    size = str(max(sizes))
    return (as_spread(dig(output, f"current_summary.{size}.wall_s")),
            as_spread(dig(output, f"baseline_summary.{size}.wall_s")), None)


def _goals() -> list[Goal]:
    goals: list[Goal] = []
    for mix, target in (("typical", 2_000_000), ("noisy", 1_000_000), ("worst", 200_000)):
        goals.append(Goal(f"{mix}_startup", f"`{mix}` ≥ {target:,} lines/s, startup path (ServiceRun.pump)",
                          "throughput", target, True, "lines/s", f"mix={mix}: lines_per_s",
                          value=_mix(mix, "lines_per_s"), reference=_mix(mix, "plain_loop_lines_per_s"),
                          reference_text="plain `for line in f` loop, same needles",
                          extras={"lines_per_cpu_s": _mix(mix, "lines_per_cpu_s")}))
        goals.append(Goal(f"{mix}_serving", f"`{mix}` ≥ {target:,} lines/s, serving path (serving watch attached)",
                          "throughput", target, True, "lines/s", f"mix={mix}: serving_lines_per_s",
                          value=_mix(mix, "serving_lines_per_s"), reference=_mix(mix, "plain_loop_lines_per_s"),
                          reference_text="plain `for line in f` loop, same needles",
                          extras={"serving_lines_per_cpu_s": _mix(mix, "serving_lines_per_cpu_s")}))
    goals.append(Goal("typical_plain_ratio", "`typical` within 3× of the plain loop, startup path", "throughput",
                      3.0, False, "× (plain loop's rate / the pump's)", "mix=typical: slower_than_plain_loop_x",
                      value=_mix("typical", "slower_than_plain_loop_x"),
                      reference=_mix("typical", "plain_loop_lines_per_s"),
                      reference_text="plain loop lines/s"))
    goals.append(Goal("typical_plain_ratio_serving", "`typical` within 3× of the plain loop, serving path",
                      "throughput", 3.0, False, "× (plain loop's rate / the pump's)",
                      "mix=typical: serving_slower_than_plain_loop_x",
                      value=_mix("typical", "serving_slower_than_plain_loop_x"),
                      reference=_mix("typical", "plain_loop_lines_per_s"), reference_text="plain loop lines/s"))
    goals.append(Goal("worst_memory", "`worst`: bounded memory (peak RSS at the end ≤ 1.1× at half the input)",
                      "throughput", 1.1, False, "× (end / half)", "mix=worst: rss_mib_start_half_end[2] / [1]",
                      value=_rss_growth, extras={"rss_mib_end": lambda o: (pick(o, mix="worst").get(
                          "rss_mib_start_half_end") or [None, None, None])[2]}))
    goals.append(Goal("detect_idle", "detection p99 ≤ 5 ms, 20 decode lines/s of background "
                      "(row committed; `durable_p99_ms`: synced)", "detection", 5.0,
                      False, "ms", "detect_p99_ms_idle",
                      value=lambda o: median_of(pick(o, benchmark="detection_latency").get("detect_p99_ms_idle")),
                      reference=lambda o: median_of(pick(o, benchmark="detection_latency").get(
                          "baseline_read_p99_ms_idle")),
                      reference_text="bare follower write → read p99",
                      extras={"detect_p50_ms": lambda o: median_of(pick(o).get("detect_p50_ms_idle")),
                              "record_p99_ms": lambda o: median_of(pick(o).get("record_p99_ms_idle")),
                              # the row committed at NORMAL (detect) vs synced (durable): never one for the other
                              "durable_p99_ms": lambda o: median_of(pick(o).get("durable_p99_ms_idle"))}))
    goals.append(Goal("detect_hogs", "detection p99 ≤ 25 ms with two CPU hogs "
                      "(row committed; `durable_p99_ms`: synced)", "detection", 25.0, False, "ms",
                      "detect_p99_ms_hogs",
                      value=lambda o: median_of(pick(o, benchmark="detection_latency").get("detect_p99_ms_hogs")),
                      reference=lambda o: median_of(pick(o, benchmark="detection_latency").get(
                          "baseline_read_p99_ms_hogs")),
                      reference_text="bare follower write → read p99",
                      extras={"detect_p50_ms": lambda o: median_of(pick(o).get("detect_p50_ms_hogs")),
                              "record_p99_ms": lambda o: median_of(pick(o).get("record_p99_ms_hogs")),
                              # the row committed at NORMAL (detect) vs synced (durable): never one for the other
                              "durable_p99_ms": lambda o: median_of(pick(o).get("durable_p99_ms_hogs"))}))
    goals.append(Goal("relaunch", "crash → relaunch p50 ≤ 100 ms", "relaunch", 100.0, False, "ms",
                      "crash_to_relaunch_p50_ms",
                      value=lambda o: median_of(pick(o).get("crash_to_relaunch_p50_ms")),
                      extras={"with_stop_p50_ms": lambda o: median_of(
                          pick(o).get("crash_to_relaunch_with_stop_p50_ms"))}))
    for rate in (20, 1000):
        goals.append(Goal(f"cpu_{rate}", f"steady CPU ≤ 2 % of a core while serving, {rate:,} lines/s", "footprint",
                          2.0, False, "% of a core", f"lines_per_s_target={rate}: cpu_percent",
                          value=_footprint(float(rate), "cpu_percent"),
                          reference=_footprint(float(rate), "cpu_percent_service"),
                          reference_text="the service's own CPU, same samples",
                          extras={"wakeups_per_s": _footprint(float(rate), "wakeups_per_s")}))
    goals.append(Goal("cpu_1000_paired", "steady CPU ≤ 2 % of a core while serving, 1,000 lines/s, both daemons "
                      "at once", "footprint_paired", 2.0, False, "% of a core",
                      "candidate.cpu_percent (baseline: baseline.cpu_percent, same seconds)",
                      sides=lambda o: (as_spread(dig(o, "candidate.cpu_percent")),
                                       as_spread(dig(o, "baseline.cpu_percent")),
                                       as_spread(dig(o, "candidate.cpu_percent_service"))),
                      reference_text="the candidate's service's own CPU, same samples",
                      native_extras={key: (lambda o, key=key: {"candidate": dig(o, f"candidate.{key}"),
                                                               "baseline": dig(o, f"baseline.{key}"),
                                                               "difference": dig(o, f"difference.{key}")})
                                     for key in ("cpu_us_per_wakeup", "wakeups_per_s")}))
    goals.append(Goal("rss", "RSS ≤ 40 MB (the daemon, serving)", "footprint", 40.0, False, "MB",
                      "rss_mb (the larger of the conditions run)", value=_rss,
                      extras={"uss_mb": lambda o: max([median_of(x.get("uss_mb")) or 0 for x in o] or [0]) or None}))
    goals.append(Goal("incidents_100k", "`ddtreed incidents` ≤ 100 ms at 100,000 incidents", "store", 100.0, False,
                      "ms", "readers.list.now.wall_ms (baseline: readers.list.before)", sides=_store_list,
                      native_extras={"cpu_ms": lambda o: {"candidate": dig(o, "readers.list.now.cpu_ms"),
                                                          "baseline": dig(o, "readers.list.before.cpu_ms")},
                                     "importtime_total_ms": lambda o: {
                          "candidate": dig(o, "readers.list.now.importtime_total_ms"),
                          "baseline": dig(o, "readers.list.before.importtime_total_ms")}}))
    goals.append(Goal("scrape_100k", "metrics scrape ≤ 10 ms at 100,000 incidents", "store", 10.0, False, "ms",
                      "scrape_http.wall_ms (baseline: the schema before migration 0009, baseline.scrape)",
                      sides=_store_scrape, reference_text="Store.counts() alone",
                      baseline_text="Store.counts() in-process on the schema before migration 0009 (32f079a), "
                                    "same rows, same run"))
    goals.append(Goal("cli_help", "`ddtreed --help` ≤ 120 ms", "cli", 120.0, False, "ms", "help_ms", sides=_cli("help"),
                      reference_text="python -c pass", native_extras={"cpu_ms": _cli_cpu("help"),
                                                                  "importtime_total_ms": _cli_importtime("help")}))
    goals.append(Goal("cli_status", "`ddtreed status` ≤ 120 ms", "cli", 120.0, False, "ms", "status_ms",
                      sides=_cli("status"), reference_text="python -c pass",
                      native_extras={"cpu_ms": _cli_cpu("status"), "importtime_total_ms": _cli_importtime("status")}))
    goals.append(Goal("fleet_100", "`fleet status` of 100 loopback hosts ≤ 5 s", "fleet", 5.0, False, "s",
                      "current_summary.<hosts>.wall_s", sides=_fleet,
                      native_extras={"client_cpu_s": _fleet_extra("client_cpu_s"),
                                     "remote_cpu_s": _fleet_extra("remote_cpu_s")}))
    return goals


GOALS = _goals()


# --- running --------------------------------------------------------------------------------------

def _json_objects(text: str) -> list[dict]:
    """Every JSON object a benchmark printed: one per line, or one indented document."""
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                pass
    if not found and text.strip():
        try:
            document = json.loads(text[text.index("{"):])
            found = [document] if isinstance(document, dict) else []
        except ValueError:
            pass
    return found


def run_job(job: Job, goals: list[Goal], quick: bool, rounds: int, baseline: str, candidate: str | None = None) -> dict:
    """One benchmark for these goals: its command, output, loads, and the goals' figures."""
    python = sys.executable
    script = job.args(goals, quick, rounds, baseline)
    if job.driver == "compare":
        chosen = ["--candidate", candidate] if candidate else []
        argv = [python, str(HERE / "compare.py"), "--against", baseline, *chosen, "--rounds", str(rounds), "--",
                *script]
        shown = (f"python benchmarks/compare.py --against {baseline} {' '.join(chosen + [''])}--rounds {rounds} -- "
                 f"{' '.join(script)}")
    else:
        argv = [python, str(HERE / script[0]), *script[1:]]
        shown = f"python benchmarks/{' '.join(script)}"
    print(f"issue19: {job.name}: {shown}", file=sys.stderr, flush=True)
    record: dict[str, Any] = {"command": shown, "driver": job.driver, "load_before": load_info()}
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    record.update(wall_s=round(time.monotonic() - started, 1), load_after=load_info(), returncode=done.returncode)
    outputs = _json_objects(done.stdout)
    if done.returncode != 0 or not outputs:
        why = done.stderr.strip().splitlines()[-12:] or ["(no stderr)"]
        if job.driver == "native" and done.returncode == 2 and job.needs:
            record["error"] = f"not run here: needs {job.needs}: " + " ".join(why[-1:])
        else:
            record["error"] = f"exit {done.returncode}: " + " | ".join(why)
        return record
    if job.driver == "compare":
        result = outputs[-1]
        record["rounds"] = [json.loads(line) for line in done.stderr.splitlines() if line.startswith('{"round"')]
        record["round_loads"] = [entry["load"]["loadavg_1m"] for entry in record.pop("rounds")]
        record["candidate_rev"], record["baseline_rev"] = result.get("candidate"), result.get("baseline")
        record["outputs"] = result.get("outputs", {})
    else:
        record["output"] = outputs[-1]
        record["round_loads"] = _native_loads(outputs[-1])
    return record


def _native_loads(output: dict) -> list[float]:
    """The loads a native benchmark noted itself (per fleet run; at start and end otherwise)."""
    loads: list[float] = []
    for run in output.get("runs") or [] if isinstance(output.get("runs"), list) else []:
        for side in ("baseline", "current"):
            text = dig(run, f"{side}.loadavg_before")
            if isinstance(text, str) and text.split():
                loads.append(float(text.split()[0]))
    for key in ("load_before", "load_after"):
        if isinstance(output.get(key), dict):
            loads.append(output[key]["loadavg_1m"])
    for key in ("loadavg_at_start", "loadavg_at_end"):
        if isinstance(output.get(key), list) and output[key]:
            loads.append(output[key][0])
    return loads


def goal_result(goal: Goal, record: dict) -> dict:
    entry: dict[str, Any] = {"id": goal.id, "goal": goal.text, "target": goal.target, "unit": goal.unit,
                             "higher_is_better": goal.higher_is_better, "benchmark_field": goal.field,
                             "command": record["command"], "job": goal.job}
    loads = [record["load_before"]["loadavg_1m"], *record.get("round_loads", []), record["load_after"]["loadavg_1m"]]
    entry["load"] = {"before": record["load_before"]["loadavg_1m"], "after": record["load_after"]["loadavg_1m"],
                     "min": min(loads), "max": max(loads), "during": record.get("round_loads", [])}
    if "error" in record:
        entry.update(candidate=None, baseline=None, met=None, error=record["error"])
        return entry
    if goal.value is not None:
        outputs = record["outputs"]
        for side in ("candidate", "baseline"):
            per_round = [goal.value(round_outputs) for round_outputs in outputs.get(side, [])]
            entry[side] = spread(per_round)
            if entry[side] is not None:
                entry[side]["per_round"] = per_round
        if goal.reference is not None:
            entry["reference"] = spread([goal.reference(o) for o in outputs.get("candidate", [])])
        entry["extras"] = {name: {side: spread([read(o) for o in outputs.get(side, [])])
                                  for side in ("candidate", "baseline")} for name, read in goal.extras.items()}
        entry["candidate_rev"], entry["baseline_rev"] = record.get("candidate_rev"), record.get("baseline_rev")
    else:
        assert goal.sides is not None
        candidate, baseline, reference = goal.sides(record["output"])
        entry.update(candidate=candidate, baseline=baseline)
        if reference is not None:
            entry["reference"] = reference
        entry["extras"] = {name: read(record["output"]) for name, read in goal.native_extras.items()}
    if goal.reference_text:
        entry["reference_is"] = goal.reference_text
    if goal.baseline_text:
        entry["baseline_is"] = goal.baseline_text
    if entry["candidate"] is None:
        entry["error"] = f"the benchmark's output has no {goal.field}"
    entry["met"] = goal.met(entry["candidate"]["median"] if entry["candidate"] else None)
    return entry


# --- the table ------------------------------------------------------------------------------------

def number(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{round(value, -(len(str(int(abs(value)))) - 3)):,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) >= 0.01 else f"{value:.2g}"


def cell(figure: dict | None) -> str:
    if not figure:
        return "—"
    return f"**{number(figure['median'])}** ({number(figure['min'])} – {number(figure['max'])})"


def markdown(document: dict) -> str:
    rows = ["| goal | command | candidate: median (min – max) | baseline: median (min – max) | load (1 min) | met? |",
            "|---|---|---|---|---|---|"]
    for entry in document["goals"]:
        candidate = cell(entry.get("candidate"))
        if entry.get("candidate"):
            candidate += f" {entry['unit']}"
        if entry.get("reference"):
            candidate += f"; {entry.get('reference_is', 'reference')}, same runs: {cell(entry['reference'])}"
        for name, sides in (entry.get("extras") or {}).items():
            mine, theirs = median_of(sides.get("candidate")), median_of(sides.get("baseline"))
            if mine is not None:
                candidate += f"; {name.replace('_', ' ')} {number(mine)}" + (
                    f" (baseline {number(theirs)})" if theirs is not None else "")
        baseline = cell(entry.get("baseline"))
        if entry.get("baseline"):
            baseline = f"{entry.get('baseline_is') or document['baseline']}: {baseline}"
        met = "—" if entry.get("met") is None else ("met" if entry["met"] else "**not met**")
        if entry.get("error"):
            met = f"not measured: {entry['error'][:300]}"
        load = entry["load"]
        rows.append(f"| {entry['goal']} (`{entry['id']}`) | `{entry['command']}` | {candidate} | {baseline} | "
                    f"{load['before']} → {load['after']} ({load['min']} – {load['max']}) | {met} |")
    head = (f"Candidate {document['candidate']}, baseline {document['baseline']}, {document['rounds']} round(s), "
            f"{document['started_utc']} – {document['ended_utc']}, load {document['load_before']['loadavg_1m']} → "
            f"{document['load_after']['loadavg_1m']} on {document['load_before']['cpus']} CPUs"
            + (". **Quick mode: a smoke test, not a measurement.**" if document["quick"] else "."))
    return head + "\n\n" + "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", default=DEFAULT_BASELINE, help=f"the baseline commit (default {DEFAULT_BASELINE})")
    parser.add_argument("--candidate", default=None, metavar="REV",
                        help="compare.py's candidate commit (default: the working tree); the benchmarks with "
                             "their own baseline option always time this checkout")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (compare.py) or runs (the others); default 3")
    parser.add_argument("--only", default="", help="comma-separated goal ids, or job names (see --list)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: tiny inputs, 1 round")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table here")
    parser.add_argument("--list", action="store_true", help="print the goals and their benchmarks, then exit")
    parser.add_argument("--from-json", metavar="FILE",
                        help="run nothing: read the goals again from a document this runner printed (its "
                             "benchmarks' outputs), print it and write --markdown")
    args = parser.parse_args()
    if args.list:
        for goal in GOALS:
            print(f"{goal.id:28} {goal.job:10} {goal.text}")
        return 0
    if args.from_json:
        document = json.loads(Path(args.from_json).read_text())
        ids = [entry["id"] for entry in document["goals"]]
        document["goals"] = [goal_result(goal, document["jobs"][goal.job]) for goal in GOALS
                             if goal.id in ids and goal.job in document["jobs"]]
        if args.markdown:
            Path(args.markdown).write_text(markdown(document))
        print(json.dumps(document))
        return 0
    rounds = args.rounds or (1 if args.quick else 3)
    wanted = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in JOBS and name not in {goal.id for goal in GOALS}]
    if unknown:
        parser.error(f"--only: unknown goal or benchmark {', '.join(unknown)} (see --list)")
    chosen = [goal for goal in GOALS if not wanted or goal.id in wanted or goal.job in wanted]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "ddtreed", "benchmarks"],
                           capture_output=True, text=True).stdout.strip()
    document: dict[str, Any] = {
        "benchmark": "issue19",
        "candidate": args.candidate or head + (" + uncommitted changes" if dirty else ""),
        "baseline": args.against, "rounds": rounds, "quick": args.quick,
        "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load_info(),
        "goals": [], "jobs": {}}
    started = time.monotonic()
    for name, job in JOBS.items():
        goals = [goal for goal in chosen if goal.job == name]
        if not goals:
            continue
        record = run_job(job, goals, args.quick, rounds, args.against, args.candidate)
        document["jobs"][name] = record
        document["goals"] += [goal_result(goal, record) for goal in goals]
    document.update(ended_utc=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load_after=load_info(),
                    wall_s=round(time.monotonic() - started, 1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(document))
    print(json.dumps(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
