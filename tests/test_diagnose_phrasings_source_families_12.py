# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-12.toml adds, in the words of the raising code, not
of a corpus report, and the fatal-error dump line beside it. Where each phrasing comes from:

- a JIT-built kernel library refused by the dynamic loader: torch/utils/cpp_extension.py
  (`_import_module_from_library` → `torch.ops.load_library` → `ctypes.CDLL`), FlashInfer's jit/core.py
  (`build_and_load`), glibc's dlopen errors (`file too short`, `invalid ELF header`, `cannot open shared
  object file`);
- MLIR's diagnostic (mlir/lib/IR/Diagnostics.cpp: `loc("<file>":<line>:<col>): error: <message>`), as
  Triton's passes print it for a kernel that fails a lowering (`failed to legalize operation`, `operation
  scheduled before its operands`, `LLVM Translation failed for operation`);
- DeepEP's EP_DEVICE_ASSERT (csrc/kernels/exception.cuh: `Assertion failed: %s:%d, condition: %s`) on
  its kernels' size checks (internode.cu, internode_ll.cu, intranode.cu), alone and before the CUDA
  error its trap causes;
- CPython's fatal-error dump (Python/pylifecycle.c `_Py_DumpExtensionModules`: `Extension modules: a, b,
  … (total: N)`), printed after the stacks of a fatal signal or Py_FatalError.

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file."""

from phrasing_helpers import first_category, new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "source-families-12.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

LOAD_LIBRARY = ["sglang/srt/layers/attention/flashinfer_backend.py:__init__", "flashinfer/jit/core.py:build_and_load",
                "torch/utils/cpp_extension.py:load", "torch/utils/cpp_extension.py:_jit_compile",
                "torch/utils/cpp_extension.py:_import_module_from_library", "torch/_ops.py:load_library"]
CTYPES = '  File "/usr/lib/python3.12/ctypes/__init__.py", line 379, in __init__\n    self._handle = _dlopen(self._name, mode)'
DISPATCH = ["sglang/srt/managers/scheduler.py:run_batch", "sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch_b",
            "sglang/srt/layers/moe/token_dispatcher/deepep.py:_dispatch_core"]


def loader(error: str) -> str:
    text = traceback_text(LOAD_LIBRARY, error)
    head, _, last = text.rpartition("\n")
    return f"{head}\n{CTYPES}\n{last}"


PHRASINGS = [
    # a kernel library the JIT built, refused by the dynamic loader
    ("kernel-compile-error", loader("OSError: /root/.cache/flashinfer/0.6.3/90/cached_ops/rmsnorm/rmsnorm.so: file too short")),
    ("kernel-compile-error", loader("OSError: /tmp/torch_extensions/py312_cu128/fused_topk/fused_topk.so: invalid ELF header")),
    # MLIR's diagnostic for a kernel that failed a lowering pass
    ("kernel-compile-error", 'loc("/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/attention/triton_ops/prefill_attention.py":118:30): error: failed to legalize operation \'tt.dot\' that was explicitly marked illegal'),
    ("kernel-compile-error", '[2026-11-21 09:00:00 TP1] Decode batch, #running-req: 4, #token: 2048, token usage: 0.01, cuda graph: True, gen throughput (token/s): 310.2, #queue-req: 0\n'
                             'loc("/opt/venv/lib/python3.12/site-packages/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_kernels.py":211:25): error: failed to materialize conversion for result #0 of operation \'arith.select\' that remained live after conversion'),
    # DeepEP's device-side size checks, alone (a report's line) and before the CUDA error of their trap
    ("unsupported-config", "Assertion failed: /sgl-workspace/DeepEP/csrc/kernels/intranode.cu:601, condition: num_recv_tokens <= num_max_recv_tokens"),
    ("unsupported-config", "Assertion failed: /opt/deep_ep/csrc/kernels/internode.cu:1204, condition: num_max_nvl_chunked_recv_tokens % num_rdma_ranks == 0"),
    ("unsupported-config", "Assertion failed: /sgl-workspace/DeepEP/csrc/kernels/internode_ll.cu:298, condition: num_topk <= kNumMaxTopK\n"
                           + traceback_text(DISPATCH, "torch.AcceleratorError: CUDA error: an illegal instruction was encountered")),
    ("unsupported-config", "Assertion failed: /sgl-workspace/DeepEP/csrc/kernels/internode.cu:517, condition: num_channels * 2 <= num_rdma_ranks * kNumRDMARecvBuffers\n"
                           + traceback_text(DISPATCH, "RuntimeError: CUDA error: unspecified launch failure")),
]

NEAR_MISSES = [
    # the loader naming a system library that is not installed keeps the missing-dependency reading
    ("missing-dependency", loader("OSError: libcudart.so.13: cannot open shared object file: No such file or directory")),
    # a CUDA error with no DeepEP assertion before it stays the CUDA error's
    ("illegal-memory-access", traceback_text(DISPATCH, "torch.AcceleratorError: CUDA error: an illegal memory access was encountered")),
    # DeepEP's host check keeps its own rule (same category)
    ("unsupported-config", "RuntimeError: Failed: Assertion error /sgl-workspace/DeepEP/csrc/deep_ep.cpp:1102 'x.size(0) <= num_max_dispatch_tokens_per_rank'"),
    # a compiler error in nvcc's own format is the kernel-build family's, not MLIR's line
    ("kernel-compile-error", "/sgl-kernel/csrc/moe/moe_align.cu(41): error: identifier \"__nv_bfloat16\" is undefined\nninja: build stopped: subcommand failed."),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))


def test_cpython_s_fatal_error_dump_is_read_by_its_extension_module_list():
    from ddtreed.tracebacks.grammar import fatal_line

    line = "Extension modules: numpy.core._multiarray_umath, torch._C, zmq.backend.cython._zmq (total: 31)"
    assert fatal_line(line) == ("fatal signal", line)
    assert first_category(RULES, "Thread 0x00007f3e (most recent call first):\n  <no Python frame>\n\n" + line)[0] == "fatal-signal"
    assert fatal_line("Loaded extension modules: none") is None  # only CPython's own wording at a line's end of prefix
