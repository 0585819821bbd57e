"""Signatures: stable across ranks, paths, line numbers and numbers; explain every step."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ddtreed.records import Crash, Frame
from ddtreed.signature import signature_of
from ddtreed.tracebacks import assemble_lines

CORPUS = Path(__file__).parent / "corpus"
FOUNDING = CORPUS / "logs" / "ddtree-verify-width-8-vs-33.log"
ENTRIES = {e["id"]: e for e in map(json.loads, (CORPUS / "sglang-crashes.jsonl").read_text().splitlines())}


def first_crash(entry_id):
    return assemble_lines(ENTRIES[entry_id]["log"].split("\n"))[0][0]


def test_founding_signature_params_and_hints():
    tp3, tp0 = assemble_lines(FOUNDING.read_text().splitlines())[0]
    signature = signature_of(tp3)
    assert signature_of(tp0).fingerprint == signature.fingerprint  # ranks do not matter
    assert signature.params == {"n0": 8, "n1": 33, "n2": 0}
    assert signature.exception == "RuntimeError"
    assert signature.normalized_message == ("The size of tensor a (<n>) must match the size of tensor "
                                            "b (<n>) at non-singleton dimension <n>")
    assert signature.frames[-1] == "sglang/srt/model_executor/cuda_graph_runner.py:replay_prepare"
    assert not any(frame.startswith("torch/") for frame in signature.frames)
    assert "numbers 8, 33, 0 replaced by <n> and kept as n0..n2" in signature.hints
    assert "1 frame(s) dropped as not in-app (torch)" in signature.hints
    assert len(signature.fingerprint) == 16 and int(signature.fingerprint, 16) >= 0


def test_same_failure_other_install_lines_and_numbers_shares_fingerprint():
    crash = assemble_lines(FOUNDING.read_text().splitlines())[0][0]
    moved = replace(
        crash,
        message=crash.message.replace("(8)", "(16)").replace("(33)", "(65)"),
        frames=tuple(Frame(f.file.replace("/root/venv_sglang211/lib/python3.12/site-packages",
                                          "/opt/conda/lib/python3.10/dist-packages"),
                           (f.line or 0) + 7, f.function) for f in crash.frames),
        rank="DP1 TP7",
    )
    assert signature_of(moved).fingerprint == signature_of(crash).fingerprint
    assert signature_of(moved).params == {"n0": 16, "n1": 65, "n2": 0}


def test_different_exception_or_frames_change_fingerprint():
    crash = assemble_lines(FOUNDING.read_text().splitlines())[0][0]
    base = signature_of(crash).fingerprint
    assert signature_of(replace(crash, exception="ValueError")).fingerprint != base
    assert signature_of(replace(crash, frames=crash.frames[:-1])).fingerprint != base
    same_shape_elsewhere = first_crash("mtp-bench-one-batch-replay-input-ids-4-vs-2")
    assert signature_of(same_shape_elsewhere).normalized_message == signature_of(crash).normalized_message


def test_wrapper_crash_carries_inner_values():
    signature = signature_of(first_crash("dsr1-h200-torch-compile-flashinfer-mla-capture-ima"))
    assert signature.params["wrapper"] == "Capture cuda graph failed"
    assert signature.params["inner_exception"] == "RuntimeError"
    assert signature.params["inner_message"] == "CUDA error: an illegal memory access was encountered"
    assert any("first line" in hint for hint in signature.hints)  # CUDA advice lines left out


def test_paths_hex_and_no_in_app_frames():
    crash = Crash(kind="traceback", exception="ImportError",
                  message="/home/u/.local/lib/python3.10/site-packages/sgl_kernel/ops.so: bad 0x7f3a",
                  frames=(Frame("/usr/lib/python3/dist-packages/foo/bar.py", 3, "load"),))
    signature = signature_of(crash)
    assert signature.normalized_message == "sgl_kernel/ops.so: bad <hex>"
    assert signature.frames == ("foo/bar.py:load",)
    assert any("no in-app" in hint for hint in signature.hints)
    assert any("hex" in hint for hint in signature.hints)


def test_child_death_keeps_exit_code():
    crash = Crash(kind="child-death", exception=None, exit_code=-9,
                  message="Subprocess scheduler_0 (pid=4242) crashed with exit code -9")
    signature = signature_of(crash)
    assert signature.params["exit_code"] == -9
    other = replace(crash, message="Subprocess scheduler_0 (pid=777) crashed with exit code -9")
    assert signature_of(other).fingerprint == signature.fingerprint
