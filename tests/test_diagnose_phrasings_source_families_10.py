# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-10.toml adds, in the words of the raising code, not
of a corpus report. Where each phrasing comes from:

- FlashInfer's flashinfer::Error (include/flashinfer/exception.h: `Error in function '<func>' at
  <file>:<line>: <message>`, thrown by FLASHINFER_CHECK / FLASHINFER_ERROR), with messages of its own
  checks: attention/scheduler.cuh's `new batch size should not exceed padded batch size`, the TRT-LLM
  GEMM runner's `Invalid tactic in getWorkspaceSizeInBytes`, the norm kernels' `Hidden Dimension exceeds
  the maximum supported hidden dimension`, the routing kernels' `runPostTopKPipeline: no compiled tier
  covers numExperts=…`, seen through the tvm-ffi / torch bindings as a RuntimeError;
- DeepEP's EP_HOST_ASSERT (csrc/kernels/exception.cuh: `Failed: Assertion error <file>:<line> '<cond>'`)
  on its API contract in csrc/deep_ep.cpp (`previous_event.has_value() and async` when a call
  allocates on the comm stream), and an input pointer's null check as the DeepEP-compatible ports write
  it (`topk_idx_ptr != 0`);
- a traceback cut inside the process-group set-up: SGLang's model_runner.py init_torch_distributed →
  distributed/parallel_state.py init_distributed_environment / initialize_model_parallel → torch's
  distributed_c10d.py (new_group, init_process_group), and the graph backends of 0.5.1x
  (model_executor/runner_backend/full_cuda_graph_backend.py capture_one, breakable_cuda_graph_backend.py
  replay) that the graph-capture and graph-replay frame families now know.

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file."""

from phrasing_helpers import first_category, new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "source-families-10.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

FI = "/usr/local/lib/python3.12/dist-packages/flashinfer/data/include/flashinfer"
FLASHINFER_PLAN = ["sglang/srt/layers/attention/flashinfer_backend.py:init_forward_metadata",
                   "sglang/srt/layers/attention/flashinfer_backend.py:call_begin_forward",
                   "flashinfer/prefill.py:plan", "tvm_ffi/cython/function.pxi:__call__"]
DEEPEP = ["sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch_a",
          "sglang/srt/layers/moe/token_dispatcher/deepep.py:_dispatch_core", "deep_ep/buffer.py:dispatch"]
INIT = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__",
        "sglang/srt/managers/tp_worker.py:__init__", "sglang/srt/model_executor/model_runner.py:__init__",
        "sglang/srt/model_executor/model_runner.py:init_torch_distributed"]
CAPTURE = ["sglang/srt/model_executor/model_runner.py:init_device_graphs",
           "sglang/srt/model_executor/runner/base_cuda_graph_runner.py:capture",
           "sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py:capture_one"]
REPLAY = ["sglang/srt/model_executor/model_runner.py:forward",
          "sglang/srt/model_executor/runner/base_cuda_graph_runner.py:replay",
          "sglang/srt/model_executor/runner_backend/breakable_cuda_graph_backend.py:replay"]


def cut(frames: list[str]) -> str:
    """A traceback whose paste stops after its last frame's source line (no exception line)."""
    return traceback_text(frames, "", banner="[2026-11-02 10:11:12 TP3] Scheduler hit an exception: Traceback (most recent call last):").rstrip()


PHRASINGS = [
    # FlashInfer's own error format, its checks on the plan and the tensors it was handed
    ("other", traceback_text(FLASHINFER_PLAN, f"RuntimeError: Error in function 'PrefillSplitQOKVIndptr' at {FI}/attention/scheduler.cuh:521: new batch size should not exceed padded batch size")),
    ("other", "RuntimeError: Error in function 'getWorkspaceSizeInBytes' at /workspace/csrc/trtllm_gemm_runner.cu:207: Invalid tactic in getWorkspaceSizeInBytes"),
    ("other", "Error in function 'FusedAddRMSNorm' at /opt/flashinfer/include/flashinfer/norm.cuh:388: Hidden Dimension exceeds the maximum supported hidden dimension"),
    ("other", "RuntimeError: Error in function 'runPostTopKPipeline' at /workspace/csrc/trtllm_fused_moe_routing_custom.cu:612: runPostTopKPipeline: no compiled tier covers numExperts=384 topK=12 for the post-topK permutation (dyn-block path)."),
    # DeepEP-style host assertions on the API contract, not on a size or setting
    ("other", traceback_text(DEEPEP, "RuntimeError: Failed: Assertion error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:418 'previous_event.has_value() and async'")),
    ("other", "RuntimeError: Failed: Assertion error /opt/uccl/ep/src/internode_ll.cc:96 'topk_idx_ptr != 0'"),
    # a traceback cut inside the distributed set-up
    ("nccl-error", cut(INIT + ["sglang/srt/distributed/parallel_state.py:init_distributed_environment",
                               "torch/distributed/c10d_logger.py:wrapper", "torch/distributed/distributed_c10d.py:init_process_group"])),
    ("nccl-error", cut(INIT + ["sglang/srt/distributed/parallel_state.py:initialize_model_parallel",
                               "sglang/srt/distributed/parallel_state.py:init_model_parallel_group"])),
    ("nccl-error", cut(INIT)),
    # the 0.5.1x graph backends are graph code: a cut capture is a capture failure, a size error in replay a graph shape
    ("cuda-graph-capture-failed", cut(CAPTURE + ["sglang/srt/speculative/eagle_draft_cuda_graph_runner.py:run_once"])),
    ("cuda-graph-shape-mismatch", traceback_text(REPLAY, "RuntimeError: shape '[8, -1, 128]' is invalid for input of size 33792")),
]

NEAR_MISSES = [
    # FlashInfer's format around a failure of its own family keeps that family's reading
    ("kernel-compile-error", "RuntimeError: Error in function 'TllmGenFmhaRunner' at /opt/flashinfer/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:41: Unsupported architecture"),
    ("illegal-memory-access", traceback_text(FLASHINFER_PLAN, "RuntimeError: Error in function 'run' at /workspace/csrc/trtllm_fmha_kernel_launcher.cu:175: CUDA error: an illegal memory access was encountered")),
    # DeepEP's checks on sizes and settings stay refusals; on its NVSHMEM buffer they are not the caller's
    ("unsupported-config", traceback_text(DEEPEP, "RuntimeError: Failed: Assertion error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:1102 'x.size(0) <= num_max_dispatch_tokens_per_rank'")),
    ("unsupported-config", "RuntimeError: Failed: Assertion error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:171 'rdma_buffer_ptr != nullptr'"),
    # a distributed set-up whose error line survived keeps it
    ("nccl-error", traceback_text(INIT + ["sglang/srt/distributed/parallel_state.py:init_distributed_environment",
                                          "torch/distributed/distributed_c10d.py:init_process_group"],
                                  "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to (10.0.0.2, 5000).")),
    # a traceback cut in the weight loader is no distributed set-up
    ("model-load-error", cut(INIT[:-1] + ["sglang/srt/model_executor/model_runner.py:load_model",
                                          "sglang/srt/model_loader/loader.py:load_model",
                                          "sglang/srt/models/llama.py:load_weights"])),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))


def test_the_frame_families_know_the_graph_backends_and_the_distributed_package():
    import re

    from ddtreed.rules.evidence import FRAME_FAMILIES

    def families(frame: str) -> set[str]:
        return {name for name, pattern in FRAME_FAMILIES.items() if re.search(pattern, frame)}

    assert "graph-capture" in families("sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py:capture_one")
    assert "graph-replay" in families("sglang/srt/model_executor/runner_backend/breakable_cuda_graph_backend.py:replay")
    assert "distributed" in families("sglang/srt/model_executor/model_runner.py:init_torch_distributed")
    assert "distributed" in families("sglang/srt/distributed/device_communicators/pymscclpp.py:__init__")
    # the graph backends' other methods are no capture, and the model runner's other set-up no distributed one
    assert "graph-capture" not in families("sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py:can_run")
    assert "distributed" not in families("sglang/srt/model_executor/model_runner.py:load_model")


def test_a_cut_distributed_set_up_says_its_frame_and_what_to_check():
    category, diagnosis = first_category(RULES, PHRASINGS[6][1])
    assert category == "nccl-error"
    assert "torch/distributed/distributed_c10d.py:init_process_group" in diagnosis
