"""The pump hands `ServiceOutput` only each chunk's last TAIL_LINES lines (`service_run.tail_of`):
what an incident keeps of the service's output is the same as when it saw every line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.incidents.stderr_tail import TAIL_LINES, ServiceOutput
from ddtreed.records import LogChunk
from ddtreed.service.service_run import tail_of

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
