"""Property tests: hostile bytes through a real file, Follower and Assembler never raise, stay
bounded, and still find every complete traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddtreed.logs import Follower
from ddtreed.tracebacks import Assembler

CORPUS = Path(__file__).parent / "corpus"
ENTRIES = [json.loads(line) for line in (CORPUS / "sglang-crashes.jsonl").read_text().splitlines()]
TRACEBACK_ENTRIES = [e for e in ENTRIES if e["exception"] is not None]
LIMIT = 4096
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

garbage = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda n: b"\x00" * n, st.integers(0, 5000)),
    st.builds(lambda n: b"\xff\xfe" * n, st.integers(0, 3000)),
    st.just(b"x" * (LIMIT * 3)),  # an overlong line
    st.sampled_from([b"Traceback (most recent call last):\n", b'  File "/a.py", line 1, in f\n',
                     b"During handling of the above exception, another exception occurred:\n",
                     b"RuntimeError: half\n", b"terminate called after throwing an instance of 'X'\n",
                     b"  what():  y\n", b"Assertion `x` failed.\n", b"\n\n", b"[2026-07-28 10:00:00 TP1] "]),
)


def pump(path: Path, pieces: list[bytes], follower: Follower, assembler: Assembler):
    """Append each piece to the real file and read after each; the crashes found in the end."""
    for piece in pieces:
        with open(path, "ab") as handle:
            handle.write(piece)
        for chunk in follower.read():
            assert all(len(line) <= LIMIT + 100 for line in chunk.lines)  # chars: U+FFFD is 3 bytes
            assembler.feed(chunk)
        assert all(len(source.partial) <= LIMIT for source in follower._sources)
    with open(path, "ab") as handle:
        handle.write(b"\n")
    for chunk in follower.read():
        assembler.feed(chunk)
    return [crash for group in assembler.take(0.0, final=True) for crash in group]


def complete_traceback(entry) -> bytes:
    return (entry["log"].rstrip("\n") + "\n\n").encode()


def expected(entries, crashes):
    """Every entry's exception and message appear among the crashes."""
    for entry in entries:
        assert any(c.exception == entry["exception"] and entry["message"][:40] in c.message
                   for c in crashes), entry["id"]


@FUZZ
@given(pieces=st.lists(garbage, max_size=12))
def test_random_bytes_never_raise_and_stay_bounded(tmp_path_factory, pieces):
    path = tmp_path_factory.mktemp("fuzz") / "s.log"
    with Follower([str(path)], max_line_bytes=LIMIT) as follower:
        pump(path, pieces, follower, Assembler(max_pending=8, max_lines=200))


@FUZZ
@given(entries=st.lists(st.sampled_from(TRACEBACK_ENTRIES), min_size=1, max_size=4),
       noise=st.lists(garbage, min_size=5, max_size=5), cut=st.integers(1, 400))
def test_complete_tracebacks_are_found_between_garbage_and_cut_ones(tmp_path_factory, entries,
                                                                    noise, cut):
    """Garbage and half tracebacks (cut mid-line) between complete ones never hide them."""
    path = tmp_path_factory.mktemp("fuzz") / "s.log"
    pieces = []
    for index, entry in enumerate(entries):
        pieces.append(noise[index] + b"\n")
        half = complete_traceback(TRACEBACK_ENTRIES[(cut + index) % len(TRACEBACK_ENTRIES)])
        pieces.append(half[: cut % len(half)] + b"\n\n[2026-07-28 10:00:00] restart\n")
        pieces.append(complete_traceback(entry))
        pieces.append(b"[2026-07-28 10:00:01 TP0] Decode batch, #running-req: 1\n")
    with Follower([str(path)], max_line_bytes=LIMIT) as follower:
        crashes = pump(path, pieces, follower, Assembler())
    expected(entries, crashes)


@FUZZ
@given(order=st.lists(st.integers(0, 2), min_size=3, max_size=60),
       entries=st.lists(st.sampled_from(TRACEBACK_ENTRIES), min_size=3, max_size=3),
       split=st.integers(1, 4000))
def test_interleaved_sources_and_arbitrary_write_boundaries(tmp_path_factory, order, entries, split):
    """Three corpus logs written to three files in random slices, read between writes."""
    directory = tmp_path_factory.mktemp("fuzz")
    paths = [directory / f"rank{i}.log" for i in range(3)]
    data = [complete_traceback(entry) for entry in entries]
    offsets = [0, 0, 0]
    assembler = Assembler()
    with Follower([str(p) for p in paths], max_line_bytes=LIMIT) as follower:
        for which in order + [0, 1, 2] * (len(max(data, key=len)) // 16 + 1):
            piece = data[which][offsets[which]: offsets[which] + split % 97 + 16]
            offsets[which] += len(piece)
            with open(paths[which], "ab") as handle:
                handle.write(piece)
            for chunk in follower.read():
                assembler.feed(chunk)
        assert offsets == [len(d) for d in data]
    crashes = [c for group in assembler.take(0.0, final=True) for c in group]
    expected(entries, crashes)
    assert len([c for c in crashes if c.exception]) == len(entries)


def test_ten_megabyte_line_then_traceback(tmp_path):
    path = tmp_path / "s.log"
    entry = TRACEBACK_ENTRIES[0]
    with Follower([str(path)], max_line_bytes=LIMIT) as follower:
        crashes = pump(path, [b"q" * 1_000_000] * 10 + [b"\n", complete_traceback(entry)],
                       follower, Assembler())
    expected([entry], crashes)
    assert os.path.getsize(path) > 10_000_000
