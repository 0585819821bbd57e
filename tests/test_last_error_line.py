"""`last_error_line` reads the tail from its newest line back (one search for a crash's tail that
ends in its exception line): the line it names is the one a reading from the first line finds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.incidents.stderr_tail import _ERROR_LINE, _NOT_AN_ERROR, ServiceOutput, last_error_line
from ddtreed.records import LogChunk


def forward(lines) -> str | None:
    """The reference: every line read in order, the last that reads as an error kept."""
    found = None
    for line in lines:
        if line.strip() and not _NOT_AN_ERROR.match(line) and _ERROR_LINE.search(line):
            found = line.strip()
    return found


LINE = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["RuntimeError: boom", "  ValueError: bad value  ", "Traceback (most recent call last):",
                     '  File "/x.py", line 3, in f', "    ^^^^^", "    ~~~~", "", "   ",
                     "[2026-12-01 08:00:00 TP0] Scheduler hit an exception:", "ERROR: failed", "fatal: no",
                     "Segmentation fault (core dumped)", "KeyboardInterrupt", "error: x", "decode batch",
                     '  File "/y.py", line 9, in g: RuntimeError: inside a frame line']))


@settings(max_examples=400, deadline=None)
@given(st.lists(LINE, max_size=60))
def test_the_same_line_as_a_forward_reading(lines):
    assert last_error_line(lines) == forward(lines)
    assert last_error_line(tuple(lines)) == forward(lines)
    assert last_error_line(iter(lines)) == forward(lines)  # any iterable, read once


def test_a_crash_tail_names_its_exception_line_and_a_later_error_wins():
    tail = ["Traceback (most recent call last):", '  File "/srv/scheduler.py", line 10, in run',
            "RuntimeError: The size of tensor a (8) must match", "", "    ^^^^"]
    assert last_error_line(tail) == "RuntimeError: The size of tensor a (8) must match"
    assert last_error_line(tail + ["[TP1] ERROR: the launcher is going down"]) == \
        "[TP1] ERROR: the launcher is going down"
    assert last_error_line(["all good", "decode batch", ""]) is None
    assert last_error_line([]) is None


def test_the_incident_evidence_keeps_the_last_error_of_stderr_else_stdout():
    output = ServiceOutput(["err"], ["out"])
    output.feed(LogChunk("out", 1, ("ValueError: only on stdout", "ok"), 0.0, ""))
    output.feed(LogChunk("err", 1, ("starting", "loading"), 0.0, ""))
    assert output.evidence(exit_code=1)["last_error"] == "ValueError: only on stdout"
    output.feed(LogChunk("err", 3, ("RuntimeError: on stderr", "  File \"/a.py\", line 1"), 0.0, ""))
    found = output.evidence(signal=9)
    assert found["last_error"] == "RuntimeError: on stderr" and found["signal_name"] == "SIGKILL"
