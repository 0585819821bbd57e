"""What the rule catalogs cost the daemon's process: RSS and Python heap of loading them, and the
CPU of the first diagnosis against the later ones, each run in a fresh interpreter.

Per run (its own `python` process, the ddtreed code of `_common.CODE`): RSS before and after
`loop.wiring.load_catalogs`' rule half (`load_rules` of the shipped rules, the scorer with them),
the Python objects it keeps (tracemalloc in a second process, since tracing slows the first);
then `RuleSet.diagnose` (thread CPU and wall) of the founding crash
(tests/corpus/logs/ddtree-verify-width-8-vs-33.log) once — the daemon's first crash — then
`--repeat` more times (the later crashes of the same kind: median), then once each for the first
crash of the real SGLang fixtures (tests/fixtures/sglang-0.5.16/*.log: a first crash of another
kind, patterns not met before), and RSS after all of it. Prints ONE JSON object (min / median /
max over `--runs`); `benchmarks/compare.py` runs it against another commit in the same invocation.

    python benchmarks/rules_footprint.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _common import CODE, REPO, emit, load_info, spread

FOUNDING = REPO / "tests" / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log"
FIXTURES = REPO / "tests" / "fixtures" / "sglang-0.5.16"

_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
trace = sys.argv[2] == "trace"


def rss_mib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.tracebacks.assembler import assemble_lines

founding = assemble_lines(open(sys.argv[3], errors="replace").read().splitlines(), "x")[0]
others = []
for name in sys.argv[5:]:
    groups = assemble_lines(open(name, errors="replace").read().splitlines(), "x")
    if groups:
        others.append(groups[0])
out = {}
if trace:
    import tracemalloc
    tracemalloc.start()
before = rss_mib()
started = time.thread_time()
rules = load_rules([shipped("rules")])
out["catalog_cpu_ms"] = (time.thread_time() - started) * 1000
out["catalog_rss_mib"] = rss_mib() - before
if trace:
    out["catalog_python_mib"] = tracemalloc.get_traced_memory()[0] / 2**20
    print(json.dumps(out))
    raise SystemExit


def timed(group):
    cpu, wall = time.thread_time(), time.perf_counter()
    diagnosis = rules.diagnose(group)
    return (time.thread_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000, diagnosis.match.rule_id


after_load = rss_mib()
cpu, wall, rule = timed(founding)
out.update(first_cpu_ms=cpu, first_wall_ms=wall, first_rss_mib=rss_mib() - after_load)
later = sorted(timed(founding)[0] for _ in range(int(sys.argv[4])))
out["later_cpu_ms"] = later[len(later) // 2]
other_cpu = [timed(group)[0] for group in others]
out["other_first_cpu_ms"] = sum(other_cpu) / len(other_cpu) if other_cpu else 0.0
out["other_first_max_cpu_ms"] = max(other_cpu, default=0.0)
out["rules_total_rss_mib"] = rss_mib() - before
out["process_rss_mib"] = rss_mib()
out["founding_rule"] = rule
print(json.dumps(out))
"""


def run_once(mode: str, repeat: int, others: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(CODE), mode, str(FOUNDING), str(repeat), *others],
                          capture_output=True, text=True, cwd=CODE, check=False)
    if done.returncode != 0:
        raise SystemExit(f"rules_footprint: the child failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20, help="later diagnoses of the founding crash")
    args = parser.parse_args()
    others = sorted(str(path) for path in FIXTURES.glob("*.log"))
    result: dict = {"benchmark": "rules_footprint", "code": str(CODE), "load_before": load_info(),
                    "timed": "load_rules(shipped rules) and RuleSet.diagnose in a fresh interpreter per run"}
    runs = [run_once("plain", args.repeat, others) for _ in range(args.runs)]
    traced = [run_once("trace", args.repeat, others) for _ in range(args.runs)]
    for key in ("catalog_rss_mib", "catalog_cpu_ms", "first_cpu_ms", "first_wall_ms", "first_rss_mib", "later_cpu_ms",
                "other_first_cpu_ms", "other_first_max_cpu_ms", "rules_total_rss_mib", "process_rss_mib"):
        result[key] = spread([run[key] for run in runs], 2)
    result["catalog_python_mib"] = spread([run["catalog_python_mib"] for run in traced], 2)
    result["founding_rule"] = sorted({run["founding_rule"] for run in runs})
    result["load_after"] = load_info()
    emit(result)


if __name__ == "__main__":
    main()
