# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-9.toml adds, in the words of the raising code, not
of a corpus report. Where each phrasing comes from:

- the CUDA coredump reporter: SGLang's srt/debug_utils/cuda_coredump.py `report()` (`CUDA coredump(s)
  detected ({n} file(s)):`, one `  {path} ({size:.1f} MB)` line per dump, the cuda-gdb hint); the dump
  files are named by CUDA_COREDUMP_FILE `cuda_coredump_%h.%p.%t`; the child death before it is SGLang's
  SubprocessWatchdog (`Subprocess {name} (pid={pid}) crashed with exit code {code}. Triggering SIGQUIT
  for cleanup...`), the assertion unittest's `assertGreaterEqual` (`{a} not greater than or equal to {b}`);
- a compiled kernel's argument checks: flash-attention's / FlashMLA's / sgl-kernel's CHECK_SHAPE
  (`#x " must have shape (" #__VA_ARGS__ ")"`), CHECK_CONTIGUOUS (`#x " must be contiguous"`), flash_api's
  `Input tensor must have contiguous last dimension`, kernel utilities' `"Tensor " #x " must have dtype ("
  #true_dtype ")"` and `" must have dimension number ("`, FlashInfer's csrc/tvm_ffi_utils.h CHECK_DIM
  (`#x " must be a " #d "D tensor"`), check_shape (`a.size(i) and b.size(i) mismatch`, `.ndim() and …
  mismatch`), CHECK_INPUT_TYPE / CHECK_SAME_DTYPE (`Inconsistency of Tensor type: …`), behind tvm-ffi's
  `Check failed: … : ` prefix;
- FlashInfer's companion packages: flashinfer/jit/env.py `_get_cubin_dir` / `_get_aot_dir`
  (`flashinfer-cubin version (…) does not match flashinfer version (…). Please install the same version
  of both packages. Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.`), collect_env.py
  (`{ver}  ⚠ MISMATCH vs flashinfer-python=={fi_version}`).

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file."""

from phrasing_helpers import new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "source-families-9.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

HARNESS = ["unittest/case.py:_callTestMethod", "sglang/test/few_shot_gsm8k.py:run_eval",
           "sglang/test/test_utils.py:assert_score"]
REPORT = """
============================================================
CUDA coredump(s) detected ({n} file(s)):
  /tmp/sglang_cuda_coredumps/17291-1/cuda_coredump_gpu-node-7.{pid}.1764579605 (86.4 MB)
Use cuda-gdb to analyze: cuda-gdb -c <coredump_file>
============================================================"""
DEATH = "[2026-11-30 09:12:44] Subprocess scheduler_2 (pid=5120) crashed with exit code -6. Triggering SIGQUIT for cleanup..."

FLASH_MLA = ["sglang/srt/managers/scheduler.py:run_batch", "sglang/srt/model_executor/model_runner.py:forward_extend",
             "sglang/srt/layers/attention/flashmla_backend.py:forward_extend", "sgl_kernel/flash_mla.py:flash_mla_with_kvcache",
             "torch/_ops.py:__call__"]
FLASH_ATTN = ["sglang/srt/model_executor/model_runner.py:forward_extend", "sglang/srt/layers/attention/flashattention_backend.py:forward_extend",
              "sgl_kernel/flash_attn.py:flash_attn_varlen_func", "torch/_ops.py:__call__"]
FLASHINFER_EAGER = ["sglang/srt/model_executor/model_runner.py:forward_decode", "sglang/srt/layers/attention/flashinfer_backend.py:forward_decode",
                    "flashinfer/decode.py:run", "tvm_ffi/cython/function.pxi:__call__"]
GRAPH_REPLAY = ["sglang/srt/model_executor/model_runner.py:forward", "sglang/srt/model_executor/cuda_graph_runner.py:replay",
                "sglang/srt/model_executor/cuda_graph_runner.py:replay_prepare",
                "sglang/srt/layers/attention/flashinfer_backend.py:init_forward_metadata_replay_cuda_graph",
                "flashinfer/decode.py:plan"]
FLASHINFER_IMPORT = ["sglang/launch_server.py:<module>", "sglang/srt/layers/attention/flashinfer_backend.py:<module>",
                     "flashinfer/__init__.py:<module>", "flashinfer/jit/__init__.py:<module>", "flashinfer/jit/env.py:<module>",
                     "flashinfer/jit/env.py:_get_aot_dir"]

PHRASINGS = [
    # the harness's own assertion on the empty output, then the coredump report: the GPU exception decides
    ("illegal-memory-access", traceback_text(HARNESS, "AssertionError: 0.0 not greater than or equal to 0.72") + "\n" + REPORT.format(n=2, pid=5120)),
    ("illegal-memory-access", DEATH + "\n" + REPORT.format(n=1, pid=5120)),  # the child's abort (SIGABRT) and its dumps
    ("illegal-memory-access", REPORT.format(n=8, pid=918).strip()),  # the report alone
    # compiled kernels refusing a tensor they were handed
    ("other", traceback_text(FLASH_MLA, "RuntimeError: cache_seqlens must have shape (batch_size)")),
    # a report quoting the check next to the library's name (whose loose word reads as a kernel build)
    ("other", "With spec v2 on, sgl_kernel's flash_mla_with_kvcache raises `block_table must have shape (batch_size, max_num_blocks_per_seq)` at the first extend."),
    ("other", "sgl_kernel flash_attn_varlen_func fails: RuntimeError: Input tensor must have contiguous last dimension"),
    ("other", traceback_text(FLASHINFER_EAGER, "RuntimeError: Check failed: (paged_kv_indices.IsContiguous()) is false: paged_kv_indices must be contiguous")),
    ("other", traceback_text(FLASHINFER_EAGER, "RuntimeError: Check failed: q.ndim() == 3 (4 vs. 3) : q must be a 3D tensor")),
    ("other", traceback_text(FLASHINFER_EAGER, "RuntimeError: Check failed: o.dtype() == q.dtype() (bfloat16 vs. float16) : Inconsistency of Tensor type: o dtype must match q dtype")),
    ("other", "RuntimeError: Tensor scale_inv must have dtype (torch::kFloat32)"),  # a pasted one-liner
    # the same shape checks inside CUDA-graph replay: the graph's buffers were sized for another batch
    ("cuda-graph-shape-mismatch", traceback_text(GRAPH_REPLAY, "RuntimeError: Check failed: a.size(i) == b.size(i) (33 vs. 17) : indptr.size(0) and last_page_len.size(0) mismatch")),
    ("cuda-graph-shape-mismatch", traceback_text(GRAPH_REPLAY, "RuntimeError: kv_indptr must have shape (batch_size + 1)")),
    # FlashInfer's Python package beside companion packages of another release
    ("missing-dependency", traceback_text(FLASHINFER_IMPORT, "RuntimeError: flashinfer-jit-cache version (0.6.3+cu129) does not match flashinfer version (0.6.4). Please install the same version of both packages. Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.")),
    ("missing-dependency", traceback_text(FLASHINFER_IMPORT[:-1] + ["flashinfer/jit/env.py:_get_cubin_dir"], "RuntimeError: flashinfer-cubin version (0.5.2) does not match flashinfer version (0.5.3). Please install the same version of both packages. Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.")),
    ("missing-dependency", "flashinfer-python: 0.6.9\nflashinfer-cubin: 0.6.9\nflashinfer-jit-cache: 0.6.8+cu130  ⚠ MISMATCH vs flashinfer-python==0.6.9"),  # collect_env's listing
    ("missing-dependency", "After upgrading the image the decode kernels crash: there is a flashinfer version mismatch between flashinfer-python and flashinfer-cubin in the container."),
]

NEAR_MISSES = [
    # SGLang announcing the coredump settings at start-up is no dump; the OOM after it decides
    ("cuda-oom", "Injecting CUDA coredump env vars (pid=4242)\n" + traceback_text(["sglang/srt/model_executor/model_runner.py:forward"], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free.")),
    # the CUDA error a traceback names keeps its own rule's reading, dumps or not
    ("illegal-memory-access", traceback_text(["sglang/srt/model_executor/model_runner.py:forward"], "torch.AcceleratorError: CUDA error: an illegal memory access was encountered")),
    # torch's own copy-mismatch wording without a stack keeps the shape-mismatch convention
    ("cuda-graph-shape-mismatch", "RuntimeError: The size of tensor a (2048) must match the size of tensor b (4096) at non-singleton dimension 0"),
    # a kernel that did not build stays a kernel build failure
    ("kernel-compile-error", traceback_text(FLASH_ATTN, "RuntimeError: CUDA error: no kernel image is available for execution on the device")),
    # a kernel refusing a CPU tensor stays the device-placement rule's (same category, its own reading)
    ("other", traceback_text(FLASH_ATTN, "RuntimeError: q must be on CUDA")),
    # FlashInfer's plan/run layout check stays the mismatched-build rule's reading
    ("kernel-compile-error", traceback_text(FLASHINFER_EAGER, "RuntimeError: PrefillPlanInfo::FromVector: vec.size() should be 15, but got 14")),
    # a shape mismatch in FlashInfer's words is not a package split
    ("cuda-graph-shape-mismatch", "RuntimeError: flashinfer shape mismatch: The size of tensor a (64) must match the size of tensor b (128) at non-singleton dimension 1"),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
