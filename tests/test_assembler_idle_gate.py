"""The assembler's idle-line gate (issue 19 lever 4): untagged lines that cannot matter skip the
per-line parsing, and the gate never changes what is found."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddtreed.records import LogChunk
from ddtreed.tracebacks import Assembler, assembler as assembler_module

CORPUS = Path(__file__).parent / "corpus"
ENTRIES = [json.loads(line) for line in (CORPUS / "sglang-crashes.jsonl").read_text().splitlines()]
REAL_LOGS = Path("/work/shared/real-sglang/logs")
NCCL_CHATTER = (
    "h200-node-3:15978:16021 [3] NCCL INFO Channel 03/24 :    0   1   2   3   4   5   6   7",
    "h200-node-3:15978:16021 [3] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "Multi-thread loading shards: 100% Completed | 1/1 [00:00<00:00, 234.54it/s]",
    "Capturing batches (bs=256 avail_mem=9.12 GB):  3%|▎         | 1/36 [00:01<00:00, 38.2it/s]",
)
NEVER_SKIP = re.compile("")  # a gate every line passes: the assembler as it was without one


def crashes_of(lines: list[str], gate) -> list[tuple]:
    saved = assembler_module._IDLE_GATE
    assembler_module._IDLE_GATE = gate
    try:
        assembler = Assembler(eager=True)
        groups = []
        for start in range(0, len(lines), 7):  # chunks of 7 lines: state carries across chunks
            part = tuple(lines[start:start + 7])
            assembler.feed(LogChunk("s", start + 1, part, float(start), "\n".join(part)))
            groups += assembler.take(float(start))
        groups += assembler.take(float(len(lines)), final=True)
    finally:
        assembler_module._IDLE_GATE = saved
    return [tuple((c.kind, c.exception, c.message, c.rank, c.first_line, c.last_line, c.context)
                  for c in group) for group in groups]


def test_chatter_lines_never_reach_the_per_line_checks(monkeypatch):
    calls = []
    monkeypatch.setattr(Assembler, "_idle_native", lambda self, *args: calls.append(args))
    assembler = Assembler(eager=True)
    lines = NCCL_CHATTER * 50
    assembler.feed(LogChunk("s", 1, lines, 0.0, "\n".join(lines)))
    assert calls == [] and assembler.take(0.0, final=True) == []


def test_corpus_crashes_are_found_the_same_with_the_gate():
    for entry in ENTRIES:
        lines = entry["log"].splitlines()
        mixed = [line for pair in zip(lines, NCCL_CHATTER * len(lines)) for line in pair]
        for variant in (lines, mixed):
            assert crashes_of(variant, assembler_module._IDLE_GATE) == crashes_of(variant, NEVER_SKIP), entry.get("id")


def test_real_sglang_logs_are_assembled_the_same_with_the_gate():
    logs = sorted(REAL_LOGS.glob("*.log"))
    assert logs, "the real SGLang logs are missing"
    for path in logs:
        lines = path.read_text(errors="replace").splitlines()[:20000]
        assert crashes_of(lines, assembler_module._IDLE_GATE) == crashes_of(lines, NEVER_SKIP), path.name


FRAGMENTS = st.sampled_from([
    "Traceback (most recent call last):", '  File "/a.py", line 1, in f', "    x = f()", "    ^^^^^",
    "RuntimeError: half", "ValueError: bad value", "terminate called after throwing an instance of 'c10::Error'",
    "  what():  CUDA error: an illegal memory access was encountered", "Assertion `x` failed.",
    "[rank3]:[E1201 07:54:47.4 ProcessGroupNCCL.cpp:1575] [PG 0 Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1) ran for 600000 milliseconds before timing out.",
    "Fatal Python error: Segmentation fault", "Current thread 0x00007f (most recent call first):",
    "sglang serve: error: unrecognized arguments: --x", "UserWarning: something failed", "",
    "[2026-07-28 10:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    "[2026-07-28 10:00:00 TP0] Decode batch, #running-req: 4, accept len: 3.10",
    "Load weight begin. avail mem=139.13 GB", "double free or corruption (out)", *NCCL_CHATTER,
])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=80).map(lambda s: s.replace("\n", " "))), max_size=60))
def test_any_mix_of_lines_is_assembled_the_same_with_the_gate(lines):
    assert crashes_of(lines, assembler_module._IDLE_GATE) == crashes_of(lines, NEVER_SKIP)
