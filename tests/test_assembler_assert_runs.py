"""A run of device-side assert lines is taken at once (`scan.assert_run`, `Group.add_assert_run`):
CUDA prints one such line per GPU thread, thousands in a row (the noisy mix's floods), and each
one, read while its source is idle, only adds an assert. What a user sees must not change: every
field of every crash group (the assert count and samples included) is the reference assembler's
(tests/test_assembler_scan.py, which reads every line itself), on floods cut anywhere by chunks,
floods with a traceback header, a frame, a tag or another prefix on some of their lines, floods
inside a traceback, and floods of the benchmark mixes."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddtreed.tracebacks import Assembler, scan
from ddtreed.tracebacks.groups import ASSERT_SAMPLES

sys.path.insert(0, str(Path(__file__).parent))
from test_assembler_scan import DECODE, ReferenceAssembler  # noqa: E402
from test_block_chunks import assembled, block_chunks, plain  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ASSERT = ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{b},0,0], thread: "
          "[{t},0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.")
# Lines a flood meets, and lines that look like assert lines but act otherwise (or differently).
OTHERS = (
    DECODE,
    "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: Assertion `x` failed. Traceback (most recent call last):",
    "/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: leaked",
    "[rank3]:/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: Assertion `x` failed.",
    "sglang-1  | /pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: Assertion `x` failed.",
    '  File "/tmp/site/sglang/srt/managers/scheduler.py", line 4623, in run_scheduler_process',
    "Traceback (most recent call last):",
    "[2026-12-01 08:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "RuntimeError: CUDA error: device-side assert triggered",
    "terminate called after throwing an instance of 'c10::Error'",
    "  what():  CUDA error: device-side assert triggered",
    "[2026-12-01 08:00:01] Subprocess scheduler_0 (pid=4242) crashed with exit code -6.",
    "/ Assertion `",
    "",
    "/pytorch/x.cu:1: Assertion `\xe9\u00ff` failed \udcff.",
)


def raw(lines: list[str]) -> bytes:
    return "\n".join(lines).encode("utf-8", "surrogateescape") + b"\n"


def same(lines: list[str], sizes) -> list:
    data = raw(lines)
    found = None
    for size in sizes:
        got = assembled(Assembler, block_chunks(data, size))
        assert got == assembled(ReferenceAssembler, plain(block_chunks(data, size))), size
        found = got
    return found


def test_a_flood_cut_anywhere_is_counted_and_sampled_as_the_reference_does():
    flood = [ASSERT.format(b=i // 128, t=i % 128) for i in range(1000)]
    lines = [DECODE] * 5 + flood + [DECODE] * 5
    groups = same(lines, sizes=(1, 2, 3, 7, 64, 333, 4096))
    ((crash,),) = [group for group in groups if group]
    assert crash[-1] == 1000  # device_asserts
    assert sum("Assertion `" in line for line in crash[10]) == ASSERT_SAMPLES  # the first ones, as samples


def test_a_flood_inside_a_traceback_is_its_body():
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1, in f'] + \
        [ASSERT.format(b=0, t=i) for i in range(50)] + ["RuntimeError: boom", "", DECODE]
    same(lines, sizes=(1, 5, 64))


def test_the_run_stops_at_a_line_that_is_not_a_plain_assert_line():
    flood = [ASSERT.format(b=0, t=i) for i in range(10)]
    data = raw(flood + [OTHERS[1]] + flood)
    assert scan.assert_run(data, 0) == (10, data.index(OTHERS[1].encode()))
    assert scan.assert_run(data, data.index(OTHERS[1].encode())) == (0, data.index(OTHERS[1].encode()))
    last = raw(flood)[:-1]  # the chunk's last line has no newline after it
    assert scan.assert_run(last, 0) == (10, len(last))
    assert scan.assert_run(raw([DECODE] + flood), 0) == (0, 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.one_of(st.integers(0, len(OTHERS) - 1), st.integers(1, 40).map(lambda n: -n)),
                      min_size=1, max_size=30),
       size=st.integers(1, 60))
def test_any_stream_of_floods_and_other_lines_is_assembled_as_the_reference_reads_it(parts, size):
    lines: list[str] = []
    for part in parts:
        if part < 0:  # a flood of -part assert lines
            lines += [ASSERT.format(b=len(lines), t=i) for i in range(-part)]
        else:
            lines.append(OTHERS[part])
    data = raw(lines)
    assert assembled(Assembler, block_chunks(data, size)) == \
        assembled(ReferenceAssembler, plain(block_chunks(data, size)))


def test_the_noisy_mix_floods_are_assembled_as_the_reference_reads_them():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import mixes
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    lines, _ = mixes._base("noisy", 12000, seed=7)
    groups = same(mixes.startup() + lines, sizes=(97, 333, 1000))
    assert any(crash[-1] for group in groups for crash in group)  # the floods are crashes (times: line numbers)
