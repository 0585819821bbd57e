"""Session 8's adversarial pass on device-assert runs taken at once (perfthru: `scan.assert_run`,
`Group.add_assert_run`): floods written to a real file and read by the real follower in reads of a
few KB (runs split across chunks), with CRLF, NUL bytes, invalid UTF-8, a traceback header inside
and after a run, look-alike lines, and a crash after the flood: every crash field is the reference
assembler's (which reads every line itself), and a very long run keeps a bounded sample."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddtreed.logs.follower import BlockChunk
from ddtreed.tracebacks import Assembler
from ddtreed.tracebacks.groups import ASSERT_SAMPLES

sys.path.insert(0, str(Path(__file__).parent))
from test_assembler_scan import DECODE, ReferenceAssembler  # noqa: E402
from test_block_chunks import assembled, follow, plain  # noqa: E402

ASSERT = ("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{b},0,0], thread: "
          "[{t},0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.")
CRASH = ("[2026-12-01 08:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
         '  File "/srv/sglang/srt/managers/scheduler.py", line 10, in run_scheduler_process\n'
         "    scheduler.event_loop()\n"
         "RuntimeError: CUDA error: device-side assert triggered\n\n")


def flood(n: int, end: bytes = b"\n", every: int = 0, odd: bytes = b"") -> bytes:
    lines = []
    for i in range(n):
        line = ASSERT.format(b=i // 128, t=i % 128).encode()
        if every and i % every == every - 1:
            line = line.replace(b"operator()", odd)
        lines.append(line + end)
    return b"".join(lines)


STREAMS = {
    "crlf": flood(600, end=b"\r\n") + CRASH.encode(),
    "nul": flood(600, every=7, odd=b"op\x00erator()") + CRASH.encode(),
    "invalid-utf8": flood(600, every=5, odd=b"\xff\xfe\xe2\x82") + CRASH.encode(),
    "header-inside": flood(300) + (ASSERT.format(b=0, t=0) + " Traceback (most recent call last):\n").encode()
    + b'  File "x.py", line 1, in f\n' + b"RuntimeError: in the middle of a flood\n\n" + flood(300),
    "header-after": flood(500) + CRASH.encode() + flood(500),
    "look-alikes": flood(200) + b"/usr/lib/python3.12/warnings.py:1: UserWarning: Assertion ` in a warning\n"
    + b"[rank3]:" + flood(1) + b"sglang-1  | " + flood(1) + b"/ Assertion `\n" + flood(200) + CRASH.encode(),
    "segfault-in-run": flood(100) + (ASSERT.format(b=9, t=9) + " Segmentation fault (core dumped)\n").encode()
    + flood(100) + (DECODE + "\n").encode(),
    "no-final-newline": flood(400)[:-1],
}


@pytest.mark.parametrize("name", sorted(STREAMS))
@pytest.mark.parametrize("read", [700, 4096, 65536])
def test_a_flood_read_by_the_follower_is_assembled_as_the_reference_reads_it(tmp_path, name, read):
    path = tmp_path / "service.log"
    path.write_bytes((DECODE + "\n").encode() * 3 + STREAMS[name])
    chunks = follow(path, max_bytes_per_read=read)
    if name not in ("crlf", "nul"):  # those the follower decodes and splits itself
        assert any(isinstance(chunk, BlockChunk) for chunk in chunks)  # the path that takes runs at once
    got = assembled(Assembler, chunks)
    assert got == assembled(ReferenceAssembler, plain(chunks))
    assert sum(crash[-1] for group in got for crash in group) > 0  # the floods were counted as asserts


def test_a_very_long_run_keeps_a_bounded_sample_and_counts_every_line(tmp_path):
    path = tmp_path / "service.log"
    n = 200_000
    path.write_bytes(flood(n) + CRASH.encode())
    chunks = follow(path)
    assembler = Assembler(eager=True)
    groups = []
    for chunk in chunks:
        assembler.feed(chunk)
        groups += assembler.take(chunk.received_at)
    groups += assembler.take(1e9, final=True)
    assert sum(crash.device_asserts for group in groups for crash in group) >= n
    assert all(sum("Assertion `" in line for line in crash.context) <= ASSERT_SAMPLES
               for group in groups for crash in group)
    assert any(crash.message == "CUDA error: device-side assert triggered" for group in groups for crash in group)
