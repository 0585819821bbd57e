"""The serving watch reads two fields of each decode line with `str.find` (issue 19: a full parse of
every decode line capped a serving daemon near 100 k lines/s). It must read exactly what the full
parser reads, on real SGLang 0.5.16 output, on the benchmark mixes and on odd lines."""

from __future__ import annotations

import gzip
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.health.serving import ServingSettings, ServingWatch, decode_fields, parse_decode_line
from ddtreed.records import LogChunk

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))
import mixes  # noqa: E402


def real_lines() -> list[str]:
    lines = []
    for path in sorted((HERE / "fixtures" / "sglang-0.5.16").rglob("*.log*")):
        data = path.read_bytes()
        text = gzip.decompress(data).decode() if path.suffix == ".gz" else data.decode(errors="replace")
        lines += [line for line in text.splitlines() if "Decode batch" in line]
    return lines


def expected(line: str):
    stats = parse_decode_line(line)
    return (None, None) if stats is None else (stats.accept_length, stats.cuda_graph)


def test_real_decode_lines_read_the_same():
    lines = real_lines()
    assert len(lines) > 100 and any("accept len" in line for line in lines)
    assert any("cuda graph: False" in line for line in lines)
    assert [decode_fields(line) for line in lines] == [expected(line) for line in lines]


def test_benchmark_mix_lines_read_the_same():
    rng = random.Random(7)
    lines = [mixes.decode(rng, "[2026-12-01 10:00:00 TP0]") for _ in range(2000)]
    assert [decode_fields(line) for line in lines] == [expected(line) for line in lines]


@pytest.mark.parametrize("line", [
    "Decode batch, accept len: 3.0, cuda graph: True",  # first field
    "[x] Decode batch, #running-req: 1, accept len: , cuda graph: Maybe",
    "[x] Decode batch, #running-req: 1, accept len:   , cuda graph:  False ",
    "[x] Decode batch, draft accept len: 9.9, mycuda graph: True",  # longer keys are other fields
    "[x] Decode batch, accept len: nan-ish, cuda graph: True",
    "[x] Decode batch,accept len: 2.0",
    "[x] no decode here, accept len: 2.0, cuda graph: True",
    "[x] Decode batch, accept len: 2.5",
])
def test_odd_lines_read_the_same(line):
    assert decode_fields(line) == expected(line)


fields = st.sampled_from(["#running-req: 3", "accept len: 2.25", "accept len: x", "cuda graph: True",
                          "cuda graph: False", "cuda graph: ", "token usage: 0.10", "accept rate: 0.4",
                          "gen throughput (token/s): 12.5", "weird", "accept len:2"])


@settings(max_examples=300, deadline=None)
@given(st.lists(fields, max_size=8), st.sampled_from(["", "[2026-12-01 10:00:00 TP1] ", "x "]))
def test_generated_decode_lines_read_the_same(parts, prefix):
    by_key = {part.split(":")[0]: part for part in parts}  # SGLang never repeats a key in a line
    line = prefix + "Decode batch, " + ", ".join(by_key.values())
    assert decode_fields(line) == expected(line)


def test_the_watch_sees_every_decode_line_of_a_chunk_and_the_last_one_in_full():
    lines = real_lines()[:60]
    watch = ServingWatch(ServingSettings(interval_s=0, eager_lines=5), None, captured_graphs=True)
    chunk_text = "\n".join(["noise line"] + lines + ["tail without decode"])
    watch.feed(LogChunk("s", 1, tuple(chunk_text.split("\n")), 0.0, text=chunk_text))
    last = parse_decode_line(lines[-1])
    assert watch.last_decode == last
    accepts = [s.accept_length for s in map(parse_decode_line, lines) if s.accept_length is not None]
    assert watch.decode_accept == (accepts[-1] if accepts else None)
