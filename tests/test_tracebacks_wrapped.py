"""Crash text hard-wrapped at a fixed column (a terminal's or an issue editor's: a long log line,
frame or exception message broken across lines, the continuation not indented), and a traceback
cut before its exception line with another traceback pasted after it. Diagnosed the way
`ddtreed diagnose` does, on real dev reports of the corpus and real SGLang logs."""

from pathlib import Path

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from dev_reports import dev_entry, right_as_pasted_and_perturbed
from ddtreed.tracebacks import assemble_lines
from ddtreed.tracebacks.paste import unwrap, wrap_width

RULES = load_rules([shipped("rules")])
ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"
SITE = "/usr/local/lib/python3.12/dist-packages/sglang/srt"


def wrap(text: str, width: int) -> str:
    """Every line longer than `width` broken at it, as a terminal copy does."""
    out = []
    for line in text.split("\n"):
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return "\n".join(out)


def diagnose(text: str):
    return diagnose_lines(text.split("\n"), "<paste>", RULES, None)



FOUNDING = f"""[2026-07-28 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/managers/scheduler.py", line 2900, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "{SITE}/model_executor/cuda_graph_runner.py", line 1306, in replay
    self.replay_prepare(forward_batch, pp_proxy_tensors)
  File "{SITE}/model_executor/cuda_graph_runner.py", line 1241, in replay_prepare
    self.input_ids[: self.raw_num_token].copy_(forward_batch.input_ids)
RuntimeError: The size of tensor a (8) must match the size of tensor b (33) at non-singleton dimension 0
"""


@pytest.mark.parametrize("width", [80, 100])
def test_a_wrapped_sglang_traceback_keeps_its_header_frames_and_message(width):
    diagnoses = diagnose(wrap(FOUNDING, width))
    assert diagnoses
    crash = diagnoses[0].crash
    assert crash.exception == "RuntimeError"
    assert crash.message == ("The size of tensor a (8) must match the size of tensor b (33) at "
                             "non-singleton dimension 0")
    assert [frame.function for frame in crash.frames] == ["run_scheduler_process", "replay", "replay_prepare"]
    assert diagnoses[0].match.category == "cuda-graph-shape-mismatch"


# Real dev reports diagnosed right as pasted that a wrap at 80 columns used to turn wrong.
WRAPPED_DEV = ["gptoss-flashinfer-0210-capture-weight-scale-vec-size",
               "eagle3-draft-extend-logits-vocab-32000-vs-151936",
               "mtp-bench-one-batch-replay-input-ids-4-vs-2",
               "qwen3-embedding-keyerror-embed-tokens",
               "rocm-r1-dp-negative-profiled-kv-tokens",
               "llama4-scout-custom-allreduce-register-graph-buffers-invalid-arg"]


@pytest.mark.parametrize("entry_id", WRAPPED_DEV)
def test_a_real_report_wrapped_at_80_columns_gets_the_category_it_gets_unwrapped(entry_id):
    right_as_pasted_and_perturbed(entry_id, lambda text: wrap(text, 80), diagnose)


def test_wrapping_joins_only_the_broken_lines():
    lines = wrap(FOUNDING, 80).split("\n")
    assert wrap_width(lines) == 80
    assert unwrap(lines) == FOUNDING.split("\n")


def real_logs():
    found = sorted((ROOT / "fixtures" / "sglang-0.5.16").glob("*.log"))
    shared = Path("/work/shared/real-sglang/logs")
    if shared.is_dir():
        found += sorted(shared.glob("*.log"))
    return found


@pytest.mark.parametrize("path", real_logs(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_a_real_sglang_log_is_never_taken_for_a_wrapped_one(path):
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    assert wrap_width(lines) is None
    assert unwrap(lines) is lines


def test_repeated_log_lines_of_one_length_are_not_a_wrap():
    line = "[2026-07-28 10:00:00 TP0] Decode batch. #running-req: 1, #token: 93, gen throughput (token/s): 51.20"
    lines = [line] * 5 + ["[2026-07-28 10:00:01 TP0] Prefill batch. #new-seq: 1"]
    assert wrap_width(lines) is None


def test_a_traceback_cut_before_its_exception_line_stays_apart_from_the_next_one():
    # nsa-piecewise-graph-num-tokens-6-vs-8 (dev) ends inside the scheduler's frames; a warm-up
    # traceback pasted under it used to be read as more frames of the cut one.
    entry = dev_entry("nsa-piecewise-graph-num-tokens-6-vs-8")
    cut = entry["text"].rstrip("\n")
    later = (f'Traceback (most recent call last):\n  File "{SITE}/entrypoints/http_server.py", line 1290, in '
             "_wait_and_warmup\n    res = requests.get(url)\nrequests.exceptions.ConnectionError: Connection refused\n")
    alone = [crash for group in assemble_lines(cut.split("\n")) for crash in group]
    both = [crash for group in assemble_lines((cut + "\n" + later).split("\n")) for crash in group]
    assert len(both) == len(alone) + 1
    assert both[:-1] == [crash for crash in both[:-1]]
    first, last = both[-2], both[-1]
    assert first.exception is None and first.frames == alone[-1].frames
    assert last.exception == "requests.exceptions.ConnectionError"
    assert [frame.function for frame in last.frames] == ["_wait_and_warmup"]
