"""CLI start: wall time of `ddtreed --help`, `ddtreed status` and `ddtreed incidents`, and what their imports cost.

Code path timed: a fresh `python -m ddtreed --help`, `python -m ddtreed status --state-dir DIR`
and `python -m ddtreed incidents --state-dir DIR` process each (the installed `ddtreed` script
runs the same `ddtreed.cli:main`), DIR holding a daemon-state.json of a live pid (this one) and an
incident database with 100 incidents written by the real `Store`. Baseline from the same run: the
bare interpreter (`python -c pass`) and `python -c "import argparse, json, sqlite3"` (what any CLI
of this kind needs). `python -X importtime` of each command gives the top contributors (cumulative
ms of each top-level module imported by ddtreed). For each command: wall time and CPU time (user +
sys of the child, from its rusage: what the command costs, apart from its wait for a core on a
loaded box). `--before-rev REV` also times the code at REV (a git worktree) in the same run,
interleaved. `--runs` runs each, round robin; prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, emit, load_info, quiet_logs, spread

GOAL_MS = 120.0  # --help, status (issue 19.4)
INCIDENTS_GOAL_MS = 100.0  # incidents (issue 19.3; at 100,000 incidents: store_scale.py's `readers`)


def make_state_dir(directory: Path, incidents: int) -> None:
    from ddtreed.incidents import Store
    from ddtreed.incidents.connection import DATABASE_NAME
    from ddtreed.records import Crash, RuleMatch
    from ddtreed.signature import signature_of
    from ddtreed.ops.status import DaemonStatus, write_status

    store = Store(directory / DATABASE_NAME)
    crash = Crash(kind="traceback", exception="RuntimeError", message="The size of tensor a (8) must match",
                  rank="TP0", detected_at=time.time())
    for _ in range(incidents):
        incident = store.open_incident("crash", (crash,), signature_of(crash),
                                       RuleMatch(rule_id=None, category="unknown", title="", diagnosis="",
                                                 remediations=()), None)
        store.finish(incident, "open", "benchmark")
    store.close()
    write_status(directory, DaemonStatus(pid=os.getpid(), state="running", status_text="serving"))


def timed_runs(argv: list[str], runs: int, cwd: Path = REPO) -> tuple[list[float], list[float], int]:
    """Wall ms and CPU ms (user + sys of the child, from its rusage) of `runs` fresh processes.

    CPU time is what the command itself costs; on a loaded box the wall time also holds the
    time the child waited for a core.
    """
    walls, cpus, code = [], [], 0
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        walls.append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
        code = done.returncode
    return walls, cpus, code


def importtime(argv: list[str], top: int = 10, cwd: Path = REPO) -> tuple[list[dict], list[dict], float]:
    """From `-X importtime`: what ddtreed's code imports from outside (root packages), ddtreed's
    own modules (top three levels), both by cumulative time, and the total import time."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=cwd, capture_output=True,
                          text=True, check=False)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative_us, name = line.split(":", 1)[1].split("|", 2)
        name = name[1:]  # one space after the bar, then two per nesting level
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((depth, name.strip(), int(self_us), int(cumulative_us)))
    # `-X importtime` lists a module after the modules it imported (one level deeper): read
    # backwards, a row's parent is the last row seen one level up. A third-party or stdlib module
    # is counted (under its root package) where ddtreed's own code imported it.
    outside: dict[str, int] = {}
    ours: dict[str, int] = {}
    chain: dict[int, bool] = {-1: True}  # depth -> that row and all its parents are ddtreed's
    for depth, name, _self_us, cumulative_us in reversed(rows):
        mine = name == "ddtreed" or name.startswith("ddtreed.")
        if not mine and chain.get(depth - 1, False):
            root = name.split(".")[0]
            outside[root] = outside.get(root, 0) + cumulative_us
        if mine and depth <= 2:
            ours[name] = cumulative_us
        chain[depth] = mine and chain.get(depth - 1, False)
    total = sum(cumulative for depth, _n, _s, cumulative in rows if depth == 0)
    return ([{"module": name, "cumulative_ms": round(us / 1000, 1)}
             for name, us in sorted(outside.items(), key=lambda item: -item[1])[:top]],
            [{"module": name, "cumulative_ms": round(us / 1000, 1)}
             for name, us in sorted(ours.items(), key=lambda item: -item[1])[:top]],
            round(total / 1000, 1))


def checkout(rev: str, where: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(where), rev],
                   check=True)
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before-rev", default=None, metavar="REV",
                        help="also time the same commands on the code at REV (a git worktree), "
                             "interleaved with the current code's runs: before/after in one run")
    args = parser.parse_args()
    quiet_logs()
    python = sys.executable
    result: dict = {"benchmark": "cli_start", "runs": args.runs,
                    "code_path": "fresh `python -m ddtreed ...` processes (ddtreed.cli:main)",
                    "load_before": load_info()}
    with tempfile.TemporaryDirectory(prefix="ddtreed-cli-") as directory:
        state = Path(directory) / "state"
        state.mkdir(mode=0o700)
        make_state_dir(state, 100)
        commands = {
            "help": [python, "-m", "ddtreed", "--help"],
            "status": [python, "-m", "ddtreed", "status", "--state-dir", str(state)],
            "incidents": [python, "-m", "ddtreed", "incidents", "--state-dir", str(state)],
        }
        baselines = {
            "python_c_pass": [python, "-c", "pass"],
            "python_import_argparse_json_sqlite3": [python, "-c", "import argparse, json, sqlite3"],
        }
        old = checkout(args.before_rev, Path(directory) / "before") if args.before_rev else None
        # Bytecode first, on both sides, as an install has it: with PYTHONDONTWRITEBYTECODE set a
        # tree without __pycache__ would compile every ddtreed module on each start.
        for tree in (REPO, old):
            if tree is not None:
                subprocess.run([python, "-m", "compileall", "-q", str(tree / "ddtreed")], check=True,
                               capture_output=True)
        result["bytecode"] = "compiled before timing, both sides (as an install has it)"
        try:
            timings: dict[str, tuple[list[float], list[float], int]] = {}
            # Round robin: every command once per round, so load that comes and goes during the
            # run falls on all of them alike.
            for _ in range(args.runs):
                for name, argv in {**baselines, **commands}.items():
                    variants = [(name, REPO)] + ([(f"{name}_before", old)] if old and name in commands else [])
                    for key, cwd in variants:
                        walls, cpus, code = timed_runs(argv, 1, cwd)
                        got = timings.setdefault(key, ([], [], 0))
                        timings[key] = (got[0] + walls, got[1] + cpus, code)
            for key, (walls, cpus, code) in timings.items():
                result[f"{key}_ms"] = spread(walls, digits=1)
                result[f"{key}_cpu_ms"] = spread(cpus, digits=1)
                name = key.removesuffix("_before")
                if name in commands:
                    cwd = old if key.endswith("_before") else REPO
                    result[f"{key}_exit_code"] = code
                    outside, ours, total = importtime(commands[name][1:], cwd=cwd)
                    result[f"{key}_importtime_total_ms"] = total
                    result[f"{key}_importtime_top_imported_by_ddtreed"] = outside
                    result[f"{key}_importtime_top_ddtreed_modules"] = ours
        finally:
            if old is not None:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)],
                               check=False)
    if args.before_rev:
        result["before_rev"] = args.before_rev
    result["load_after"] = load_info()
    result["goal_ms"] = GOAL_MS
    result["incidents_goal_ms"] = INCIDENTS_GOAL_MS
    result["goal_met"] = all(result[f"{name}_ms"]["median"] <= GOAL_MS for name in ("help", "status")) \
        and result["incidents_ms"]["median"] <= INCIDENTS_GOAL_MS
    emit(result)


if __name__ == "__main__":
    main()
