"""A log pasted newest-line-first (a log viewer's order: Grafana/Loki, a cloud console) is read as
whole, oldest-first, by every reader of `ddtreed diagnose` (the assembler, the quoted errors, the
error lines outside tracebacks): chained tracebacks keep the crash last (not the first cause) and
the start-up milestones come before the crash they date. Real development reports, reversed line for line, keep
the category they get as pasted."""

import pytest

import perturbations as p

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.tracebacks.assembler import unreverse
from dev_reports import right_as_pasted_and_perturbed

RULES = load_rules([shipped("rules")])
SITE = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
LOG = f"""[2026-03-02 10:00:01 TP0] Load weight begin. avail mem=78.50 GB
[2026-03-02 10:00:40 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.10 GB
[2026-03-02 10:00:41 TP0] KV Cache is allocated. #tokens: 412000, K size: 24.00 GB, V size: 24.00 GB
[2026-03-02 10:00:42 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=12.30 GB
[2026-03-02 10:00:44 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "{SITE}/model_executor/cuda_graph_runner.py", line 380, in __init__
    self.capture()
  File "{SITE}/model_executor/cuda_graph_runner.py", line 470, in capture
    ) = self.capture_one_batch_size(bs, forward)
  File "{SITE}/model_executor/cuda_graph_runner.py", line 560, in capture_one_batch_size
    run_once()
  File "{SITE}/layers/attention/flashinfer_backend.py", line 210, in init_forward_metadata_capture_cuda_graph
    self.indices_updater_decode.update(bs, seq_lens)
RuntimeError: The size of tensor a (8) must match the size of tensor b (16) at non-singleton dimension 0

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "{SITE}/managers/scheduler.py", line 2984, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "{SITE}/model_executor/model_runner.py", line 300, in init_cuda_graphs
    self.cuda_graph_runner = CudaGraphRunner(self)
  File "{SITE}/model_executor/cuda_graph_runner.py", line 382, in __init__
    raise Exception(
Exception: Capture cuda graph failed: The size of tensor a (8) must match the size of tensor b (16) at non-singleton dimension 0
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
[2026-03-02 10:00:45] Received sigquit from a child process. It usually means the child failed.
"""


def diagnose(text: str):
    return diagnose_lines(text.splitlines(), "<paste>", RULES, None)


def newest_first(text: str) -> str:
    return "\n".join(reversed(text.splitlines()))


def test_a_whole_log_upside_down_is_read_back_in_the_order_it_was_written():
    lines = LOG.splitlines()
    assert unreverse(lines[::-1]) == lines


def test_a_chained_capture_failure_pasted_newest_first_names_the_crash_and_its_phase():
    as_written, upside_down = diagnose(LOG)[0], diagnose(newest_first(LOG))[0]
    assert upside_down.match.category == as_written.match.category == "cuda-graph-shape-mismatch"
    assert upside_down.crash.exception == as_written.crash.exception == "Exception"
    assert upside_down.evidence.phase == as_written.evidence.phase == "graph-capture"


def test_one_traceback_upside_down_inside_a_text_in_the_usual_order_is_turned_alone():
    lines = LOG.splitlines()
    header = next(i for i, line in enumerate(lines) if line.endswith("Traceback (most recent call last):")
                  and "Scheduler" not in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("Exception: Capture"))
    mixed = lines[:header] + lines[header:end + 1][::-1] + lines[end + 1:]
    assert unreverse(mixed) == lines


def test_frames_behind_the_prefix_their_header_carries_are_seen_upside_down():
    prefix = "[2026-03-02 10:00:44] ERROR: "
    lines = [prefix + "Traceback (most recent call last):",
             prefix + f'  File "{SITE}/managers/scheduler.py", line 2984, in run_scheduler_process',
             prefix + "    scheduler.event_loop_normal()",
             prefix + f'  File "{SITE}/model_executor/model_runner.py", line 410, in load_model',
             prefix + "    self.model = get_model(model_config=self.model_config)",
             prefix + "KeyError: 'glm_moe_dsa'"]
    assert unreverse(lines[::-1]) == lines
    diagnosis = diagnose("\n".join(lines[::-1]))[0]
    assert diagnosis.crash.exception == "KeyError"
    assert diagnosis.crash.frames[-1].function == "load_model"


@pytest.mark.parametrize("entry_id", [
    "nsa-piecewise-graph-num-tokens-6-vs-8",
    "sglang-diffusion-flux2-launch-server-post-init-refused-19104",
    "diffusion-generate-deep-gemm-cuda-home-unset-assertion-13468",
    "sglang-19408-glm5-keyerror-glm-moe-dsa",  # every line behind a logger's `[ts] ERROR: `
    "sgl-kernel-deepgemm-nvcc-unsupported-arch-sm100f-9340",  # nvcc's lines around the traceback count too
])
def test_a_real_report_pasted_newest_first_keeps_its_category(entry_id):
    right_as_pasted_and_perturbed(entry_id, newest_first, diagnose)


@pytest.mark.parametrize("entry_id", [
    "gptoss-flashinfer-0210-capture-weight-scale-vec-size",
    "main-transformers-backends-mapping-valueerror",
])
def test_a_real_report_behind_torchruns_rank_prefix_pasted_newest_first_keeps_its_category(entry_id):
    right_as_pasted_and_perturbed(entry_id, lambda text: newest_first(p.torchrun(text)), diagnose)
