"""The assembler's one-pass scan (ddtreed/tracebacks/scan.py) finds the same crashes as the line
selection it replaced: every untagged line plus every line holding a tagged needle.

`ReferenceAssembler` below is the assembler with that old selection (the per-needle `str.find`
loop over the chunk, kept here as the reference); every test feeds the same lines to both, in
the same chunks, and compares every field of every crash group a user would see.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddtreed.records import LogChunk
from ddtreed.tracebacks import Assembler, assembler as assembler_module, grammar, scan

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "corpus"
ENTRIES = [json.loads(line) for line in (CORPUS / "sglang-crashes.jsonl").read_text().splitlines()]
REAL_LOGS = Path("/work/shared/real-sglang/logs")
DECODE = ("[2026-07-28 10:00:01 DP0 TP3] Decode batch, #running-req: 12, #token: 4711, token usage: 0.31, "
          "accept len: 3.12, accept rate: 0.77, cuda graph: True, gen throughput (token/s): 812.40, #queue-req: 0")
CHATTER = (
    "h200-node-3:15978:16021 [3] NCCL INFO Channel 03/24 :    0   1   2   3   4   5   6   7",
    "Multi-thread loading shards: 100% Completed | 1/1 [00:00<00:00, 234.54it/s]",
    '[2026-07-28 10:00:01] INFO:     127.0.0.1:51045 - "POST /generate HTTP/1.1" 200 OK',
)
_UNTAGGED = __import__("re").compile(r"\n(?!\[\d)")


def reference_lines(text: str) -> list[int]:
    """The old selection: untagged lines and lines holding a tagged needle (every occurrence of
    every needle found with str.find)."""
    positions = [match.start() + 1 for match in _UNTAGGED.finditer(text)]
    if text[:1] != "[" or not text[1:2].isdigit():
        positions.insert(0, 0)
    for needle in grammar.TAGGED_NEEDLES:
        found = text.find(needle)
        while found >= 0:
            positions.append(found)
            found = text.find(needle, found + 1)
    indices: list[int] = []
    for position in sorted(positions):
        line = text.count("\n", 0, position)
        if not indices or indices[-1] != line:
            indices.append(line)
    return indices


class ReferenceAssembler(Assembler):
    def feed(self, chunk: LogChunk) -> None:
        state = self._states.setdefault(chunk.source, assembler_module._SourceState())
        text = chunk.text if chunk.text is not None else "\n".join(chunk.lines)
        if "\x1b" in text:
            lines = tuple(grammar.strip_ansi(line) for line in chunk.lines)
            text = "\n".join(lines)
            chunk = LogChunk(chunk.source, chunk.first_number, lines, chunk.received_at,
                             text if chunk.text is not None else None)
        previous = -1
        every_line = assembler_module._level_open(state) or ("ERROR: Traceback" in text
                                                            or "ERROR:    Traceback" in text)
        for index in (range(len(chunk.lines)) if every_line else reference_lines(text)):
            if index > previous + 1:
                self._ordinary(state, chunk.received_at)
            self._line(state, chunk, index)
            previous = index
        if previous < len(chunk.lines) - 1:
            self._ordinary(state, chunk.received_at)


def outcome(cls, lines: list[str], size: int, eager: bool = True, with_text: bool = True) -> list:
    assembler = cls(eager=eager)
    groups = []
    for start in range(0, len(lines), size):
        part = tuple(lines[start:start + size])
        assembler.feed(LogChunk("s", start + 1, part, float(start), "\n".join(part) if with_text else None))
        groups += assembler.take(float(start))
    groups += assembler.take(float(len(lines)) + 10.0, final=True)
    return [[(c.kind, c.exception, c.message, c.rank, c.prefix, c.first_line, c.last_line, c.frames,
              c.chained, c.context, c.excerpt, c.exit_code, c.device_asserts) for c in group] for group in groups]


def same(lines: list[str], sizes=(1, 7, 64, 4096), **kwargs) -> None:
    for size in sizes:
        assert outcome(Assembler, lines, size, **kwargs) == outcome(ReferenceAssembler, lines, size, **kwargs), size


def test_corpus_crashes_are_found_the_same():
    for entry in ENTRIES:
        lines = entry["log"].splitlines()
        mixed = [line for pair in zip(lines, (DECODE, *CHATTER) * len(lines)) for line in pair]
        for variant in (lines, mixed):
            same(variant, sizes=(1, 5, 64))
            same(variant, sizes=(7,), eager=False, with_text=False)


def test_real_sglang_logs_are_assembled_the_same():
    logs = sorted(REAL_LOGS.glob("*.log"))
    assert logs, "the real SGLang logs are missing"
    for path in logs:
        lines = path.read_text(errors="replace").splitlines()[:20000]
        same(lines, sizes=(13, 400))


def test_the_benchmark_mixes_are_assembled_the_same():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import mixes
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    for mix in mixes.MIXES:
        lines, _ = mixes._base(mix, 12000, seed=3)
        lines = mixes.startup() + lines
        same(lines, sizes=(300, 1000))


FRAGMENTS = st.sampled_from([
    "Traceback (most recent call last):", '  File "/a.py", line 1, in f', "    x = f()", "    ^^^^^",
    "RuntimeError: half", "ValueError: bad value", "terminate called after throwing an instance of 'c10::Error'",
    "  what():  CUDA error: an illegal memory access was encountered", "Assertion `x` failed.",
    "[rank3]:[E1201 07:54:47.4 ProcessGroupNCCL.cpp:1575] [PG 0 Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1) ran for 600000 milliseconds before timing out.",
    "Fatal Python error: Segmentation fault", "Current thread 0x00007f (most recent call first):",
    "sglang serve: error: unrecognized arguments: --x", "UserWarning: something failed", "", "[", "[x",
    "[2026-07-28 10:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    "[2026-07-28 10:00:00 TP1] ERROR: Traceback (most recent call last):",
    '[2026-07-28 10:00:00 TP1] ERROR:   File "/a.py", line 2, in g',
    "[2026-07-28 10:00:00 TP1] ERROR: KeyError: 'x'",
    "[2026-07-28 10:00:00 TP2] WARNING: Traceback (most recent call last):",
    "[2026-07-28 10:00:00] Subprocess scheduler_0 (pid=4242) crashed with exit code -9.",
    "[2026-07-28 10:00:00] SIGQUIT received. It usually means one child failed.",
    "[2026-07-28 10:00:00 TP0] Watchdog timeout (self.watchdog_timeout=300)",
    "[2026-07-28 10:00:00 TP0] Load weight begin. avail mem=139.13 GB",
    "[2026-07-28 10:00:00 TP0] init failed (ModuleNotFoundError: No module named 'x')",
    "[2026-07-28 10:00:00 TP0] GPU has fallen off the bus, error while attempting to bind on address",
    "sglang-1  | [2026-07-28 10:00:00] Subprocess detokenizer (pid=7) crashed with exit code 1.",
    "(SGLangHttpServer pid=41122) [2026-07-28 10:00:00] Rank 3 scheduler died during initialization (exit code: 1)",
    "Thread 0x1 (idle): \"MainThread\"", "    run (sglang/srt/managers/scheduler.py:12)",
    "During handling of the above exception, another exception occurred:",
    "\x1b[31mRuntimeError\x1b[0m: coloured", "Load weight begin. avail mem=139.13 GB",
    "double free or corruption (out)", "ünïcödé line: Error here", "[٣] a non-ASCII digit, Error here",
    "[²] a superscript two, Error here", "[٣٣٣٣-07-28 10:00:00] Traceback (most recent call last):", DECODE, *CHATTER,
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=60).map(lambda s: s.replace("\n", " ").replace("\r", " "))),
                max_size=80), st.integers(1, 30))
def test_any_mix_of_lines_is_assembled_the_same(lines, size):
    for eager in (True, False):
        assert outcome(Assembler, lines, size, eager=eager) == outcome(ReferenceAssembler, lines, size, eager=eager)


def test_lines_without_a_needle_get_no_per_line_work(monkeypatch):
    seen = []
    original = Assembler._line
    monkeypatch.setattr(Assembler, "_line", lambda self, state, chunk, index: (seen.append(chunk.lines[index]),
                                                                              original(self, state, chunk, index)))
    rng = random.Random(5)
    notable = "[2026-07-28 10:00:02] Subprocess scheduler_0 (pid=4242) crashed with exit code -9."
    lines = [rng.choice((DECODE, *CHATTER)) for _ in range(3000)]
    lines[1700] = notable
    assembler = Assembler(eager=True)
    assembler.feed(LogChunk("s", 1, tuple(lines), 0.0, "\n".join(lines)))
    crashes = [c for group in assembler.take(0.0, final=True) for c in group]
    assert seen == [notable]
    assert [(c.kind, c.exit_code, c.first_line) for c in crashes] == [("child-death", -9, 1701)]


def test_a_traceback_body_is_read_line_by_line_across_chunks():
    body = ["[2026-07-28 10:00:02 TP1] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/opt/sglang/srt/managers/scheduler.py", line 9, in run', "    self.run_batch(batch)",
            "    ^^^^^^^^^^^^^^^^^^^^^", "RuntimeError: size mismatch", "", DECODE]
    lines = [DECODE] * 5 + body + [DECODE] * 5
    for size in (1, 2, 3, 6, 100):
        groups = outcome(Assembler, lines, size)
        assert [(c[0], c[1], c[2], c[5], len(c[7])) for group in groups for c in group] == \
            [("traceback", "RuntimeError", "size mismatch", 6, 1)], size
        assert groups == outcome(ReferenceAssembler, lines, size)


def test_untagged_at_reads_a_tag_as_a_bracket_and_a_digit():
    data = b"[2026 a\n[x\n\n[\n[1"
    assert [scan.untagged_at(data, start) for start in (0, 8, 11, 12, 14)] == [False, True, True, True, False]
    # Python's digits, as the old selection saw them: \\d after the first line, isdigit() on it
    data = "[٣ a\n[² b\n[٣ c\n[² d".encode()
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == 10]
    assert [scan.untagged_at(data, start) for start in starts] == [False, True, False, True]
    assert scan.untagged_at("[² first".encode(), 0) is False
