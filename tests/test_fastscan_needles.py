"""`ddtreed._fastscan.first`, the C needle finder behind `scan.find_any` / `find_tagged` /
`find_idle` where the extension is loaded, must answer what the RE2 pass answers
(`scan._finder(pattern)`, itself held to `pattern.search` by tests/test_scan_finders.py): the
offset of the first needle in `data[pos:end]`, -1 for none, for any bytes and any offsets. Where
a C compiler exists the extension must have been built, so this cannot pass by skipping."""

from __future__ import annotations

import os
import random
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.tracebacks import grammar, scan

try:
    from ddtreed import _fastscan  # type: ignore[attr-defined]
except ImportError:  # no compiler where it was installed: the RE2 path only
    _fastscan = None

pytestmark = pytest.mark.skipif(
    _fastscan is None and shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="ddtreed._fastscan not built and no C compiler here")

SETS = {"any": grammar.TAGGED_NEEDLES + scan.IDLE_NEEDLES, "tagged": grammar.TAGGED_NEEDLES,
        "idle": scan.IDLE_NEEDLES}
PATTERNS = {"any": scan.ANY_NEEDLE, "tagged": scan.TAGGED_NEEDLE, "idle": scan.IDLE_NEEDLE}
NEEDLES = sorted({needle.encode() for needle in SETS["any"]})
# every needle, cut short by one byte or more (a needle's start at a block's end), and the noise
# SGLang's lines are made of
PIECES = NEEDLES + [needle[:cut] for needle in NEEDLES for cut in range(1, len(needle))] + [
    b"\n", b"[2026-12-01 08:00:00 TP3] ", b"Decode batch, #running-req: 3, ", b"\xff\xfe\x80",
    "é".encode(), b"x" * 40, b"\x1b", b"r", b"rr", b"E", b"X", b"\x00"]


def native(name: str):
    assert _fastscan is not None, "a C compiler is here but ddtreed._fastscan was not built"
    return _fastscan.needles(tuple(sorted({needle.encode() for needle in SETS[name]})))


def re2_finder(name: str):
    return scan._finder(PATTERNS[name])


def check(data: bytes, pos: int = 0, end: int | None = None) -> None:
    for name in SETS:
        expected = re2_finder(name)(data, pos, end)
        assert _fastscan.first(native(name), data, pos, end) == expected, (name, data, pos, end)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(PIECES) | st.binary(max_size=12), max_size=40), st.integers(-3, 700),
       st.none() | st.integers(-3, 700))
def test_first_answers_what_the_re2_pass_answers(parts, pos, end):
    check(b"".join(parts), pos, end)


def test_every_hit_of_a_block_in_turn():
    """Each needle put at every offset of a short block, then found from each position on, as the
    assembler walks a block (a needle at the block's start, its end, overlapping another)."""
    rng = random.Random(19)
    for _ in range(400):
        data = bytearray(rng.choice(PIECES[-12:]) * rng.randint(0, 3))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(data))
            data[at:at] = rng.choice(NEEDLES)
        data = bytes(data)
        for pos in range(len(data) + 2):
            check(data, pos)
            check(data, pos, len(data) - 1)


def test_needles_at_the_edges_of_the_range():
    for needle in NEEDLES:
        for data in (needle, b"ab" + needle, needle + b"\n", needle[:-1], b"\n" + needle[:-1]):
            for pos in range(len(data) + 1):
                for end in range(-1, len(data) + 3):
                    check(data, pos, end)
    check(b"")
    check(b"", 1)
    check(b"rror", 5, 2)
    check(b"rrorr" * 3, -1)
    check(b"Segmentation faulSegmentation fault")  # one needle's prefix, then the needle


def test_a_random_block_of_arbitrary_bytes():
    rng = random.Random(7)
    for _ in range(200):
        data = bytes(rng.choice(b"\n\x1b[]rEXFiakleo:\xff ") for _ in range(rng.randint(0, 3000)))
        pos = 0
        while True:
            check(data, pos)
            hit = _fastscan.first(native("any"), data, pos)
            if hit < 0:
                break
            pos = hit + 1


def test_the_scan_finders_are_the_native_ones_where_it_is_loaded():
    loaded = _fastscan is not None and os.environ.get("DDTREED_NO_NATIVE", "") in ("", "0")
    assert (getattr(scan.find_any, "func", None) is getattr(_fastscan, "first", object())) == loaded


def test_bad_arguments_are_a_clear_error():
    table = native("any")
    with pytest.raises(TypeError, match="bytes"):
        _fastscan.first(table, "text")
    with pytest.raises(TypeError, match="2 to 4"):
        _fastscan.first(table)
    with pytest.raises(TypeError, match="what needles"):
        _fastscan.first(b"not a table", b"data")
    with pytest.raises(TypeError, match="bytes"):
        _fastscan.needles(("rror",))
    with pytest.raises(TypeError):
        _fastscan.needles([b"rror"])


def test_one_byte_and_empty_needles():
    table = _fastscan.needles((b"q", b"zz"))
    assert [_fastscan.first(table, data) for data in (b"", b"aq", b"azz", b"az", b"zq")] == [-1, 1, 1, -1, 1]
    assert _fastscan.first(_fastscan.needles((b"",)), b"abc", 2) == 2
    assert _fastscan.first(_fastscan.needles(()), b"abc") == -1
