# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-6.toml adds, in the words of the software that
prints them, not of a corpus report. Where each phrasing comes from:

- DeepEP's EPException (csrc/kernels/exception.cuh: `"Failed: " + name + " error " + file + ":" +
  line + " '" + error + "'"`, thrown by EP_HOST_ASSERT with the condition's text; sgl-kernel-npu's
  fork adds `error meessage or error code is`), the conditions of csrc/deep_ep.cpp's checks and the
  `false and "Unsupported …"` default branch of csrc/kernels/launch.cuh's SWITCH_* macros;
- glibc's assert() line (`<prog>: <file>:<line>: <function>: Assertion `<cond>' failed.`) from
  LLVM's, MLIR's and Triton's own C++ sources, and LLVM's llvm_unreachable (`UNREACHABLE executed
  at <file>:<line>!`), alone or before the abort faulthandler reports;
- size checks that want one size to divide another or be a multiple of a block (`must divide`,
  `to be a multiple of`, `must be a multiple of`, as SGLang's layers and the kernels' TORCH_CHECKs word them);
- the checks that two installed packages do not fit: setuptools' pkg_resources (`VersionConflict`),
  pip's resolver (`X requires Y==1, but you have Y 2 which is incompatible.`), torchvision's
  `_check_cuda_version`, NumPy's C-API import check (`module compiled against ABI version …`);
- the CUDA runtime's string for cudaErrorInvalidAddressSpace (`operation not supported on
  global/shared address space`) and the driver API's name for it;
- FlashInfer's compilation context (flashinfer/compilation_context.py: `No supported CUDA
  architectures found for major versions [...]`, `SM 12.x requires CUDA >= 12.9`);
- DeepGEMM's JIT compiler (csrc/jit/compiler.hpp: `DG_HOST_ASSERT(false and "NVCC compilation
  failed")`, `"cuobjdump failed"`, through csrc/utils/exception.hpp's `Assertion error (<file>:<line>)`);
- Python's own wordings for a None used on the communication path (`'NoneType' object has no
  attribute 'all_gather'`), in SGLang's srt/distributed/ and communicator code;
- the refusals that name what does support a feature (`Only FlashInfer backend supports …`) or say a
  feature is not implemented for this backend, pool or dtype (SGLang's checks, torch's AT_DISPATCH
  `"<op>" not implemented for '<dtype>'`).

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file. None of the phrasings is a corpus
report's text (checked against the development part; the held-out part is never read)."""

from phrasing_helpers import (new_rule_file_tests,
                              traceback_text, with_and_without)

NEW_FILE = "source-families-6.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:event_loop_normal",
         "sglang/srt/managers/scheduler.py:run_batch", "sglang/srt/managers/tp_worker.py:forward_batch_generation",
         "sglang/srt/model_executor/model_runner.py:forward"]
DISPATCH = SCHED + ["sglang/srt/models/deepseek_v2.py:forward", "sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch",
                    "deep_ep/buffer.py:low_latency_dispatch"]
INTRANODE = SCHED + ["sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch_a", "deep_ep/buffer.py:dispatch",
                     "deep_ep/buffer.py:internode_dispatch"]
BACKEND = ["sglang/srt/managers/scheduler.py:__init__", "sglang/srt/managers/tp_worker.py:__init__",
           "sglang/srt/model_executor/model_runner.py:__init__", "sglang/srt/model_executor/model_runner.py:init_attention_backend"]
POOL = ["sglang/srt/managers/scheduler.py:__init__", "sglang/srt/managers/scheduler.py:init_cache_with_memory_pool",
        "sglang/srt/mem_cache/hiradix_cache.py:__init__"]
IMPORT = ["sglang/launch_server.py:<module>", "sglang/srt/entrypoints/http_server.py:<module>", "sglang/srt/entrypoints/engine.py:<module>"]
CAPTURE = ["sglang/srt/managers/scheduler.py:__init__", "sglang/srt/model_executor/model_runner.py:init_device_graphs",
           "sglang/srt/model_executor/cuda_graph_runner.py:__init__", "sglang/srt/model_executor/cuda_graph_runner.py:capture",
           "sglang/srt/model_executor/cuda_graph_runner.py:capture_one_batch_size"]
DEEPGEMM = SCHED + ["sglang/srt/layers/quantization/fp8_kernel.py:w8a8_block_fp8_matmul_deepgemm", "deep_gemm/__init__.py:fp8_gemm_nt"]
TRITON_ABORT = ("Fatal Python error: Aborted\n\nThread 0x00007f3a2c9ff640 (most recent call first):\n"
                '  File "/usr/local/lib/python3.12/dist-packages/triton/compiler/compiler.py", line 320 in compile\n'
                '  File "/usr/local/lib/python3.12/dist-packages/triton/runtime/jit.py", line 591 in run')

PHRASINGS = [
    # none-value-in-communication-code
    ("other", traceback_text(SCHED + ["sglang/srt/distributed/communication_op.py:tensor_model_parallel_all_gather", "sglang/srt/distributed/parallel_state.py:all_gather"], "AttributeError: 'NoneType' object has no attribute 'all_gather'")),
    ("other", traceback_text(SCHED + ["sglang/srt/layers/communicator.py:prepare_attn", "sglang/srt/distributed/parallel_state.py:all_reduce"], "TypeError: 'NoneType' object is not callable")),
    # expert-parallel-library-host-check-refused
    ("unsupported-config", traceback_text(DISPATCH, "RuntimeError: Failed: Assertion error /opt/DeepEP/csrc/kernels/internode_ll.cu:402 'false and \"Unsupported type\"'")),
    ("unsupported-config", traceback_text(INTRANODE, "RuntimeError: Failed: Assertion error /opt/DeepEP/csrc/deep_ep.cpp:318 'config.num_sms % 2 == 0'")),
    ("unsupported-config", traceback_text(INTRANODE, "RuntimeError: Failed: Assertion error /opt/DeepEP/csrc/deep_ep.cpp:344 '(x.size(1) * x.element_size()) % sizeof(int4) == 0'")),
    ("unsupported-config", traceback_text(DISPATCH, "RuntimeError: Failed: Assertion error /home/sgl-kernel-npu/csrc/deepep/deep_ep.cpp:210 error meessage or error code is 'hidden == 7168'")),
    ("unsupported-config", "DeepEP's low-latency dispatch stops at /opt/DeepEP/csrc/kernels/launch.cuh:88 'false and \"Unsupported ranks\"' with 48 ranks"),
    # refusal-named-support-or-implementation
    ("unsupported-config", traceback_text(BACKEND, "AssertionError: Only FlashInfer backend supports custom attention mask currently.")),
    ("unsupported-config", traceback_text(BACKEND, "AssertionError: Only fa3 and triton backends support encoder-decoder cross attention")),
    ("unsupported-config", traceback_text(POOL, "ValueError: L2 codec host pool is not implemented for MLA yet.")),
    ("unsupported-config", traceback_text(SCHED + ["torch/nn/functional.py:linear"], "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'")),
    # kernel-compiler-internal-assertion
    ("kernel-compile-error", "python3: /project/lib/Conversion/TritonGPUToLLVM/ReduceOpToLLVM.cpp:59: auto mlir::triton::ReduceOpConversion::matchAndRewrite: Assertion `false && \"Unexpected reduce\"' failed."),
    ("kernel-compile-error", "python3.11: /root/.triton/llvm/llvm-4017f04e-ubuntu-x64/include/llvm/Support/Casting.h:566: decltype(auto) llvm::cast(const From &) [To = mlir::triton::gpu::BlockedEncodingAttr, From = mlir::Attribute]: Assertion `isa<To>(Val) && \"cast<Ty>() argument of incompatible type!\"' failed."),
    ("kernel-compile-error", "UNREACHABLE executed at /source/llvm-project/llvm/lib/Target/NVPTX/NVPTXISelLowering.cpp:2011!"),
    # kernel-compiler-internal-assertion-then-abort
    ("kernel-compile-error", "python3: /project/lib/Dialect/TritonGPU/Transforms/Pipeliner/PipelineExpander.cpp:417: void mlir::triton::LoopPipelinerInternal::emitPrologue(): Assertion `stage < numStages' failed.\n" + TRITON_ABORT),
    ("kernel-compile-error", "python: /root/.triton/llvm/llvm-86b69c31-almalinux-x64/include/llvm/ADT/SmallVector.h:291: T& llvm::SmallVectorTemplateCommon<T>::operator[](size_type): Assertion `idx < size()' failed.\n" + TRITON_ABORT),
    # size-must-divide-or-be-a-multiple
    ("unsupported-config", traceback_text(BACKEND[:3] + ["sglang/srt/layers/linear.py:__init__"], "AssertionError: tp_size (6) must divide the number of key-value heads (8)")),
    ("unsupported-config", traceback_text(BACKEND[:3] + ["sglang/srt/layers/moe/fused_moe_triton/layer.py:__init__"], "ValueError: Expected intermediate_size_per_partition to be a multiple of 128, got 1440")),
    ("unsupported-config", traceback_text(BACKEND[:3] + ["sgl_kernel/gemm.py:fp8_blockwise_scaled_mm"], "RuntimeError: mat_a.size(1) must be a multiple of 16")),
    # installed-packages-conflict
    ("missing-dependency", traceback_text(IMPORT, "pkg_resources.ContextualVersionConflict: (huggingface-hub 0.19.4 (/usr/local/lib/python3.11/site-packages), Requirement.parse('huggingface-hub>=0.23.0'), {'transformers'})")),
    ("missing-dependency", "ERROR: pip's dependency resolver does not currently take into account all the packages that are installed. This behaviour is the source of the following dependency conflicts.\nvllm 0.8.5 requires torch==2.6.0, but you have torch 2.7.1 which is incompatible."),
    ("missing-dependency", traceback_text(IMPORT + ["torchvision/extension.py:_check_cuda_version"], "RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major versions. PyTorch has CUDA Version=12.8 and torchvision has CUDA Version=11.8. Please reinstall the torchvision that matches your PyTorch install.")),
    ("missing-dependency", traceback_text(IMPORT, "RuntimeError: module compiled against ABI version 0x1000009 but this version of numpy is 0x2000000")),
    # kernel-jit-has-no-target-for-this-gpu
    ("kernel-compile-error", traceback_text(SCHED + ["flashinfer/gemm.py:gen_gemm_sm120_module_cutlass_fp4", "flashinfer/compilation_context.py:get_nvcc_flags_list"], "RuntimeError: No supported CUDA architectures found for major versions [12].")),
    ("kernel-compile-error", "Exception: Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10, 11, 12].\nPossible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)"),
    ("kernel-compile-error", traceback_text(SCHED + ["flashinfer/compilation_context.py:_normalize_cuda_arch"], "RuntimeError: SM 12.x requires CUDA >= 12.9")),
    # kernel-jit-compiler-command-failed
    ("kernel-compile-error", traceback_text(DEEPGEMM, "RuntimeError: Assertion error (csrc/jit/compiler.hpp:208): false and \"NVCC compilation failed\"")),
    ("kernel-compile-error", traceback_text(DEEPGEMM, "RuntimeError: Assertion error (/opt/DeepGEMM/csrc/jit/compiler.hpp:141): false and \"cuobjdump failed\"")),
    # cuda-invalid-address-space
    ("illegal-memory-access", traceback_text(SCHED, "torch.AcceleratorError: CUDA error: operation not supported on global/shared address space\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")),
    ("illegal-memory-access", traceback_text(SCHED + ["triton/backends/nvidia/driver.py:__call__"], "RuntimeError: Triton Error [CUDA]: operation not supported on global/shared address space")),
    ("illegal-memory-access", traceback_text(SCHED + ["sglang/srt/layers/moe/fused_moe_triton/fused_moe.py:invoke_fused_moe_kernel"], "RuntimeError: cuLaunchKernel failed with CUDA_ERROR_INVALID_ADDRESS_SPACE")),
]

NEAR_MISSES = [
    # a GPU kernel's device-side assert (a .cu file, a block and a thread) stays a memory fault
    ("illegal-memory-access", "/pytorch/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:365: operator(): block: [5,0,0], thread: [33,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size && \"index out of bounds\"` failed."),
    # DeepEP's check that NVSHMEM initialised stays a communication failure
    ("nccl-error", traceback_text(INTRANODE[:-1] + ["deep_ep/buffer.py:__init__"], "RuntimeError: Failed: Assertion error /opt/DeepEP/csrc/deep_ep.cpp:281 'nvshmem_rank == internode::init(root_unique_id, nvshmem_rank, num_nvshmem_ranks, low_latency_mode)'")),
    # a CUDA error raised through DeepEP's CUDA_CHECK is judged by the CUDA error
    ("illegal-memory-access", traceback_text(DISPATCH, "RuntimeError: Failed: CUDA error /opt/DeepEP/csrc/deep_ep.cpp:1310 'an illegal memory access was encountered'")),
    # DeepGEMM's refusal of an architecture (its API checks, not its JIT compiler) stays a refused GPU
    ("unsupported-config", traceback_text(DEEPGEMM, "RuntimeError: Assertion error (csrc/apis/layout.hpp:59): Unknown SF transformation")),
    # a kernel package built against another torch (an undefined C++ symbol) stays a kernel build mismatch
    ("kernel-compile-error", traceback_text(IMPORT + ["sgl_kernel/__init__.py:<module>"], "ImportError: /usr/local/lib/python3.12/dist-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c104cuda20CUDACachingAllocator9allocatorE")),
    # a refusal that says an option is not supported on this device stays a refused option
    ("unsupported-config", traceback_text(BACKEND, "ValueError: fp8 e5m2 kv cache is not supported on this device")),
    # a size that does not divide while a CUDA graph is captured stays the capture's failure
    ("cuda-graph-capture-failed", traceback_text(CAPTURE, "AssertionError: num_tokens must be a multiple of 8")),
    # a collective that failed in distributed code stays a communication failure
    ("nccl-error", traceback_text(SCHED + ["sglang/srt/distributed/parallel_state.py:all_reduce", "torch/distributed/distributed_c10d.py:all_reduce"], "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, remote process exited or there was a network error, NCCL version 2.27.3")),
    # a bare assertion in SGLang's serving code stays a code bug
    ("other", traceback_text(SCHED, "AssertionError: req.output_ids is empty")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
