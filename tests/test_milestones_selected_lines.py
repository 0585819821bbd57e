"""The milestone tracker reads only the lines of a chunk that hold one of its needles, found with
one search over the chunk's text, instead of every line of a chunk that holds one anywhere
(issue 19: a startup's NCCL and tqdm chatter). What a user sees must not change: the same
milestones (name, text, time), progress text, bind error, false ready line, captured graph kinds
and widths after every chunk, as the tracker reading every line, on the real SGLang 0.5.16 logs
(startups, a bind failure, CUDA graph captures) and generated streams, in chunks of any size."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddtreed.health import probes
from ddtreed.health.probes import MilestoneTracker
from ddtreed.logs.follower import BlockChunk
from ddtreed.records import LogChunk

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-0.5.16"
REAL_LOGS = Path("/work/shared/real-sglang/logs")


class EveryLine(MilestoneTracker):
    """The reference: every line of a chunk that holds a needle anywhere (the tracker before)."""

    def feed(self, chunk):
        if self.ready:
            return []
        joined = chunk.text if chunk.text is not None else "\n".join(chunk.lines)
        if not any(needle in joined for needle in probes._NEEDLES):
            return []
        found = []
        for line in chunk.lines:
            milestone = self._match(line, chunk.received_at)
            if milestone is not None:
                found.append(milestone)
        return found


def seen(tracker: MilestoneTracker) -> tuple:
    return (tracker.milestones, tracker.progress_text(), tracker.ready, tracker.bind_error, tracker.false_ready,
            tracker.captured, tracker.widths)


def feed_both(lines: list[str], size: int) -> int:
    fast, reference = MilestoneTracker(), EveryLine()
    for index, start in enumerate(range(0, len(lines), size)):
        part = tuple(lines[start:start + size])
        raw = "\n".join(part).encode("utf-8", "surrogateescape")
        if index % 3 == 2 and b"\r\n" not in raw and b"\x00" not in raw:
            chunk: LogChunk = BlockChunk.of("s", start + 1, raw, float(index))
        else:
            chunk = LogChunk("s", start + 1, part, float(index), "\n".join(part) if index % 2 else None)
        assert fast.feed(chunk) == reference.feed(chunk), index
        assert seen(fast) == seen(reference), index
    return len(fast.milestones)


def test_real_startups_give_the_same_milestones():
    logs = sorted(FIXTURES.glob("*.log")) + sorted(REAL_LOGS.glob("*.log"))
    assert logs, "the real SGLang 0.5.16 logs are missing"
    total = 0
    for path in logs:
        lines = path.read_text(errors="replace").splitlines()
        for size in (1, 9, 64, 4096):
            total += feed_both(lines, size)
    assert total  # the logs hold milestones: the comparison saw them


def test_a_bind_failure_and_its_false_ready_line_read_the_same():
    lines = (FIXTURES / "portinuse.log").read_text(errors="replace").splitlines()
    for size in (1, 5, 4096):
        feed_both(lines, size)
    tracker = MilestoneTracker()
    tracker.feed(LogChunk("s", 1, tuple(lines), 0.0, "\n".join(lines)))
    assert tracker.bind_error and not tracker.ready


LINES = (
    "[2026-12-01 07:54:47 TP0] Load weight begin. avail mem=139.13 GB",
    "[2026-12-01 07:54:47 TP1] Load weight end. elapsed=0.08 s",
    "[2026-12-01 07:54:47 TP0] KV Cache is allocated. #tokens: 65850615",
    "[2026-12-01 07:54:47 TP0] Memory pool end. avail mem=12.94 GB",
    "[2026-12-01 07:54:47 TP0] Capture target decode CUDA graph begin. num_tokens_per_req=4, bs=[1, 2]",
    "[2026-12-01 07:54:47 TP0] Capture target decode CUDA graph end. elapsed=1.27 s",
    "[2026-12-01 07:54:47 TP0] Capture draft verify Cuda Graph begin. num_tokens_per_bs=8",  # case
    "[2026-12-01 07:54:47 TP0] Capture cuda graph end. elapsed=1.00 s",
    "[2026-12-01 07:54:47 TP0] max_total_num_tokens=65850615, chunked_prefill_size=8192",
    "[2026-12-01 07:54:47] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000)",
    "[2026-12-01 07:54:47] The server is fired up and ready to roll!",
    "[2026-12-01 07:54:47 TP0] Decode batch, #running-req: 1, cuda graph: True, #queue-req: 0",
    "h200-node-3:15978:16021 [3] NCCL INFO Channel 03/24 :    0   1   2   3",
    "Capturing batches (bs=256 avail_mem=9.12 GB):  3%| | 1/36 [00:01<00:00, 38.2it/s]",
    "Load weight begin twice on a line: Load weight end, Memory pool end",
    "",
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, len(LINES) - 1), min_size=1, max_size=80), st.integers(1, 30))
def test_generated_startups_read_the_same(picks, size):
    feed_both([LINES[pick] for pick in picks], size)
