"""Assembler and line grammar: the founding log, the crash corpus, and each shape SGLang prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtreed.records import LogChunk
from ddtreed.tracebacks import Assembler, assemble_lines, parse_line

CORPUS = Path(__file__).parent / "corpus"
FOUNDING = CORPUS / "logs" / "ddtree-verify-width-8-vs-33.log"
ENTRIES = [json.loads(line) for line in (CORPUS / "sglang-crashes.jsonl").read_text().splitlines()
           if line.strip()]
FOUNDING_MESSAGE = ("The size of tensor a (8) must match the size of tensor b (33) at non-singleton "
                    "dimension 0")


def crashes_of(text: str):
    return [crash for group in assemble_lines(text.split("\n")) for crash in group]


@pytest.mark.parametrize("line, expected", [
    ("[2026-07-28 10:00:00 DP0 TP3] Decode batch", ("2026-07-28 10:00:00", "DP0 TP3", "Decode batch")),
    ("[2026-07-28 10:00:00 TP3] x", ("2026-07-28 10:00:00", "TP3", "x")),
    ("[2026-07-28 10:00:00] ready", ("2026-07-28 10:00:00", None, "ready")),
    ("[2026-07-28 10:00:00.123 PP1 TP4] y", ("2026-07-28 10:00:00.123", "PP1 TP4", "y")),
    ('  File "/a/b.py", line 3, in f', (None, None, '  File "/a/b.py", line 3, in f')),
    ("(SGLangHttpServer pid=41122) [2026-05-22 03:11:08 TP0] Init",
     ("2026-05-22 03:11:08", "TP0", "Init")),
    ("(SGLangHttpServer pid=41122) RuntimeError: x", (None, None, "RuntimeError: x")),
    ("[rank5]:[E1018 03:11:40.120000] ProcessGroupNCCL.cpp:616] t",
     (None, None, "[rank5]:[E1018 03:11:40.120000] ProcessGroupNCCL.cpp:616] t")),
])
def test_parse_line(line, expected):
    assert parse_line(line) == expected


def test_founding_log_is_one_group_of_two_ranks_with_full_frames():
    groups = assemble_lines(FOUNDING.read_text().splitlines())
    assert len(groups) == 1
    crashes = groups[0]
    assert [crash.rank for crash in crashes] == ["TP3", "TP0"]
    for crash in crashes:
        assert crash.kind == "traceback" and crash.exception == "RuntimeError"
        assert crash.message == FOUNDING_MESSAGE
        assert crash.prefix == "Scheduler hit an exception"
        assert len(crash.frames) == 9
        assert crash.frames[-1].function == "replay_prepare" and crash.frames[-1].line == 1241
        assert crash.frames[0].module == "sglang/srt/managers/scheduler.py"
        assert any("Received sigquit" in line for line in crash.context)


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["id"] for entry in ENTRIES])
def test_corpus_entry_assembles_to_its_exception_and_message(entry):
    groups = assemble_lines(entry["log"].split("\n"))
    assert len(groups) == 1, groups
    crashes = groups[0]
    if entry["exception"] is None:
        assert {crash.kind for crash in crashes} <= {"watchdog-timeout", "child-death"}
        if entry["message"].startswith("Watchdog timeout"):
            assert crashes[0].kind == "watchdog-timeout" and crashes[0].message == entry["message"]
        return
    matching = [c for c in crashes if c.exception == entry["exception"]]
    assert matching, [(c.exception, c.message) for c in crashes]
    assert entry["message"].removesuffix(" ...") in matching[0].message.split("\n", 1)[0] or \
        entry["message"] in matching[0].message


def test_chained_exception_keeps_cause_and_names_wrapped_type():
    entry = next(e for e in ENTRIES if e["id"].startswith("qwen3moe-pp-tp"))
    (crash,) = crashes_of(entry["log"])
    assert crash.exception == "Exception" and crash.rank == "PP1 TP4"
    assert crash.wrapper == "Capture cuda graph failed"
    assert crash.inner_message == "CHECK_EQ(input.size(0), residual.size(0)) failed. 8 vs 32"
    assert crash.inner_exception == "RuntimeError"  # from the chained cause
    assert [c.exception for c in crash.chained] == ["RuntimeError"]
    assert crash.chained[0].frames[-1].function == "_scatter_hidden_states_and_residual"
    assert "Possible solutions:" in crash.message


def test_wrapper_with_typed_inner_and_cuda_advice_lines():
    entry = next(e for e in ENTRIES if e["id"].startswith("dsr1-h200"))
    (crash,) = crashes_of(entry["log"])
    assert crash.inner_exception == "RuntimeError"
    assert crash.inner_message == "CUDA error: an illegal memory access was encountered"
    assert crash.message.split("\n")[1].startswith("CUDA kernel errors might be")
    assert "TORCH_USE_CUDA_DSA" in crash.message.split("\n")[-1]


def test_device_assert_flood_is_counted_with_bounded_samples():
    flood = [f"/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{i},0,0], "
             f"thread: [3,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of "
             f"bounds\"` failed." for i in range(5000)]
    tail = ["[2026-07-28 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/x/site-packages/sglang/srt/managers/scheduler.py", line 1, in run_batch',
            "    self.f()",
            "torch.AcceleratorError: CUDA error: device-side assert triggered",
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
            "", "[2026-07-28 10:00:00] SIGQUIT received. signum=None, frame=None. It usually means "
            "one child failed."]
    (group,) = assemble_lines(flood + tail)
    (crash,) = group
    assert crash.exception == "torch.AcceleratorError" and crash.device_asserts == 5000
    assert sum("IndexKernel.cu" in line for line in crash.context) == 3
    assert len(crash.excerpt) < 20


def test_watchdog_timeout_and_child_death_without_traceback():
    lines = ["[2026-07-28 10:00:00 TP2] Scheduler watchdog timeout (self.watchdog_timeout=300, "
             "self.soft=False)",
             "Pyspy dump for PID 30960:",
             'Thread 30960 (idle): "MainThread"',
             "    forward_batch_generation (tp_worker.py:212)",
             "[2026-07-28 10:00:01] Subprocess scheduler_0 (pid=4242) crashed with exit code -9",
             "[2026-07-28 10:00:01] Rank 3 scheduler died during initialization (exit code: -6)"]
    (group,) = assemble_lines(lines)
    kinds = [(c.kind, c.exit_code) for c in group]
    assert kinds == [("watchdog-timeout", None), ("child-death", -9), ("child-death", -6)]
    assert group[0].rank == "TP2" and group[0].frames[0].function == "forward_batch_generation"


def test_interleaved_chunks_stream_like_the_whole_file():
    lines = FOUNDING.read_text().splitlines()
    assembler = Assembler(settle_s=1.0)
    for start in range(0, len(lines), 3):  # three lines per read, as a slow writer would give
        assembler.feed(LogChunk("f", start + 1, tuple(lines[start:start + 3]), 100.0))
        assert assembler.take(100.0) == []  # not settled yet
    assert assembler.take(100.5) == []
    (group,) = assembler.take(101.1)
    assert [c.rank for c in group] == ["TP3", "TP0"]
    assert group[1].first_line == 12 and group[1].source == "f"
    assert assembler.take(200.0) == []


def test_ordinary_progress_lines_produce_nothing():
    lines = [f"[2026-07-28 10:00:00 DP0 TP{i % 8}] Decode batch, #running-req: 3, accept len: 3.10, "
             f"cuda graph: True, gen throughput (token/s): 100.0" for i in range(10_000)]
    assert assemble_lines(lines) == []


def test_separate_groups_after_quiet_period():
    assembler = Assembler(settle_s=1.0)
    crash = ("[2026-07-28 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/p/python/sglang/srt/a.py", line 1, in f', "ValueError: boom", "")
    assembler.feed(LogChunk("s", 1, crash, 10.0))
    assert len(assembler.take(11.5)) == 1
    assembler.feed(LogChunk("s", 5, crash, 20.0))
    assert len(assembler.take(21.5)) == 1


def test_runaway_message_and_pending_headers_stay_bounded():
    header = "[2026-07-28 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):"
    lines = [header] * 500 + ['  File "/p/python/sglang/srt/a.py", line 1, in f',
                              "RuntimeError: big"] + [f"more {i}" for i in range(100_000)]
    assembler = Assembler(max_pending=16, max_lines=1000)
    assembler.feed(LogChunk("s", 1, tuple(lines), 0.0))
    assert sum(len(b.excerpt) for s in assembler._states.values() for b in s.open) < 200
    groups = assembler.take(0.0, final=True)
    crashes = [c for g in groups for c in g]
    assert any(c.exception == "RuntimeError" and len(c.message.split("\n")) <= 40 for c in crashes)
    assert len(crashes) <= 600


def test_plain_traceback_and_bare_exception_line():
    (group,) = assemble_lines(["Traceback (most recent call last):",
                               '  File "/x/python/sglang/launch_server.py", line 11, in <module>',
                               "    main()",
                               "ValueError: No GPU memory values found."])
    assert group[0].rank is None and group[0].exception == "ValueError"
    (group,) = assemble_lines(["(Actor pid=7) torch.distributed.DistNetworkError: port: 1, EADDRINUSE"])
    assert group[0].exception == "torch.distributed.DistNetworkError"
