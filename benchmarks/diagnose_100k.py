"""Time and peak memory to diagnose a generated 100,000-line SGLang log (one JSON object on stdout).

The log mixes decode progress from 8 ranks, a device-side-assert flood of per-thread lines, and
tracebacks from several ranks whose lines interleave, as a real TP8 crash prints them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddtreed.ops.logsetup import configure  # noqa: E402  (after the path insert, on purpose)
from ddtreed.paths import shipped  # noqa: E402
from ddtreed.rules import load_rules  # noqa: E402
from ddtreed.tracebacks import assemble_lines  # noqa: E402

SITE = "/opt/venv/lib/python3.12/site-packages/sglang/srt"
ASSERT_LINE = ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [{b},0,0], "
               "thread: [{t},0,0] Assertion `index out of bounds` failed.")


def traceback_lines(rank: str) -> list[str]:
    return [
        f"[2026-02-03 10:00:00 {rank}] Scheduler hit an exception: Traceback (most recent call last):",
        f'  File "{SITE}/managers/scheduler.py", line 2984, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        f'  File "{SITE}/speculative/eagle_utils.py", line 400, in select_top_k_tokens',
        "    input_ids = torch.gather(topk_index, index=idx, dim=1)",
        "torch.AcceleratorError: CUDA error: device-side assert triggered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "",
    ]


def generate(total: int, flood: int, ranks: int) -> list[str]:
    """`total` lines: progress, then a flood, then interleaved tracebacks from `ranks` ranks."""
    tracebacks = [traceback_lines(f"TP{r}") for r in range(ranks)]
    tail = sum(len(t) for t in tracebacks) + 1
    progress = total - flood - tail
    lines = [f"[2026-02-03 09:{(i // 60) % 60:02d}:{i % 60:02d} TP{i % ranks}] Decode batch, #running-req: 32, "
             f"#token: {1000 + i}, token usage: 0.10, accept len: 3.10, cuda graph: True, "
             f"gen throughput (token/s): 2000.00, #queue-req: 0" for i in range(progress)]
    lines += [ASSERT_LINE.format(b=i % 64, t=i % 128) for i in range(flood)]
    # Ranks print their tracebacks at once: interleave them line by line.
    for row in range(max(len(t) for t in tracebacks)):
        lines += [t[row] for t in tracebacks if row < len(t)]
    lines.append("[2026-02-03 10:00:01] SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--flood", type=int, default=20_000, help="device-assert lines")
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    configure(json_output=False, level="warning", stream=sys.stderr)  # stdout carries only the JSON
    rules = load_rules([shipped("rules")])
    lines = generate(args.lines, args.flood, args.ranks)
    tracemalloc.start()
    started = time.perf_counter()
    groups = assemble_lines(lines, "generated.log")
    assembled = time.perf_counter()
    diagnoses = [rules.diagnose(group) for group in groups]
    finished = time.perf_counter()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({
        "lines": len(lines), "flood_lines": args.flood, "ranks": args.ranks, "rules": len(rules),
        "incidents": len(diagnoses),
        "categories": [d.match.category for d in diagnoses],
        "crashes_in_first_incident": len(groups[0]) if groups else 0,
        "assemble_s": round(assembled - started, 4),
        "diagnose_s": round(finished - assembled, 4),
        "total_s": round(finished - started, 4),
        "lines_per_s": round(len(lines) / (finished - started)),
        "peak_traced_mib": round(peak / 2**20, 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
