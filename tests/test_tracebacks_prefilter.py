"""The assembler's fast path: chunks as the follower builds them (with `text`) must give the same
crashes as the offline path, and ordinary progress lines must stay on the cheap scans."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.logs import Follower
from ddtreed.records import LogChunk
from ddtreed.tracebacks import Assembler, assemble_lines, grammar, scan

PROGRESS = (
    "[2026-07-28 10:00:01 DP0 TP3] Decode batch, #running-req: 12, #token: 4711, token usage: 0.31, "
    "accept len: 3.12, accept rate: 0.77, cuda graph: True, gen throughput (token/s): 812.40, "
    "#queue-req: 0",
    "[2026-07-28 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 23, #cached-token: 0, "
    "token usage: 0.00, #running-req: 0, #queue-req: 0,",
    "[2026-07-28 10:00:01.123 PP1 TP4] Decode batch, #running-req: 1, #token: 53, token usage: 0.00, "
    "cuda graph: False, gen throughput (token/s): 38.53, #queue-req: 0",
)
NOTABLE = (
    "[2026-07-28 10:00:02 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 9, in run',
    "    self.run_batch(batch)",
    "RuntimeError: The size of tensor a (8) must match the size of tensor b (33) at non-singleton "
    "dimension 0",
    "",
    "[2026-07-28 10:00:02] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
    "[2026-07-28 10:00:02] Subprocess scheduler_0 (pid=4242) crashed with exit code -9.",
    "[2026-07-28 10:00:02] Rank 3 scheduler died during initialization (exit code: 1)",
    "[2026-07-28 10:00:02 TP0] Watchdog timeout (self.watchdog_timeout=300)",
    "[٣] a tag with a non-ASCII digit",
    "[",
    "terminate called after throwing an instance of 'c10::Error'",
    "  what():  CUDA error: an illegal memory access was encountered",
    "ValueError: bare exception line",
)


def outcome(groups):
    return [[(c.kind, c.exception, c.message, c.rank, c.first_line, c.last_line, c.exit_code)
             for c in group] for group in groups]


def follower_style(lines: list[str], sizes: list[int]) -> list:
    """Feed `lines` as the follower does: consecutive chunks that carry their joined text."""
    assembler, start, number = Assembler(), 0, 1
    for size in sizes + [len(lines)]:
        piece = tuple(lines[start:start + max(1, size)])
        if not piece:
            break
        assembler.feed(LogChunk("f", number, piece, 0.0, text="\n".join(piece)))
        number += len(piece)
        start += len(piece)
    return assembler.take(0.0, final=True)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.sampled_from(PROGRESS + NOTABLE), min_size=1, max_size=60),
       sizes=st.lists(st.integers(1, 25), max_size=8))
def test_chunks_with_text_give_what_the_offline_path_gives(lines, sizes):
    assert outcome(follower_style(lines, sizes)) == outcome(assemble_lines(lines))


def test_sigquit_and_child_death_inside_a_progress_block_are_found_through_the_follower(tmp_path):
    path = tmp_path / "sglang.log"
    middle = ["[2026-07-28 10:00:02] Subprocess scheduler_0 (pid=4242) crashed with exit code -9."]
    path.write_text("\n".join(list(PROGRESS) * 300 + middle + list(PROGRESS) * 300) + "\n")
    assembler = Assembler()
    with Follower([str(path)]) as follower:
        for chunk in follower.read():
            assembler.feed(chunk)
    crashes = [crash for group in assembler.take(0.0, final=True) for crash in group]
    assert [(c.kind, c.exit_code, c.first_line) for c in crashes] == [("child-death", -9, 901)]


def test_every_tagged_needle_makes_its_line_a_candidate():
    # One automaton pass finds them (ddtreed/tracebacks/scan.py): a needle left out of it would
    # leave its tagged line unread.
    class Quiet:
        busy = False

    for needle in grammar.TAGGED_NEEDLES:
        lines = [*PROGRESS, f"[2026-07-28 10:00:02 TP1] x {needle} y", *PROGRESS]
        text = "\n".join(lines)
        assert list(scan.candidate_lines(text, scan.encode(text), Quiet())) == [len(PROGRESS)], needle
    text = "\n".join(PROGRESS * 50)
    assert scan.ANY_NEEDLE.search(scan.encode(text)) is None
