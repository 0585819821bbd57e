"""Long needle-free lines seen before are not read again by the automaton (`scan.CleanLines`,
issue 19: the noisy mix's 8 KB lines are two thirds of its bytes, 16 distinct ones). What a user
sees must not change: every crash group is the reference assembler's (which reads every line),
and the serving watch's events and state are those of a reading of every line, on streams where a
long line comes back verbatim, comes back with a needle or a decode mark in its middle (the same
length, the same first bytes), ends a chunk, or is one of many (the memory bound)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddtreed.health.serving import _DECODE_MARK, ServingSettings, ServingWatch
from ddtreed.logs.follower import BlockChunk
from ddtreed.tracebacks import Assembler, scan

sys.path.insert(0, str(Path(__file__).parent))
from test_assembler_scan import ReferenceAssembler  # noqa: E402
from test_block_chunks import assembled, block_chunks, plain  # noqa: E402
from test_serving_feed_fields import LineByLine, decode_line, events, state  # noqa: E402

ARGS = "[2026-12-01 07:50:01] server_args=ServerArgs(" + ", ".join(
    f"option_{index}={index * 7919 % 1000}" for index in range(600)) + ")"
assert len(ARGS) > 2 * scan.LONG_LINE


def variant(line: str, insert: str, at: int) -> str:
    """`line` with `insert` written over it at `at` (>= 64): the same length, the same first bytes."""
    return line[:at] + insert + line[at + len(insert):]


def test_a_long_line_is_known_the_second_time_and_a_look_alike_is_not():
    clean = scan.CleanLines()
    other = "[2026-12-01 07:50:02 TP0] Prefill batch, #new-seq: 1"
    data = "\n".join([other, ARGS, other]).encode()
    start = data.index(ARGS.encode())
    span = (start, start + len(ARGS))
    assert clean.spans(data) == []  # seen once: not checked yet
    again = bytes(bytearray(data))  # the same bytes, another object
    assert clean.spans(again) == [span]
    for insert in ("Traceback (most recent call last):", "RuntimeError: CUDA error", _DECODE_MARK):
        look_alike = "\n".join([other, variant(ARGS, insert, 5000), other]).encode()
        for _ in range(3):
            assert clean.spans(look_alike) == []
            assert scan.find_any_outside(look_alike, 0, clean.spans(look_alike)) == scan.find_any(look_alike)
    clean.spans(bytes(bytearray(data)))  # the look-alike took its place (same length, same ends)
    assert clean.spans(bytes(bytearray(data))) == [span]  # known again the second time


def test_a_long_line_at_the_end_of_a_chunk_and_short_lines_are_handled():
    clean = scan.CleanLines()
    data = ("x\n" * 10 + ARGS).encode()  # no newline after the last line
    clean.spans(data)
    assert clean.spans(bytes(bytearray(data))) == [(20, len(data))]
    short = ("[2026-12-01 07:50:02] " + "y" * (scan.LONG_LINE - 30) + "\n").encode() * 20
    clean.spans(short)
    assert clean.spans(bytes(bytearray(short))) == []


def test_the_lines_remembered_are_bounded():
    clean = scan.CleanLines(max_bytes=64 * 1024)
    rng = random.Random(5)
    for _ in range(200):
        line = f"[2026-12-01 07:50:01] {rng.random()} " + "z" * 9000
        data = line.encode()
        clean.spans(data)
        clean.spans(bytes(bytearray(data)))
        assert clean._bytes <= 64 * 1024
        assert clean._bytes == sum(len(line) for line, _known in clean._lines.values())


def test_needles_after_known_lines_are_found_where_the_automaton_finds_them():
    clean = scan.CleanLines()
    rng = random.Random(7)
    pieces = [ARGS, variant(ARGS, "ERROR: boom", 3000), "[2026-12-01 07:50:02] INFO: ok",
              "RuntimeError: CUDA error: an illegal memory access", "NCCL WARN timeout", "plain"]
    for _ in range(300):
        data = "\n".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12))).encode()
        spans = clean.spans(data)
        for pos in range(0, len(data), 997):
            assert scan.find_any_outside(data, pos, spans) == scan.find_any(data, pos)


TRACEBACK = ["[2026-12-01 08:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/tmp/site/sglang/srt/managers/scheduler.py", line 4623, in run_scheduler_process',
             "    scheduler.event_loop_overlap()",
             "RuntimeError: CUDA error: an illegal memory access was encountered"]
LONGS = [ARGS, variant(ARGS, "Traceback (most recent call last):", 4100),
         variant(ARGS, " RuntimeError: CUDA error: out of memory", 6000),
         variant(ARGS, "[rank3]:", 9000), "tqdm " + "#" * 5000 + " 10/100",
         variant(ARGS, " NCCL WARN ", 64)]
SHORTS = ["[2026-12-01 07:54:47 TP1] Decode batch, #running-req: 3, #token: 258, token usage: 0.01, "
          "cuda graph: True, gen throughput (token/s): 1860.69, #queue-req: 0",
          "[2026-12-01 07:54:47] INFO:     127.0.0.1:40312 - \"POST /generate HTTP/1.1\" 200 OK", ""]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(LONGS), st.sampled_from(SHORTS), st.just("TRACEBACK")),
                min_size=1, max_size=60), st.integers(1, 25))
def test_streams_with_long_lines_are_assembled_as_the_reference_reads_them(parts, size):
    lines = [line for part in parts for line in (TRACEBACK if part == "TRACEBACK" else [part])]
    data = "\n".join(lines).encode() + b"\n"
    want = assembled(ReferenceAssembler, plain(block_chunks(data, size)))
    assert assembled(Assembler, block_chunks(data, size)) == want


def test_the_noisy_mix_skips_its_long_lines_and_finds_what_the_reference_finds(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    import mixes

    path = tmp_path / "noisy.log"
    mixes.generate(str(path), "noisy", 8000)
    data = path.read_bytes()
    assembler = Assembler(eager=True)
    chunks = block_chunks(data, 300)
    skipped = 0
    for chunk in chunks:
        skipped += len(assembler.clean_lines.spans(chunk.block)) if isinstance(chunk, BlockChunk) else 0
    assert skipped > 40  # the lever is at work on this input
    assert assembled(Assembler, chunks) == assembled(ReferenceAssembler, plain(block_chunks(data, 300)))


LONG_DECODE = variant(ARGS, _DECODE_MARK + "accept len: 0.10, cuda graph: False", 5000)
ACCEPTS, GRAPHS = st.sampled_from(["4.97", "0.50", "1.20", None]), st.sampled_from(["True", "False"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(LONGS + [LONG_DECODE]), st.tuples(ACCEPTS, GRAPHS)), min_size=1, max_size=80),
       st.integers(1, 30), st.sampled_from([None, 3.0]))
def test_the_serving_watch_reads_around_the_known_lines_as_every_line_is_read(parts, size, baseline):
    """As ServiceRun feeds them: the assembler first (it learns the long lines), then the watch,
    which shares its CleanLines; the reference reads every line."""
    lines = [part if isinstance(part, str) else decode_line(part[0], part[1], 0, None) for part in parts]
    assembler = Assembler(eager=True)
    fast = ServingWatch(ServingSettings(interval_s=0), None, captured_graphs=True, baseline=baseline,
                        wall=lambda: 1.0)
    fast.clean_lines = assembler.clean_lines
    reference = LineByLine(ServingSettings(interval_s=0), None, captured_graphs=True, baseline=baseline,
                           wall=lambda: 1.0)
    for at in range(0, len(lines), size):
        chunk = BlockChunk.of("s", at + 1, "\n".join(lines[at:at + size]).encode(), 0.0)
        assembler.feed(chunk)
        assert events(fast.feed(chunk)) == events(reference.feed(chunk))
        assert state(fast) == state(reference)
