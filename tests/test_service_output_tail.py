"""The pump hands `ServiceOutput` only each chunk's last TAIL_LINES lines (`service_run.tail_of`):
what an incident keeps of the service's output is the same as when it saw every line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.incidents.stderr_tail import TAIL_LINES, ServiceOutput
from ddtreed.records import LogChunk
from ddtreed.logs.follower import BlockChunk
from ddtreed.service.service_run import NewestChunks, tail_of, tails_of

LINE = st.one_of(st.text(max_size=30), st.text(min_size=400, max_size=900),  # long: the byte bound trims
                 st.sampled_from(["RuntimeError: boom", "[2026-07-28 10:00:00 TP0] Decode batch", ""]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(LINE, min_size=1, max_size=3 * TAIL_LINES)), max_size=6))
def test_the_tails_are_the_same_as_when_every_line_is_fed(chunks):
    every, tails = ServiceOutput(["err"], ["out"]), ServiceOutput(["err"], ["out"])
    number = 1
    for on_stderr, lines in chunks:
        chunk = LogChunk("err" if on_stderr else "out", number, tuple(lines), 0.0, "\n".join(lines))
        number += len(lines)
        every.feed(chunk)
        tails.feed(tail_of(chunk))
    assert (tails.stderr.lines(), tails.stdout.lines()) == (every.stderr.lines(), every.stdout.lines())
    assert tails.evidence(exit_code=1) == every.evidence(exit_code=1)


def test_a_long_chunk_is_cut_to_its_last_lines_with_their_numbers():
    lines = tuple(f"line {index}" for index in range(1, 1001))
    tail = tail_of(LogChunk("err", 1, lines, 0.0, "\n".join(lines)))
    assert tail.lines == lines[-TAIL_LINES:] and tail.first_number == 1001 - TAIL_LINES


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.booleans(), st.booleans(),
                                   st.lists(LINE, min_size=1, max_size=2 * TAIL_LINES)), max_size=8), max_size=4))
def test_a_read_hands_only_the_newest_chunks_of_each_source_and_the_tails_are_the_same(reads):
    """`tails_of` (what the pump feeds after each read): per source only the chunks that hold its
    last TAIL_LINES lines, follower BlockChunks among them."""
    every, tails = ServiceOutput(["err"], ["out"]), ServiceOutput(["err"], ["out"])
    number = 1
    for read in reads:
        chunks = []
        for on_stderr, as_block, lines in read:
            lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
            source = "err" if on_stderr else "out"
            text = "\n".join(lines)
            chunks.append(BlockChunk.of(source, number, text.encode("utf-8", "surrogatepass"), 0.0) if as_block
                          else LogChunk(source, number, tuple(lines), 0.0, text))
            number += len(lines)
        for chunk in chunks:
            every.feed(LogChunk(chunk.source, chunk.first_number, tuple(chunk.lines), 0.0))
        for tail in tails_of(chunks):
            tails.feed(tail)
        assert (tails.stderr.lines(), tails.stdout.lines()) == (every.stderr.lines(), every.stdout.lines())
    assert tails.evidence(exit_code=1) == every.evidence(exit_code=1)


def test_of_a_long_read_only_the_last_chunks_are_cut_and_handed_on():
    chunks = [LogChunk("out", 1 + 100 * index, tuple(f"line {100 * index + n}" for n in range(100)), 0.0)
              for index in range(16)] + [LogChunk("err", 9999, ("one error",), 0.0)]
    handed = tails_of(chunks)
    assert [(tail.source, tail.first_number, len(tail.lines)) for tail in handed] == \
        [("out", 1561, TAIL_LINES), ("err", 9999, 1)]


def test_a_short_newest_chunk_takes_the_lines_before_it_from_the_chunk_before():
    first = LogChunk("err", 1, tuple(f"old {n}" for n in range(50)), 0.0)
    last = LogChunk("err", 51, tuple(f"new {n}" for n in range(35)), 0.0)
    tails = ServiceOutput(["err"], ["out"])
    for tail in tails_of([first, last]):
        tails.feed(tail)
    assert tails.stderr.lines() == [f"old {n}" for n in range(45, 50)] + [f"new {n}" for n in range(35)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.booleans(), st.booleans(),
                                   st.lists(LINE, min_size=1, max_size=2 * TAIL_LINES)), max_size=8), max_size=6),
       st.sets(st.integers(0, 5)))
def test_the_newest_chunks_kept_across_reads_give_the_same_tails(reads, asked_after):
    """`NewestChunks` (what the pump keeps instead of feeding the tails on every read): whenever
    an incident asks, the tails are those of every line fed, however often it was asked before."""
    every, tails, kept = ServiceOutput(["err"], ["out"]), ServiceOutput(["err"], ["out"]), NewestChunks()
    number = 1
    for index, read in enumerate(reads):
        chunks = []
        for on_stderr, as_block, lines in read:
            lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
            source = "err" if on_stderr else "out"
            text = "\n".join(lines)
            chunks.append(BlockChunk.of(source, number, text.encode("utf-8", "surrogatepass"), 0.0) if as_block
                          else LogChunk(source, number, tuple(lines), 0.0, text))
            number += len(lines)
        for chunk in chunks:
            every.feed(LogChunk(chunk.source, chunk.first_number, tuple(chunk.lines), 0.0))
        kept.add(chunks)
        if index in asked_after:
            for tail in tails_of(kept.take()):
                tails.feed(tail)
            assert (tails.stderr.lines(), tails.stdout.lines()) == (every.stderr.lines(), every.stdout.lines())
    for tail in tails_of(kept.take()):
        tails.feed(tail)
    assert tails.evidence(exit_code=1) == every.evidence(exit_code=1)


def test_only_the_chunks_that_hold_the_last_lines_are_kept():
    kept = NewestChunks()
    kept.add([LogChunk("out", 1 + 10 * index, tuple(f"line {10 * index + n}" for n in range(10)), 0.0)
              for index in range(50)] + [LogChunk("err", 1, ("one error",), 0.0)])
    held = kept.take()
    assert [(chunk.source, chunk.first_number) for chunk in held] == \
        [("out", 1 + 10 * index) for index in range(46, 50)] + [("err", 1)]
    assert kept.take() == []
