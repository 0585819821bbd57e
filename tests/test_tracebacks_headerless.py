"""Frames pasted without their `Traceback (most recent call last):` header, often cut before the
exception line too: `ddtreed diagnose` still assembles them as a (cut) traceback whose frames
place the crash. The daemon's streaming assembler still ignores headerless frames that end in no
error. Real dev reports of the corpus, diagnosed the way `ddtreed diagnose` does."""

from pathlib import Path

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.records import LogChunk
from ddtreed.rules import load_rules
from dev_reports import dev_entry, right_as_pasted_and_perturbed
from ddtreed.tracebacks import Assembler, assemble_lines

RULES = load_rules([shipped("rules")])
CORPUS = Path(__file__).resolve().parent / "corpus"
HEADER = "Traceback (most recent call last):"



def diagnose(text: str):
    return diagnose_lines(text.split("\n"), "<paste>", RULES, None)


def without_header(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if not line.rstrip().endswith(HEADER))


def test_a_real_headerless_paste_cut_before_its_error_is_placed_by_its_frames():
    # Was excused in dev-unreachable.json ("needs parser change"): the frames of the hicache
    # load-back, no header, no exception line.
    entry = dev_entry("gemma4-unified-radix-tree-hicache-load-back-crash-24869")
    diagnoses = diagnose(entry["text"])
    assert diagnoses[0].crash.kind == "traceback"
    assert diagnoses[0].crash.frames
    assert diagnoses[0].match.category in {entry["category"], entry.get("alt_category")}


# Real dev reports diagnosed right as pasted that went wrong with their header taken out.
HEADERLESS_DEV = ["dsv41-flash-engram-sps-capture-equal-block",
                  "qwen35-35b-eagle-cow-mamba-false-leak-check-memory",
                  "moe-w2-weight-scale-keyerror-loader-frames",
                  "pybase64-missing-python314-import-sglang",
                  "sgl-kernel-undefined-symbol-setdevice-launch",
                  "flashinfer-sampling-top-k-top-p-importerror-2024"]


@pytest.mark.parametrize("entry_id", HEADERLESS_DEV)
def test_a_real_report_without_its_traceback_header_gets_the_same_category(entry_id):
    right_as_pasted_and_perturbed(entry_id, without_header, diagnose)


FRAMES = ('  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2900, in event_loop\n'
          "    self.process_batch_result(batch, result)\n"
          '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/hiradix_cache.py", line 640, in load_back\n'
          "    host_indices = node.host_value\n")


def test_offline_assembly_keeps_headerless_cut_frames_as_a_cut_traceback():
    crashes = [crash for group in assemble_lines(FRAMES.split("\n"), keep_cut_orphans=True) for crash in group]
    assert len(crashes) == 1
    assert crashes[0].exception is None
    assert [frame.function for frame in crashes[0].frames] == ["event_loop", "load_back"]


def test_one_stray_frame_line_is_no_crash_even_offline():
    assert assemble_lines(FRAMES.split("\n")[:2], keep_cut_orphans=True) == []


@pytest.mark.parametrize("eager", [False, True])
def test_the_daemon_still_ignores_headerless_frames_that_end_in_no_error(eager):
    assembler = Assembler(eager=eager)
    assembler.feed(LogChunk("server.log", 1, tuple(FRAMES.rstrip("\n").split("\n")), 0.0))
    assembler.feed(LogChunk("server.log", 5, ("[2026-07-28 10:00:05 TP0] Decode batch. #running-req: 1",), 1.0))
    assert assembler.take(10.0, final=True) == []
