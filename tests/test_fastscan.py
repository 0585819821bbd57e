"""The serving watch's decode lines read in C (`ddtreed._fastscan`, issue 19's serving path) must be
what `re` reads (`_findall_outside(_EVERY_DECODE_BYTES, …)`, the pure-Python path and the
reference): the same (accept, graph) for every decode mark, on SGLang's lines, odd and broken
ones, long lines, lines cut at the end of a block, bytes that are no UTF-8, and any spans of lines
read around. `summary` is the digest the watch takes from it. Where a C compiler exists the
extension must have been built (an editable install builds it), so this cannot pass by skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.health import serving
from ddtreed.health.serving import _EVERY_DECODE_BYTES, _findall_outside

try:
    from ddtreed import _fastscan  # type: ignore[attr-defined]
except ImportError:  # no compiler where it was installed: the pure-Python path only
    _fastscan = None

pytestmark = pytest.mark.skipif(
    _fastscan is None and shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="ddtreed._fastscan not built and no C compiler here")

LINE = (b"[2026-12-01 07:54:47 TP0] Decode batch, #running-req: 3, #token: 258, token usage: 0.01, "
        b"accept len: 4.97, accept rate: 0.36, cuda graph: True, gen throughput (token/s): 1860.69, "
        b"#queue-req: 0")
PLAIN = LINE.replace(b"accept len: 4.97, accept rate: 0.36, ", b"")


def reference(block: bytes, spans) -> list:
    return _findall_outside(_EVERY_DECODE_BYTES, block, spans)


def digest(fields: list):
    """What `summary` must give for these fields."""
    if any(graph == b"" for _, graph in fields):
        return None
    return [accept for accept, _ in fields], sum(graph == b"False" for _, graph in fields)


def check(block: bytes, spans=()) -> list:
    spans = list(spans)
    want = reference(block, spans)
    assert _fastscan.fields(block, spans) == want
    got = digest(want)
    assert _fastscan.summary(block, spans) == got
    low_of = serving._LowOf(2.5)
    with_low = _fastscan.summary(block, spans, low_of)
    if got is None:
        assert with_low is None
    else:
        assert with_low == (*got, bytes(map(serving._LowOf(2.5).__getitem__, [a for a in got[0] if a])))
    return want


def test_the_extension_is_built_where_a_compiler_is():
    assert _fastscan is not None, "ddtreed._fastscan is not built (pip install -e . builds it)"


def test_sglang_lines_and_their_odd_forms():
    assert check(LINE) == [(b"4.97", b"True")]
    assert check(PLAIN.replace(b"True", b"False")) == [(b"", b"False")]
    assert check(LINE + b",") == [(b"4.97", b"True")]  # a trailing comma, as older releases print
    assert check(LINE + b", \t ") == [(b"4.97", b"True")]
    assert check(LINE + b", x") == [(b"", b"")]  # a field after it: not the strict form
    assert check(LINE + b"\r") == [(b"", b"")]
    assert check(LINE.replace(b"4.97", b"12345.678901")) == [(b"12345.678901", b"True")]
    assert check(LINE.replace(b"4.97", b"4")) == [(b"", b"")]
    assert check(LINE.replace(b"True", b"Maybe")) == [(b"", b"")]
    assert check(LINE.replace(b"3, #token", b"3 , #token")) == [(b"", b"")]
    assert check(b"Decode batch, Decode batch, " + LINE) == [(b"", b""), (b"", b""), (b"4.97", b"True")]
    assert check(b"Decode batch, ") == [(b"", b"")]
    assert check(b"Decode batch,") == []
    assert check(b"\xff\xfe" + LINE + b"\n\xc3(" + LINE) == [(b"4.97", b"True")] * 2
    block = b"\n".join([LINE, PLAIN, b"Prefill batch, cuda graph: False", LINE.replace(b"True", b"False")])
    assert check(block) == [(b"4.97", b"True"), (b"", b"True"), (b"4.97", b"False")]
    # cut at the end of a block: the end of the block ends the line, as `$` reads it
    for cut in range(len(LINE) + 1):
        check(LINE[:cut])
        check(b"x\n" + LINE[:cut] + b"\n" + LINE)


def test_reading_around_spans():
    block = b"\n".join([LINE, b"y" * 5000, LINE, PLAIN])
    long_at = len(LINE) + 1
    for spans in ([], [(long_at, long_at + 5000)], [(0, len(LINE))], [(5, 10), (3, 7), (long_at, 10 ** 9)],
                  [(-5, 2)], [(10 ** 9, 10 ** 9 + 1)], [(long_at + 20, long_at + 10)]):
        check(block, spans)
    # a span that starts inside a decode line: the range before it ends the line there
    check(block, [(len(LINE) - 3, len(LINE) + 1)])


def test_bad_arguments_are_a_clear_error():
    with pytest.raises(TypeError):
        _fastscan.fields("text, not bytes", [])
    with pytest.raises(TypeError, match="span"):
        _fastscan.summary(LINE, [(1, 2, 3)])
    with pytest.raises(TypeError, match="spans"):
        _fastscan.summary(LINE, 5)
    with pytest.raises(ValueError, match="0 or 1"):
        _fastscan.summary(LINE, [], {b"4.97": 300})
    with pytest.raises(KeyError):
        _fastscan.summary(LINE, [], {})


_pieces = st.sampled_from([
    LINE, PLAIN, LINE.replace(b"True", b"False"), PLAIN.replace(b"True", b"False"), LINE + b",",
    LINE + b", ", LINE + b",\t", LINE + b", #retracted-req: 0", LINE + b"\r", b"Decode batch, ",
    b"Decode batch, accept len: 0.10, cuda graph: False", b"noise, cuda graph: False", b"",
    b"\xff\xfe\x80 not UTF-8", b"Decode batch, #running-req: 1", b"y" * 4500, b"Decode batch",
    LINE.replace(b"4.97", b"0.5"), LINE.replace(b"4.97", b"10.25"), LINE.replace(b"258", b"2" * 40),
])


@st.composite
def blocks(draw) -> bytes:
    """Lines from SGLang's forms, some with bytes changed, dropped or put in; joined by newlines
    (or not), cut anywhere."""
    lines = []
    for piece in draw(st.lists(_pieces, max_size=30)):
        if piece and draw(st.integers(0, 3)) == 0:
            at = draw(st.integers(0, len(piece)))
            action = draw(st.sampled_from(["flip", "drop", "insert", "cut"]))
            byte = draw(st.sampled_from(list(b"0123456789.,: \t\n\rTFa#x") + [0xff, 0]))
            if action == "flip" and at < len(piece):
                piece = piece[:at] + bytes([byte]) + piece[at + 1:]
            elif action == "drop":
                piece = piece[:at] + piece[at + 1:]
            elif action == "insert":
                piece = piece[:at] + bytes([byte]) + piece[at:]
            else:
                piece = piece[:at]
        lines.append(piece)
    block = draw(st.sampled_from([b"\n", b"", b"\r\n", b" "])).join(lines)
    return block[draw(st.integers(0, min(len(block), 40))):]


@settings(max_examples=1500, deadline=None)
@given(blocks(), st.lists(st.tuples(st.integers(-10, 20000), st.integers(0, 400)), max_size=6), st.booleans())
def test_random_and_broken_blocks_read_the_same(block, spans, ascending):
    spans = [(start, start + length) for start, length in spans]
    check(block, sorted(spans) if ascending else spans)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_read_the_same(noise):
    check(noise)
    check(noise + LINE + noise)
    check(LINE[:60] + noise + LINE[60:])


def reader_of(environment: dict) -> tuple[str, str]:
    """(the watch's reader, `ddtreed --version`) in a new process with `environment` added."""
    env = {**os.environ, **environment}
    code = "from ddtreed.health import serving; print(serving.decode_reader())"
    watch = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    version = subprocess.run([sys.executable, "-m", "ddtreed", "--version"], capture_output=True, text=True,
                             env=env, check=True)
    return watch.stdout.strip(), version.stdout.strip()


def test_the_watch_names_its_reader_and_the_switch_turns_it_off():
    built = "native" if _fastscan is not None else "python"
    assert serving.decode_reader() == ("python" if os.environ.get("DDTREED_NO_NATIVE", "") not in ("", "0")
                                       else built)
    for value, want in (("1", "python"), ("0", built), ("", built)):
        watch, version = reader_of({"DDTREED_NO_NATIVE": value})
        assert watch == want
        assert version.startswith("ddtreed ") and version.endswith(f"(decode lines read by {want})")
