"""The noise real pastes and log collectors add does not change a diagnosis: real development
reports of the corpus, right as pasted, stay right after each transformation of
`tests/perturbations.py` (the same ones `benchmarks/diagnose_robustness.py` runs over the whole
development part). The reports named per class are the ones that transformation used to turn
wrong, plus a few of other categories; diagnosed the way `ddtreed diagnose` does."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import perturbations as p
from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.records import LogChunk
from ddtreed.rules import load_rules
from ddtreed.tracebacks import Assembler
from ddtreed.tracebacks.collectors import uncollected
from dev_reports import right_as_pasted_and_perturbed

RULES = load_rules([shipped("rules")])
ROOT = Path(__file__).resolve().parent.parent


def diagnose(text: str):
    return diagnose_lines(text.splitlines(), "<paste>", RULES, None)


# A few reports of other categories, each with a traceback, a bare error line or only prose.
OTHERS = ["eagle3-draft-extend-logits-vocab-32000-vs-151936", "mtp-bench-one-batch-replay-input-ids-4-vs-2",
          "qwen3-embedding-keyerror-embed-tokens", "rocm-r1-dp-negative-profiled-kv-tokens"]
# Reports a collector's prefix on every line turned wrong (journalctl, kubectl --prefix).
COLLECTED = ["dsv25-tp8-capture-cuda-graph-exception-in-run-tp-server-1479", "qwen3-safetensors-load-bus-error",
             "eagle2-pr-deepseek-v2-triton-cuda-graph-attn-logits-alloc-oom-pr-1498",
             "mamba-cache-leak-adder-fails-matched-req-21404", "pybase64-missing-python314-import-sglang",
             "moe-w2-weight-scale-keyerror-loader-frames",
             "spec-retract-decode-oom-verify-alloc-token-slots-14942",
             "glm53-flash-sm120-hicache-mamba-alloc-unspecified-launch-failure"]
CASES = {
    "journald-prefix": COLLECTED, "kubectl-prefix": COLLECTED,
    "docker-timestamps": COLLECTED[:4], "srun-label": COLLECTED[:4], "mpirun-tag-output": COLLECTED[:4],
    "cri-prefix": ["aiter-mi300a-fmha-v3-hipmodulelaunchkernel-invalid-resource-handle-1332",
                   "llama4-scout-custom-allreduce-register-graph-buffers-invalid-arg"],
    "compose-prefix": ["llama4-scout-custom-allreduce-register-graph-buffers-invalid-arg"],
    # torchrun's `[rank3]:` before SGLang's own prefix, a Ray actor's, a logger's `[ts] ERROR: `
    "torchrun-rank-prefix": ["gb10-dflash-long-prefill-silent-worker-death", "sglang-19408-glm5-keyerror-glm-moe-dsa",
                             "npu-a3-qwen35-mtp-triton-ascend-compile-subprocess-slime",
                             "llama4-scout-custom-allreduce-register-graph-buffers-invalid-arg"],
    "rank-prefix-removed": ["sglang-19408-glm5-keyerror-glm-moe-dsa",
                            "eagle3-draft-extend-logits-vocab-32000-vs-151936"],
    "dedent": ["sglang-diffusion-flux2-launch-server-post-init-refused-19104"],
    "double-spaced": ["hicache-mtp-mooncake-store-draft-write-assert",
                      "custom-allreduce-ipc-meta-invalid-argument-capture-h20-11957"],
    "fenced": ["aiter-mi300a-fmha-v3-hipmodulelaunchkernel-invalid-resource-handle-1332"],
    "details": ["aiter-mi300a-fmha-v3-hipmodulelaunchkernel-invalid-resource-handle-1332"],
}
NEVER_BROKE = ["ansi-python313", "ansi-lines", "crlf", "tabs", "quoted", "in-issue-template", "rank-prefix-added",
               "rank-retagged", "paths-conda", "paths-dist", "paths-source", "numbers-sizes", "numbers-shapes",
               "numbers-ranks", "numbers-counts", "frame-line-numbers", "model-names", "two-ranks-sequential",
               "two-ranks-interleaved"]
PAIRS = sorted({(name, entry_id) for name, ids in CASES.items() for entry_id in ids + OTHERS}
               | {(name, entry_id) for name in NEVER_BROKE for entry_id in OTHERS})


@pytest.mark.parametrize("name,entry_id", PAIRS)
def test_a_real_report_keeps_its_category_under_realistic_noise(name, entry_id):
    right_as_pasted_and_perturbed(entry_id, p.PERTURBATIONS[name], diagnose)


def test_every_transformation_is_tested():
    assert set(CASES) | set(NEVER_BROKE) == set(p.PERTURBATIONS)


# --- the offline collector stage ---------------------------------------------------------------

def test_collector_prefixes_come_off_and_other_lines_stay():
    lines = ["Dec 01 12:00:00 gpu-node-3 python3[1234]: Traceback (most recent call last):",
             "Dec 01 12:00:00.123456 gpu-node-3 python3[1234]:   File \"x.py\", line 3, in f",
             "2026-12-01T12:00:00+0100 gpu-node-3 kernel: NVRM: Xid (PCI:0000:1b:00): 79, GPU has fallen off the bus",
             "[pod/sglang-0/sglang] ValueError: bad",
             "2026-01-17T18:48:10.417752845Z RuntimeError: x",
             "[1,3]<stderr>:KeyError: 'y'",
             "Error: keep me"]
    assert uncollected(lines) == ["Traceback (most recent call last):", '  File "x.py", line 3, in f',
                                  "NVRM: Xid (PCI:0000:1b:00): 79, GPU has fallen off the bus",
                                  "ValueError: bad", "RuntimeError: x", "KeyError: 'y'", "Error: keep me"]


def test_cri_partial_records_are_joined_into_their_line():
    lines = ["2026-01-17T18:48:10.1Z stderr P RuntimeError: The size of tensor a (8) ",
             "2026-01-17T18:48:10.2Z stdout F [2026-01-17 18:48:10 TP0] Decode batch",
             "2026-01-17T18:48:10.3Z stderr F must match the size of tensor b (33)"]
    assert uncollected(lines) == ["[2026-01-17 18:48:10 TP0] Decode batch",
                                  "RuntimeError: The size of tensor a (8) must match the size of tensor b (33)"]


def test_a_task_number_is_a_prefix_only_when_most_lines_carry_one():
    labelled = ["0: Traceback (most recent call last):", '0:   File "x.py", line 3, in f', "0: ValueError: bad"]
    assert uncollected(labelled) == ["Traceback (most recent call last):", '  File "x.py", line 3, in f',
                                     "ValueError: bad"]
    prose = ["The server died.", "1: it loads the weights", "2: it dies", "Any idea?", "Thanks"]
    assert uncollected(prose) is prose


def test_text_without_prefixes_or_colours_is_the_same_list():
    lines = ["[2026-01-01 00:00:00 TP0] Load weight begin.", "Traceback (most recent call last):"]
    assert uncollected(lines) is lines


# --- the live path: torchrun's prefix before SGLang's ------------------------------------------

@pytest.mark.parametrize("eager", [False, True])
def test_the_daemon_reads_sglang_prefixed_lines_behind_torchruns_rank_prefix(eager):
    site = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
    lines = ("[rank3]:[2026-07-28 10:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):",
             f'[rank3]:  File "{site}/managers/scheduler.py", line 2900, in run_scheduler_process',
             "[rank3]:    scheduler.event_loop_overlap()",
             f'[rank3]:  File "{site}/model_executor/cuda_graph_runner.py", line 1241, in replay_prepare',
             "[rank3]:    self.input_ids[: self.raw_num_token].copy_(forward_batch.input_ids)",
             "[rank3]:RuntimeError: The size of tensor a (8) must match the size of tensor b (33) at "
             "non-singleton dimension 0",
             "[rank3]:[2026-07-28 10:00:01] Received sigquit from a child process. It usually means the child failed.")
    assembler = Assembler(eager=eager)
    assembler.feed(LogChunk("server.log", 1, lines, 0.0))
    crashes = [crash for group in assembler.take(10.0, final=True) for crash in group]
    traceback = next(crash for crash in crashes if crash.kind == "traceback")
    assert traceback.rank == "TP3"
    assert traceback.exception == "RuntimeError"
    assert [frame.function for frame in traceback.frames] == ["run_scheduler_process", "replay_prepare"]


def test_the_robustness_benchmark_prints_json_for_one_transformation():
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "diagnose_robustness.py"), "--only", "crlf"],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout)
    row = report["perturbations"]["crlf"]
    assert report["right_as_pasted"] > 300 and row["applicable"] > 0
    assert row["right_after"] == row["applicable"]
