"""`scan.find_any` / `find_tagged` / `find_idle` call the compiled RE2 pattern's `Match` directly
(issue 19: the module's `search` costs ~3 µs a call in Python wrappers, a dense chunk makes one call
per selected line). They must answer what `pattern.search(data, pos, end).start()` answers, -1 for
no match, for any bytes and any offsets, past the end included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.tracebacks import grammar, scan

PIECES = [needle.encode() for needle in grammar.TAGGED_NEEDLES + scan.IDLE_NEEDLES] + [
    b"\n", b"[2026-12-01 08:00:00 TP3] ", b"Decode batch, ", b"\xff\xfe", "é".encode(), b"x" * 50]


def searched(pattern, data: bytes, pos: int, end: int | None) -> int:
    match = pattern.search(data, pos) if end is None else pattern.search(data, pos, end)
    return -1 if match is None else match.start()


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PIECES) | st.binary(max_size=20), max_size=30), st.integers(0, 900),
       st.none() | st.integers(0, 900))
def test_the_finders_answer_what_search_answers(parts, pos, end):
    data = b"".join(parts)
    for finder, pattern in ((scan.find_any, scan.ANY_NEEDLE), (scan.find_tagged, scan.TAGGED_NEEDLE),
                            (scan.find_idle, scan.IDLE_NEEDLE)):
        assert finder(data, pos, end) == searched(pattern, data, pos, end), (finder, pos, end)


def test_a_needle_is_found_where_it_starts():
    data = b"[2026-12-01 08:00:00 TP0] Decode batch\nuntagged Traceback (most recent call last):\n"
    assert scan.find_any(data) == data.index(b"Traceback")
    assert scan.find_any(data, data.index(b"Traceback") + 1) == -1
    assert scan.find_tagged(data, 0, data.index(b"Traceback")) == -1
