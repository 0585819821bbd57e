"""The same benchmark on this checkout and on an older commit, interleaved in one invocation.

    python benchmarks/compare.py --against REV [--candidate REV] [--rounds 3] -- loop_overhead.py --loops 10 --runs 1

The benchmark script is this checkout's in both cases; only the ddtreed code it times differs:
the baseline's files come from `git archive REV` and are put first on the path through
DDTREED_BENCH_TREE (benchmarks/_common.py); so do the candidate's with `--candidate REV`
(otherwise the working tree as it is: do not edit it meanwhile). Rounds alternate (this checkout, then the baseline),
so both see the same load. Prints ONE JSON object: per numeric figure of the benchmark's output
(a min/median/max figure counts by its median), min/median/max over the rounds for each side,
with every round's full output and the load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import io
import time
from pathlib import Path

from _common import REPO, TREE_VARIABLE, emit, load_info, spread

HERE = Path(__file__).resolve().parent


def export(rev: str, directory: Path) -> str:
    """The files of `rev` under `directory`; the commit's full hash."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(directory, filter="data")
    if (directory / "setup.py").exists():  # the commit's optional C part, built as an install builds it
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=directory,
                       capture_output=True, check=False)
    return commit


def figures(result, prefix: str = "") -> dict[str, float]:
    """Numeric leaves by dotted key; a {min, median, max} dict stands for its median."""
    found: dict[str, float] = {}
    if isinstance(result, dict):
        if "median" in result and isinstance(result["median"], (int, float)):
            return {prefix: float(result["median"])}
        for key, value in result.items():
            found.update(figures(value, f"{prefix}.{key}" if prefix else key))
    elif isinstance(result, bool):
        return {}
    elif isinstance(result, (int, float)):
        found[prefix] = float(result)
    return found


def run_once(script: list[str], tree: str | None) -> list[dict]:
    env = dict(os.environ)
    env.pop(TREE_VARIABLE, None)
    if tree:
        env[TREE_VARIABLE] = tree
    out = subprocess.run([sys.executable, str(HERE / script[0]), *script[1:]], cwd=REPO, env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{script[0]} ({'baseline' if tree else 'this checkout'}) failed:\n{out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", required=True, help="the baseline commit (any git revision)")
    parser.add_argument("--candidate", default=None, help="the commit measured (default: the working tree)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- BENCHMARK.py [its arguments]")
    args = parser.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        parser.error("name the benchmark after --")
    started, load_before = time.monotonic(), load_info()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "ddtreed"],
                                capture_output=True, text=True).stdout.strip())
    sides: dict[str, list[list[dict]]] = {"candidate": [], "baseline": []}
    candidate = f"{head}{' + uncommitted changes' if dirty else ''}"
    with tempfile.TemporaryDirectory(prefix="ddtreed-baseline-") as tree, \
            tempfile.TemporaryDirectory(prefix="ddtreed-candidate-") as candidate_tree:
        commit = export(args.against, Path(tree))
        if args.candidate:
            candidate = export(args.candidate, Path(candidate_tree))
        for index in range(args.rounds):
            for side, code in (("candidate", candidate_tree if args.candidate else None), ("baseline", tree)):
                sides[side].append(run_once(script, code))
                # each round as it ends, on stderr: a run cut short still leaves what it measured
                print(json.dumps({"round": index, "side": side, "load": load_info(),
                                  "outputs": sides[side][-1]}), file=sys.stderr, flush=True)
    result: dict = {"benchmark": "compare", "script": " ".join(script), "rounds": args.rounds,
                    "candidate": candidate, "baseline": commit,
                    "load_before": load_before, "load_after": load_info()}
    for index in range(len(sides["candidate"][0])):
        label = sides["candidate"][0][index].get("mix") or sides["candidate"][0][index].get("condition") or str(index)
        table: dict = {}
        for side, rounds in sides.items():
            per_round = [figures(outputs[index]) for outputs in rounds]
            for key in per_round[0]:
                values = [figures_of[key] for figures_of in per_round if key in figures_of]
                # the inputs (how many lines, bytes, runs), the load and the goals; not the rates
                if key in ("runs", "lines", "bytes") or key.startswith(("load_", "goal_")):
                    continue
                table.setdefault(key, {})[side] = spread(values, digits=3)
        result[label] = table
    result["outputs"] = sides
    result["wall_s"] = round(time.monotonic() - started, 1)
    emit(result)


if __name__ == "__main__":
    main()
