"""Untagged lines outside a traceback are remembered by their text (`Assembler._idle_effects`): a
line seen before applies what it did then (the torch rank, the recent notable lines, the
communication failure lines) without the per-line checks (issue 19: NCCL chatter and repeated
warnings were most of the noisy mix's time). What a user sees must not change: every field of
every crash group is the reference assembler's (tests/test_assembler_scan.py, which reads every
line itself), on real SGLang 0.5.16 logs, the benchmark mixes and generated streams that repeat
lines of every kind, in chunks of any size, from bytes and from text, with the memory small
enough to be forgotten and learned again mid-stream."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddtreed.tracebacks import Assembler, assembler as assembler_module

sys.path.insert(0, str(Path(__file__).parent))
from test_assembler_scan import DECODE, ReferenceAssembler, outcome  # noqa: E402
from test_block_chunks import assembled, block_chunks, plain  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "sglang-0.5.16"
REAL_LOGS = Path("/work/shared/real-sglang/logs")

# Lines that repeat in real output, each with a different effect when idle, and the lines that
# make a source busy or end a crash, so that a remembered line meets every state.
REPEATED = (
    # torch's rank prefix and a benign c10d warning (recent line, no failure line)
    "[rank3]:[W1201 07:54:47.401912563 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() "
    "was not called before program exit, which can leak resources.",
    # a communication failure line (kept as a death's context)
    "[rank1]:[E1201 07:54:47.401912563 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 1] Process group watchdog "
    "failed: NCCL error: unhandled system error",
    "h200-node-3:15978:16021 [2] transport/net_socket.cc:540 NCCL WARN NET/Socket : peer closed connection",
    "h200-node-3:15978:16021 [3] NCCL INFO Channel 03/24 :    0   1   2   3   4   5   6   7",
    "/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear "
    "to be 1 leaked semaphore objects to clean up at shutdown",
    "  warnings.warn(",
    "",
    "   ",
    "[rank5]: some output of rank 5",
    "Multi-thread loading shards: 100% Completed | 1/1 [00:00<00:00, 234.54it/s]",
    "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [3,0,0], thread: [7,0,0] "
    "Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "  what():  [PG 0 Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5) ran for 600000 ms",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "Traceback (most recent call last):",
    '  File "/tmp/site/sglang/srt/managers/scheduler.py", line 4623, in run_scheduler_process',
    "    scheduler = Scheduler(",
    "torch.OutOfMemoryError: CUDA out of memory.",
    "[2026-12-01 08:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "[2026-12-01 08:00:01] Subprocess scheduler_0 (pid=4242) crashed with exit code -9.",
    "[2026-12-01 08:00:01 TP0] Load weight begin. avail mem=139.13 GB",
    "Killed",
    DECODE,
)


def real_logs() -> list[Path]:
    return sorted(FIXTURES.glob("*.log")) + sorted(REAL_LOGS.glob("*.log"))


def test_real_sglang_logs_are_assembled_as_the_reference_reads_them():
    logs = real_logs()
    assert logs, "the real SGLang 0.5.16 logs are missing"
    for path in logs:
        data = path.read_bytes()
        lines = data.decode("utf-8", "replace").splitlines()[:20000]
        doubled = lines + lines  # every line a second time: now remembered
        for size in (1, 13, 400):
            assert outcome(Assembler, doubled, size) == outcome(ReferenceAssembler, doubled, size), (path, size)
        raw = b"\n".join(line.encode("utf-8", "surrogateescape") for line in doubled) + b"\n"
        for size in (7, 300):
            assert assembled(Assembler, block_chunks(raw, size)) == \
                assembled(ReferenceAssembler, plain(block_chunks(raw, size))), (path, size)


def test_the_benchmark_mixes_are_assembled_as_the_reference_reads_them():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import mixes
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    for mix in mixes.MIXES:
        lines, _ = mixes._base(mix, 12000, seed=5)
        lines = mixes.startup() + lines + lines
        raw = "\n".join(lines).encode() + b"\n"
        for size in (300, 1000):
            assert assembled(Assembler, block_chunks(raw, size)) == \
                assembled(ReferenceAssembler, plain(block_chunks(raw, size))), (mix, size)


def test_a_remembered_failure_line_is_the_context_of_a_later_death():
    """The NCCL failure line the second time round is remembered, not re-read: the death after it
    still carries it (and its line number puts it within the window)."""
    failure = REPEATED[1]
    death = "[2026-12-01 08:00:01] Subprocess scheduler_0 (pid=4242) crashed with exit code -9."
    lines = [failure, DECODE, failure, DECODE, death]
    for size in (1, 2, 5):
        groups = outcome(Assembler, lines, size)
        assert groups == outcome(ReferenceAssembler, lines, size)
        (crash,) = groups[0]
        assert crash[0] == "child-death"
        assert any("Process group watchdog failed" in line for line in crash[9]), crash[9]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(picks=st.lists(st.integers(0, len(REPEATED) - 1), min_size=1, max_size=120),
       size=st.integers(1, 40), memory=st.sampled_from([1, 2, 5, 1024]), from_bytes=st.booleans())
def test_any_stream_of_repeated_lines_is_assembled_as_the_reference_reads_it(picks, size, memory, from_bytes):
    lines = [REPEATED[pick] for pick in picks]
    saved = assembler_module.MAX_IDLE_EFFECTS
    assembler_module.MAX_IDLE_EFFECTS = memory  # forgotten and learned again mid-stream
    try:
        if from_bytes:
            raw = "\n".join(lines).encode() + b"\n"
            assert assembled(Assembler, block_chunks(raw, size)) == \
                assembled(ReferenceAssembler, plain(block_chunks(raw, size)))
        else:
            assert outcome(Assembler, lines, size) == outcome(ReferenceAssembler, lines, size)
    finally:
        assembler_module.MAX_IDLE_EFFECTS = saved



def test_a_remembered_rank_prefix_names_the_rank_of_the_next_traceback():
    """`[rank5]:` seen again after `[rank3]:` makes the next untagged traceback rank 5's."""
    rank5, rank3 = REPEATED[8], REPEATED[0]
    traceback = [REPEATED[14], REPEATED[15], REPEATED[16], REPEATED[17]]
    lines = [rank5, rank3, rank5, *traceback]
    for size in (1, 3, 7):
        groups = outcome(Assembler, lines, size)
        assert groups == outcome(ReferenceAssembler, lines, size)
        (crash,) = groups[0]
        assert (crash[1], crash[3]) == ("torch.OutOfMemoryError", "rank5"), crash
