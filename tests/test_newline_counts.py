"""The log path counts newlines by what deleting them takes off (`replace` finds them with
`memchr`; `bytes.count` tests every byte): the counts must be `bytes.count`'s, for a follower's
BlockChunk (its `line_count`) and for any range the scan counts (`scan.newlines`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.logs.follower import BlockChunk
from ddtreed.tracebacks import scan

PIECES = st.lists(st.sampled_from([b"\n", b"\n\n", b"x", b"[2026-12-01 08:00:00 TP0] Decode batch, #running-req: 1",
                                   b"\xff\xfe", b"\r", b" " * 700, b"\n" * 600]), max_size=60).map(b"".join)


@settings(max_examples=400, deadline=None)
@given(data=PIECES, cut=st.tuples(st.integers(0, 50_000), st.integers(0, 50_000)))
def test_newlines_counts_as_bytes_count(data, cut):
    start, end = sorted(cut)
    start, end = min(start, len(data)), min(end, len(data))
    assert scan.newlines(data, start, end) == data.count(b"\n", start, end)
    assert scan.newlines(data, 0, len(data)) == data.count(b"\n")


@settings(max_examples=200, deadline=None)
@given(data=PIECES)
def test_a_block_chunk_counts_its_lines_as_split_does(data):
    chunk = BlockChunk.of("s", 1, data, 0.0)
    assert chunk.line_count == len(data.split(b"\n")) == len(chunk.lines)
