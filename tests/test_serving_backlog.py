"""The serving watch reads every decode line of a large chunk, not only its newest ones.

A chunk of 64 KB holds ~240 decode lines when the daemon catches up with a backlog (its start, a
slow turn). A watch that judged only the newest K of them and counted the rest as progress would
be cheaper (issue 19: docs/performance.md, session 11) and would miss what these tests put in the
middle of such a chunk: a run of low accept lengths, a run of `cuda graph: False` lines, each
followed by healthy lines to the chunk's end. What the user must see is the event, with the lines
of the run as its evidence, whatever the chunk's size and whether the follower handed its bytes
(`BlockChunk`) or its lines."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from ddtreed.health.serving import ACCEPTANCE_COLLAPSE, EAGER_FALLBACK, ServingSettings, ServingWatch
from ddtreed.logs.follower import BlockChunk
from ddtreed.records import LogChunk

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import mixes  # noqa: E402


def decode(rank: int, accept: float, graph: str = "True") -> str:
    return (f"[2026-12-01 07:54:47 TP{rank}] Decode batch, #running-req: 12, #token: 4012, token usage: "
            f"0.05, accept len: {accept:.2f}, accept rate: 0.41, cuda graph: {graph}, gen throughput "
            f"(token/s): 1860.69, #queue-req: 0")


OTHER = ('[2026-12-01 07:54:47] INFO:     127.0.0.1:40312 - "POST /generate HTTP/1.1" 200 OK',
         "[2026-12-01 07:54:47 TP3] Prefill batch, #new-seq: 1, #new-token: 812, #cached-token: 0, "
         "token usage: 0.05, #running-req: 11, #queue-req: 0, #pending-token: 0, cuda graph: False, "
         "input throughput (token/s): 5120.33")


def backlog(run: list[str], before: int = 2000, after: int = 2000, seed: int = 11) -> list[str]:
    """Healthy lines of 8 ranks (accept 3.5-4.5, graphs), `run` in the middle, healthy lines after:
    ~4,000 lines, ~600 KB, several 64 KB blocks' worth."""
    rng = random.Random(seed)

    def healthy(count: int) -> list[str]:
        return [decode(rng.randrange(8), 3.5 + rng.random()) if rng.random() < 0.8 else rng.choice(OTHER)
                for _ in range(count)]

    return healthy(before) + run + healthy(after)


def feed(lines: list[str], *, block: bool, size: int, baseline: float | None = 3.0) -> tuple[ServingWatch, list]:
    watch = ServingWatch(ServingSettings(interval_s=0), None, captured_graphs=True, baseline=baseline,
                         wall=lambda: 1234.5)
    found = []
    for at in range(0, len(lines), size):
        part = lines[at:at + size]
        chunk = (BlockChunk.of("stdout", at + 1, "\n".join(part).encode(), 0.0) if block
                 else LogChunk("stdout", at + 1, tuple(part), 0.0))
        found += watch.feed(chunk)
    return watch, found


LOW_RUN = [decode(rank, 0.90 + rank / 100) for rank in range(5)]
EAGER_RUN = [decode(rank, 4.0, "False") for rank in range(5)]


@pytest.mark.parametrize("block", [True, False])
@pytest.mark.parametrize("size", [4500, 400])  # all of it in one chunk; ~64 KB chunks
def test_a_collapse_in_the_middle_of_a_large_chunk_is_found(block, size):
    lines = backlog(LOW_RUN)
    assert len("\n".join(lines[:size]).encode()) > 50_000  # a backlog's chunk, not a turn's few lines
    _, found = feed(lines, block=block, size=size)
    assert [event.kind for event in found] == [ACCEPTANCE_COLLAPSE]
    assert found[0].evidence == tuple(LOW_RUN)
    assert found[0].data == {"accept_length": 0.94, "baseline": 3.0}


@pytest.mark.parametrize("block", [True, False])
def test_a_collapse_run_broken_up_by_other_lines_is_still_a_run(block):
    run = [line for low in LOW_RUN for line in (low, OTHER[0], OTHER[1])]  # no decode line between the lows
    _, found = feed(backlog(run), block=block, size=4500)
    assert [event.kind for event in found] == [ACCEPTANCE_COLLAPSE]
    assert found[0].evidence == tuple(LOW_RUN)


@pytest.mark.parametrize("block", [True, False])
def test_four_low_lines_in_the_middle_are_no_collapse(block):
    _, found = feed(backlog(LOW_RUN[:4]), block=block, size=4500)
    assert found == []


@pytest.mark.parametrize("block", [True, False])
@pytest.mark.parametrize("size", [4500, 400])
def test_an_eager_fallback_in_the_middle_of_a_large_chunk_is_found(block, size):
    lines = backlog(EAGER_RUN)
    graphed_before = sum("cuda graph: True" in line and "Decode batch" in line for line in lines[:2000])
    watch, found = feed(lines, block=block, size=size, baseline=None)
    assert [event.kind for event in found] == [EAGER_FALLBACK]
    assert found[0].evidence == tuple(EAGER_RUN)
    assert found[0].data == {"eager_lines": 5, "graph_lines_before": graphed_before}
    assert watch._eager == []  # the healthy lines after it ended the run


def test_the_typical_mix_collapse_is_found_in_its_64_kb_blocks(tmp_path):
    """The benchmark's own input: its accept lengths (1.0-5.0 against a baseline of 3.0) make a run
    of five low ones now and then, in the middle of a block; the daemon's blocks find the first
    one on the same line as a reading of every line."""
    path = tmp_path / "typical.log"
    mixes.generate(str(path), "typical", 60_000)
    data = path.read_bytes()
    by_block = ServingWatch(ServingSettings(interval_s=0), None, captured_graphs=True, baseline=3.0,
                            wall=lambda: 1.0)
    by_line = ServingWatch(ServingSettings(interval_s=0), None, captured_graphs=True, baseline=3.0,
                           wall=lambda: 1.0)
    found_blocks, found_lines = [], []
    at = number = 0
    while at < len(data) and not found_blocks:
        end = data.rfind(b"\n", at, at + 65536)
        end = len(data) if end <= at or at + 65536 >= len(data) else end
        block = BlockChunk.of("stdout", number + 1, data[at:end], 0.0)
        found_blocks += by_block.feed(block)
        for line in block.lines:
            found_lines += by_line.feed(LogChunk("stdout", number + 1, (line,), 0.0))
        number += block.line_count
        at = end + 1
    assert [event.kind for event in found_blocks] == [ACCEPTANCE_COLLAPSE]
    assert [(e.detail, e.evidence, e.data) for e in found_blocks] == \
        [(e.detail, e.evidence, e.data) for e in found_lines]
    last = block.text.rsplit("Decode batch, ", 8)[0]  # the block up to its newest 8 decode lines
    assert found_blocks[0].evidence[-1] in last  # the run ended before them
