"""Lines per second through the real Follower → Assembler → signature_of → rules path.

Generates a 2,000,000-line SGLang log (decode/prefill progress from 8 ranks, ~100 tracebacks of
10–40 lines whose ranks interleave, one device-assert flood), then prints ONE JSON object with
the pipeline's rate, a plain 64 KiB read-and-split loop's rate and drain3's rate for comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog  # noqa: E402  (after the path insert, on purpose)

from ddtreed.logs import Follower  # noqa: E402
from ddtreed.signature import signature_of  # noqa: E402
from ddtreed.tracebacks import Assembler  # noqa: E402

SITE = "/opt/venv/lib/python3.12/site-packages"
FRAMES = [
    ("sglang/srt/managers/scheduler.py", "run_scheduler_process", "scheduler.event_loop_normal()"),
    ("torch/utils/_contextlib.py", "decorate_context", "return func(*args, **kwargs)"),
    ("sglang/srt/managers/scheduler.py", "event_loop_normal", "result = self.run_batch(batch)"),
    ("sglang/srt/managers/scheduler.py", "run_batch", "batch_result = self.draft_worker.forward(b)"),
    ("sglang/srt/speculative/dflash_worker.py", "forward_batch_generation", "out = self.verify(b)"),
    ("sglang/srt/model_executor/model_runner.py", "forward", "return self._forward_raw(b)"),
    ("sglang/srt/model_executor/cuda_graph_runner.py", "replay", "self.replay_prepare(b)"),
    ("sglang/srt/model_executor/cuda_graph_runner.py", "replay_prepare", "self.input_ids.copy_(ids)"),
]
ASSERT_LINE = ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{b},0,0], "
               "thread: [{t},0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of "
               "bounds\"` failed.")


def progress(rng: random.Random, second: int) -> str:
    rank = rng.randrange(8)
    stamp = f"[2026-07-28 10:{second // 60 % 60:02d}:{second % 60:02d} DP0 TP{rank}]"
    if rng.random() < 0.8:
        return (f"{stamp} Decode batch, #running-req: {rng.randrange(48)}, #token: {rng.randrange(99999)}, "
                f"token usage: 0.{rng.randrange(99):02d}, accept len: 3.{rng.randrange(99):02d}, "
                f"accept rate: 0.{rng.randrange(99):02d}, cuda graph: True, gen throughput (token/s): "
                f"{rng.randrange(9000)}.{rng.randrange(99):02d}, #queue-req: 0")
    return (f"{stamp} Prefill batch, #new-seq: 1, #new-token: {rng.randrange(4096)}, #cached-token: 0, "
            f"token usage: 0.0{rng.randrange(9)}, #running-req: {rng.randrange(48)}, #queue-req: 0,")


def body(rng: random.Random, serial: int, device_assert: bool) -> list[str]:
    lines = []
    for _ in range(rng.randrange(4, 18)):  # 2 lines per frame: 10–40 lines with header/message
        module, function, code = rng.choice(FRAMES)
        lines += [f'  File "{SITE}/{module}", line {rng.randrange(9999)}, in {function}', f"    {code}"]
    if device_assert:
        lines += ["torch.AcceleratorError: CUDA error: device-side assert triggered",
                  "CUDA kernel errors might be asynchronously reported at some other API call, so the "
                  "stacktrace below might be incorrect.",
                  "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"]
    else:
        lines.append(f"RuntimeError: The size of tensor a (8) must match the size of tensor b "
                     f"({serial}) at non-singleton dimension 0")
    return lines + [""]


def crash_event(rng: random.Random, first_serial: int, ranks: int, device_assert: bool) -> list[str]:
    """Several ranks failing together: their header lines first, then the untagged bodies."""
    chosen = rng.sample(range(8), ranks)
    lines = [f"[2026-07-28 11:00:00 DP0 TP{rank}] Scheduler hit an exception: Traceback (most recent "
             f"call last):" for rank in chosen]
    for offset in range(ranks):
        lines += body(rng, first_serial + offset, device_assert)
    return lines + ["[2026-07-28 11:00:00] SIGQUIT received. signum=None, frame=None. It usually "
                    "means one child failed."]


def generate(path: str, total: int, seed: int = 7) -> int:
    """Write the log; the number of tracebacks written."""
    rng = random.Random(seed)
    events = sorted(rng.sample(range(1000, total - 1000), 40))
    flood_at = events[len(events) // 2]
    written = lines = 0
    with open(path, "w") as handle:
        buffer: list[str] = []
        for index in range(total):
            if events and index == events[0]:
                events.pop(0)
                if index == flood_at:
                    buffer += [ASSERT_LINE.format(b=i // 128, t=i % 128) for i in range(4096)]
                ranks = rng.randrange(1, 5)
                buffer += crash_event(rng, written, ranks, device_assert=index == flood_at)
                written += ranks
            buffer.append(progress(rng, index // 30000))
            if len(buffer) >= 50000:
                lines += len(buffer)
                handle.write("\n".join(buffer) + "\n")
                buffer = []
        lines += len(buffer)
        handle.write("\n".join(buffer) + "\n")
    return written, lines


def pipeline(path: str) -> dict:
    """Follower → Assembler → signature_of → rules over the whole file."""
    diagnose, note = load_diagnose()
    assembler = Assembler()
    found = lines = 0
    started = time.perf_counter()
    with Follower([path]) as follower:
        while True:
            chunks = follower.read()  # at most max_bytes_per_read: chunks stay in cache
            if not chunks and not follower.wait(0):
                break
            for chunk in chunks:
                lines += len(chunk.lines)
                assembler.feed(chunk)
            found += handle_groups(assembler.take(time.time()), diagnose)
    found += handle_groups(assembler.take(time.time(), final=True), diagnose)
    elapsed = time.perf_counter() - started
    return {"lines": lines, "seconds": elapsed, "found": found, "rules_note": note}


RULES_SECONDS = [0.0]  # time inside the rules stage, reported apart


def handle_groups(groups, diagnose) -> int:
    found = 0
    for group in groups:
        for crash in group:
            signature_of(crash)
            found += crash.exception is not None and crash.kind == "traceback"
        if diagnose is not None:
            started = time.perf_counter()
            diagnose(group)
            RULES_SECONDS[0] += time.perf_counter() - started
    return found


def load_diagnose():
    """The rules stage when `ddtreed.rules` imports (another developer's package)."""
    try:
        from ddtreed.paths import shipped
        from ddtreed.rules import load_rules
    except ImportError as error:
        return None, f"rules stage skipped: {error}"
    rules = load_rules([shipped("rules")])
    return (lambda group: rules.diagnose(group, None)), f"rules stage: {len(rules.rules)} shipped rules"


def plain_split(path: str) -> tuple[int, float]:
    """The floor: 64 KiB reads split into lines (bytes, no decoding), nothing else."""
    count, partial = 0, b""
    started = time.perf_counter()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(65536)
            if not block:
                break
            pieces = (partial + block).split(b"\n")
            partial = pieces.pop()
            count += len(pieces)
    return count, time.perf_counter() - started


def drain3_rate(path: str, limit: int) -> tuple[int, float]:
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
    return count, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--drain3-lines", type=int, default=200_000)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    with tempfile.TemporaryDirectory(prefix="ddtreed-bench-") as directory:
        path = os.path.join(directory, "sglang.log")
        generated, total_lines = generate(path, args.lines)
        result = pipeline(path)
        split_lines, split_seconds = plain_split(path)
        drain_lines, drain_seconds = drain3_rate(path, args.drain3_lines)
        size = os.path.getsize(path)
    print(json.dumps({
        "lines": result["lines"],
        "bytes": size,
        "seconds": round(result["seconds"], 3),
        "lines_per_s": round(result["lines"] / result["seconds"]),
        "readlines_lines_per_s": round(split_lines / split_seconds),
        "drain3_lines_per_s": round(drain_lines / drain_seconds),
        "drain3_note": f"drain3 TemplateMiner() defaults over the first {drain_lines} lines",
        "tracebacks_generated": generated,
        "tracebacks_found": result["found"],
        "rules": result["rules_note"],
        "rules_seconds": round(RULES_SECONDS[0], 3),
        "lines_per_s_before_rules": round(result["lines"] / (result["seconds"] - RULES_SECONDS[0])),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "lines_generated": total_lines,
    }))


if __name__ == "__main__":
    main()
