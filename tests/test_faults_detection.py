"""Detection without the settle wait: `Assembler(eager=True)` hands a crash group out as soon as
every traceback in it has its exception line (benchmarks/detection_latency.py measures it)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "programs"))

from fast_service import founding_traceback  # noqa: E402

from ddtreed.records import LogChunk  # noqa: E402
from ddtreed.tracebacks import Assembler  # noqa: E402


def _chunk(lines: list[str], first: int = 1, at: float = 100.0) -> LogChunk:
    return LogChunk("service.stderr.log", first, tuple(lines), at)


def test_eager_emits_at_the_first_take_after_a_complete_traceback():
    lines = founding_traceback(["TP1", "TP0"]).rstrip("\n").split("\n")
    eager, settled = Assembler(eager=True), Assembler()
    for assembler in (eager, settled):
        assembler.feed(_chunk(lines))
    groups = eager.take(100.001)
    assert len(groups) == 1
    assert sorted(crash.rank for crash in groups[0]) == ["TP0", "TP1"]
    assert all(crash.message.startswith("The size of tensor a (8)") for crash in groups[0])
    assert settled.take(100.001) == []  # the default waits settle_s for more ranks
    assert len(settled.take(101.5)) == 1


def test_eager_waits_for_a_traceback_cut_before_its_exception_line():
    lines = founding_traceback(["TP0"]).rstrip("\n").split("\n")
    assembler = Assembler(eager=True)
    assembler.feed(_chunk(lines[:5]))  # header and two frames: the read ended mid-traceback
    assert assembler.take(100.001) == []
    assembler.feed(_chunk(lines[5:], first=6, at=100.002))
    groups = assembler.take(100.003)
    assert len(groups) == 1 and groups[0][0].exception == "RuntimeError"
    assert len(groups[0][0].frames) == 5


def test_eager_does_not_emit_a_lone_sigquit_line_early():
    assembler = Assembler(eager=True)
    assembler.feed(_chunk(["[2026-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed."]))
    assert assembler.take(100.001) == []  # the ranks' tracebacks may still be on their way
    groups = assembler.take(101.5)
    assert len(groups) == 1 and groups[0][0].kind == "child-death"


def test_a_rank_finishing_later_comes_in_a_later_group():
    first = founding_traceback(["TP0"]).rstrip("\n").split("\n")
    assembler = Assembler(eager=True)
    assembler.feed(_chunk(first))
    assert [c.rank for c in assembler.take(100.001)[0]] == ["TP0"]
    later = founding_traceback(["TP3"]).rstrip("\n").split("\n")
    assembler.feed(_chunk(later, first=len(first) + 1, at=100.2))
    assert [c.rank for c in assembler.take(100.201)[0]] == ["TP3"]
