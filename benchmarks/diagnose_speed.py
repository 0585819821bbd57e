"""Seconds for `ddtreed diagnose`'s own path (context from the log, paste handling, assembly, rules)
on the generated 100,000-line log and on a crash with a 64 KB message, with a same-run baseline:
the same inputs through another checkout (`--baseline DIR`, e.g. the original main), each run in
its own interpreter, best of `--repeat`. One JSON object on stdout.

    python benchmarks/diagnose_speed.py --baseline /path/to/main-checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_CHILD = r"""
import contextlib, io, json, sys, time
sys.path.insert(0, sys.argv[1])
from ddtreed.cli.diagnose_cmd import diagnose_file
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
with contextlib.redirect_stdout(io.StringIO()):
    rules = load_rules([shipped("rules")])
out = {}
for name in sys.argv[2:]:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        diagnoses = diagnose_file(name, rules, None)
    out[name] = {"seconds": time.perf_counter() - started,
                 "categories": [d.match.category for d in diagnoses]}
print(json.dumps(out))
"""


def _inputs(directory: str) -> dict[str, str]:
    sys.path.insert(0, str(HERE))
    import importlib.util

    spec = importlib.util.spec_from_file_location("diagnose_100k", HERE / "diagnose_100k.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    big = os.path.join(directory, "100k.log")
    Path(big).write_text("\n".join(module.generate(100_000, 20_000, 8)) + "\n")
    words = "the piece wise graph runner required tensor failed to "
    long = os.path.join(directory, "64kb-message.log")
    Path(long).write_text(
        "[2026-12-01 08:01:22] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 1, in capture\n'
        "    run()\n" f"RuntimeError: {(words * 1300)[:65536]}\n")
    return {"100k_lines": big, "64kb_message": long}


def _run(checkout: str, files: dict[str, str], repeat: int, timeout: float) -> dict:
    best: dict[str, dict] = {}
    for label, path in files.items():
        for _ in range(repeat):
            try:
                done = subprocess.run([sys.executable, "-c", _CHILD, checkout, path], capture_output=True, text=True,
                                      timeout=timeout, env={**os.environ, "PYTHONPATH": checkout})
            except subprocess.TimeoutExpired:
                best[label] = {"seconds": None, "note": f"did not finish in {timeout:g} s"}
                break
            if done.returncode != 0:
                best[label] = {"error": done.stderr[-500:]}
                break
            row = json.loads(done.stdout.splitlines()[-1])[path]
            if label not in best or row["seconds"] < best[label]["seconds"]:
                best[label] = {"seconds": round(row["seconds"], 4), "categories": row["categories"]}
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="another checkout to run the same inputs through")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="per run, seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddtreed-speed-") as directory:
        files = _inputs(directory)
        report = {"this": {"checkout": str(ROOT), **_run(str(ROOT), files, args.repeat, args.timeout)}}
        if args.baseline:
            report["baseline"] = {"checkout": args.baseline,
                                  **_run(args.baseline, files, args.repeat, args.timeout)}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
