# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-2.toml adds, and the family fix in
ddtreed/rules/evidence.py, in the words of the software that prints them, not of a corpus report.
Where each phrasing comes from:

- the CUDA math libraries' allocation status (CUDNN_STATUS_ALLOC_FAILED, cudnn_graph.h);
- the CUDA runtime/driver error strings (cudaGetErrorString, cuGetErrorString) and HIP's
  (hipGetErrorString): `shared object initialization failed`, `too many resources requested for
  launch`, `too many blocks in cooperative launch`, and torch's hint after every one of them
  ("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", c10/cuda/CUDAException.cpp),
  which is not a device-side assert;
- Triton's driver (`Triton Error [CUDA]: <runtime string>`), NCCL's CUDACHECK (`Cuda failure 'out of
  memory'`, src/include/checks.h);
- torch's own size checks (bmm, narrow, indexing, resize: aten/src/ATen/native/LinearAlgebra.cpp,
  TensorShape.cpp, IndexingUtils.h, Resize.cpp), inside a graph runner's capture or replay;
- CANN's device error line on Ascend NPUs (`EZ9999: fftsplus aicore error, error code = …`), as
  torch_npu surfaces it;
- ROCr's hsa_status_t names (hsa.h, hsa_ext_amd.h) as HIP's rocdevice.cpp prints them;
- MLIR's pass manager (`Failures have been detected while processing an MLIR pass pipeline`,
  `Pipeline failed while executing [...]`) and CUTLASS's CuTe DSL (`DSLRuntimeError`, `Error during
  runtime code generation for function ...`);
- SGLang 0.5.16's own raise sites: hardware_backend/gpu/quantization/{gptq,awq}_kernels.py,
  layers/attention/linear/kernels/gdn_flashinfer.py, disaggregation/{mooncake,nixl,ascend}/,
  distributed/device_communicators/{mooncake_transfer_engine,vmm_utils}.py,
  managers/data_parallel_controller.py, model_executor/pool_configurator.py, mem_cache/pool_host/mha.py,
  utils/common.py, platforms/__init__.py,
  model_loader/loader.py, multimodal/processors/mimo_audio.py,
  layers/moe/moe_runner/flashinfer_cutlass.py; transformers' utils/chat_template_utils.py; Mooncake's transfer engine glog lines (rdma_context.cpp, worker_pool.cpp).

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file. None of the phrasings is a corpus
report's text (checked against the development part; the held-out part is never read)."""


from phrasing_helpers import (new_rule_file_tests,
                              traceback_text, with_and_without)

NEW_FILE = "source-families-2.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)
TORCH_HINT = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
              "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
HIP_HINT = ("\nHIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
            "For debugging consider passing AMD_SERIALIZE_KERNEL=3\nCompile with `TORCH_USE_HIP_DSA` to enable device-side assertions.\n")


def tb(frames, last):
    """A traceback as SGLang's scheduler prints it, under its `Scheduler hit an exception` banner."""
    return traceback_text(frames, last, line=412, body="    run()",
                          banner="[2026-07-11 14:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):")


def announced(message):
    """The one-line form: the scheduler's banner with the error inline, then the launcher's SIGQUIT."""
    return (f"[2026-07-11 14:00:00 TP2] Scheduler hit an exception: {message}\n"
            "[2026-07-11 14:00:01] Received sigquit from a child process. It usually means the child failed.")


def rocm(status, text, code):
    return f":0:rocdevice.cpp            :3020: 4412873301 us: [pid:2817  tid:0x7f2c3bfff640] Callback: Queue 0x7f2a84200000 aborting with error : {status}: {text} code: {code}"


SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__"]
FWD = ["sglang/srt/managers/scheduler.py:event_loop_overlap", "sglang/srt/managers/scheduler.py:run_batch",
       "sglang/srt/managers/tp_worker.py:forward_batch_generation", "sglang/srt/model_executor/model_runner.py:forward"]
TRITON = FWD + ["sglang/srt/layers/attention/triton_ops/extend_attention.py:extend_attention_fwd", "triton/runtime/jit.py:run"]
NCCL = FWD + ["sglang/srt/distributed/parallel_state.py:all_reduce", "sglang/srt/distributed/device_communicators/pynccl.py:all_reduce"]
CAPTURE = SCHED + ["sglang/srt/model_executor/model_runner.py:init_device_graphs", "sglang/srt/model_executor/cuda_graph_runner.py:__init__",
                   "sglang/srt/model_executor/cuda_graph_runner.py:capture", "torch/cuda/graphs.py:__exit__"]
REPLAY = FWD + ["sglang/srt/model_executor/cuda_graph_runner.py:replay", "sglang/srt/model_executor/cuda_graph_runner.py:replay_prepare"]
CAPTURE_ONE = SCHED + ["sglang/srt/model_executor/model_runner.py:init_device_graphs", "sglang/srt/model_executor/cuda_graph_runner.py:__init__",
                       "sglang/srt/model_executor/cuda_graph_runner.py:capture", "sglang/srt/model_executor/cuda_graph_runner.py:capture_one_batch_size"]
MOE = FWD + ["sglang/srt/layers/moe/fused_moe_triton/layer.py:forward", "sgl_kernel/moe.py:moe_align_block_size"]
CUTE = FWD + ["sglang/srt/layers/quantization/fp8_kernel.py:fp8_blockwise_gemm", "cutlass/base_dsl/dsl.py:_func"]
PD = SCHED + ["sglang/srt/disaggregation/mooncake/conn.py:__init__", "sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py:initialize"]
NIXL = ["sglang/srt/managers/scheduler.py:event_loop_normal_disagg_prefill", "sglang/srt/disaggregation/prefill.py:send_kv_chunk",
        "sglang/srt/disaggregation/nixl/conn.py:send_kvcache", "sglang/srt/disaggregation/nixl/conn.py:_send_kvcache_generic"]
DP = ["sglang/srt/managers/data_parallel_controller.py:run_data_parallel_controller_process", "sglang/srt/managers/data_parallel_controller.py:__init__",
      "sglang/srt/managers/data_parallel_controller.py:_receive_ports_as_client"]
DEVICE = ["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:__post_init__", "sglang/srt/utils/common.py:get_device_memory_capacity"]
LOAD = SCHED + ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/model_loader/loader.py:load_model"]

PHRASINGS = [
    # the family fix: torch's hint after a CUDA/HIP error is not a device-side assert
    ("kernel-compile-error", tb(FWD, "torch.AcceleratorError: CUDA error: invalid device function" + TORCH_HINT)),
    ("kernel-compile-error", tb(FWD, "RuntimeError: HIP error: invalid device function" + HIP_HINT)),
    ("cuda-graph-capture-failed", tb(CAPTURE, "RuntimeError: CUDA error: operation failed due to a previous error during capture" + TORCH_HINT)),
    # out-of-memory-reported-by-another-library: Triton's and NCCL's report of the runtime's OOM
    ("cuda-oom", announced("RuntimeError: Triton Error [CUDA]: out of memory")),
    ("cuda-oom", tb(TRITON, "RuntimeError: Triton Error [CUDA]: out of memory")),
    ("cuda-oom", tb(NCCL, "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 2 'out of memory'")),
    ("cuda-oom", tb(NCCL, "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)\nLast error:\nCuda failure 'out of memory'")),
    ("cuda-oom", tb(FWD + ["sglang/srt/layers/attention/vision.py:forward", "torch/nn/modules/conv.py:_conv_forward"], "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED")),
    # torch-size-check-in-graph-code: torch's bmm/narrow/index/resize checks in a graph's replay or capture
    ("cuda-graph-shape-mismatch", tb(REPLAY, "RuntimeError: Expected size for first two dimensions of batch2 tensor to be: [16, 64] but got: [40, 64].")),
    ("cuda-graph-shape-mismatch", tb(REPLAY, "RuntimeError: start (0) + length (40) exceeds dimension size (16).")),
    ("cuda-graph-shape-mismatch", tb(CAPTURE_ONE, "IndexError: index 40 is out of bounds for dimension 0 with size 16")),
    ("cuda-graph-shape-mismatch", tb(REPLAY, "RuntimeError: Trying to resize storage that is not resizable")),
    # sglang-pool-cannot-hold-a-request: the sliding-window and host pools' sizing refusals
    ("kv-pool-too-small", tb(SCHED + ["sglang/srt/model_executor/model_runner.py:init_memory_pool", "sglang/srt/model_executor/pool_configurator.py:calculate_pool_sizes", "sglang/srt/model_executor/pool_configurator.py:_solve_pool_sizes"], "ValueError: SWA pool (3072 tokens) cannot hold even one request: the prefill admission floor is sliding_window_size (4096) + page_size (64). Increase --swa-full-tokens-ratio or --mem-fraction-static.")),
    ("kv-pool-too-small", tb(SCHED + ["sglang/srt/model_executor/pool_configurator.py:calculate_pool_sizes"], "RuntimeError: SWA pool cap (262144 tokens, 30.00 GiB) leaves no room for the full KV pool within the available 28.50 GiB. Reduce --max-running-requests, lower SGLANG_SWA_POOL_CAP")),
    ("kv-pool-too-small", tb(SCHED + ["sglang/srt/mem_cache/hiradix_cache.py:__init__", "sglang/srt/mem_cache/pool_host/mha.py:__init__"], "ValueError: Not enough host memory for MiniMax index-K hierarchical cache. Requesting 412 GB but only have 180 GB free.")),
    # hsa-queue-aborted-on-kernel-fault
    ("illegal-memory-access", rocm("HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION", "The agent attempted to execute an illegal shader instruction.", "0x102a")),
    ("illegal-memory-access", rocm("HSA_STATUS_ERROR_MEMORY_FAULT", "Agent attempted to access an inaccessible address.", "0x2b")),
    # ascend-core-memory-fault: CANN's errorStr under torch_npu's synchronisation error
    ("illegal-memory-access", tb(FWD + ["sglang/srt/hardware_backend/npu/attention/ascend_backend.py:forward_decode", "torch_npu/npu/utils.py:synchronize"], "RuntimeError: ACL stream synchronize failed, error code:507015\n[ERROR] 2026-07-11-14:00:00 (PID:2817, Device:3, RankID:-1) ERR00100 PTA call acl api failed\nEZ9999: Inner Error!\nEZ9999: [PID: 2817] 2026-07-11-14:00:00.412.873 The DDR address of the MTE instruction is out of range.[FUNC:PrintCoreErrorInfo][FILE:device_error_core_proc.cc][LINE:281]")),
    ("illegal-memory-access", announced("RuntimeError: NPU function error: call aclnnIndexSelect failed, error code is 507015\nEZ9999: fftsplus aicore error, error code = 0x800000")),
    ("illegal-memory-access", "EZ9999: [PID: 2817] 2026-07-11-14:00:00.412.873 fftsplus aicore error, error code = 0x800000[FUNC:ProcessStarsCoreErrorInfo][FILE:device_error_core_proc.cc][LINE:303]"),
    # kernel-module-cannot-be-loaded
    ("kernel-compile-error", tb(MOE, "RuntimeError: CUDA error: shared object initialization failed" + TORCH_HINT)),
    ("kernel-compile-error", announced("RuntimeError: HIP error: hipErrorSharedObjectInitFailed")),
    ("kernel-compile-error", "cuda.bindings.driver.CUresult.CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"),
    # kernel-launch-exceeds-gpu-resources
    ("kernel-compile-error", tb(MOE, "RuntimeError: CUDA error: too many resources requested for launch" + TORCH_HINT)),
    ("kernel-compile-error", tb(FWD + ["sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch", "deep_ep/buffer.py:dispatch"], "RuntimeError: Failed: CUDA error /sgl-workspace/DeepEP/csrc/kernels/intranode.cu:503 'too many blocks in cooperative launch'")),
    ("kernel-compile-error", announced("RuntimeError: Triton Error [CUDA]: too many resources requested for launch")),
    # kernel-compiler-pipeline-failed: MLIR's pass manager under Triton, the CuTe DSL's code generation
    ("kernel-compile-error", "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/attention/triton_ops/decode_attention.py:41:0: error: Failures have been detected while processing an MLIR pass pipeline\n/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/attention/triton_ops/decode_attention.py:41:0: note: Pipeline failed while executing [`ConvertTritonGPUToLLVM` on 'builtin.module' operation]: reproducer generated at `std::errs, please share the reproducer above with Triton project.`"),
    ("kernel-compile-error", tb(TRITON + ["triton/compiler/compiler.py:compile"], "RuntimeError: PassManager::run failed\nnote: Pipeline failed while executing [`TritonGPUAccelerateMatmul` on 'builtin.module' operation]")),
    ("kernel-compile-error", announced("RuntimeError: Error during runtime code generation for function `__call__`")),
    # cute-dsl-rejected-kernel
    ("kernel-compile-error", tb(CUTE, "cutlass.base_dsl.common.DSLRuntimeError: 💥💥💥 Error during runtime code generation for function `kernel` 💥💥💥")),
    ("kernel-compile-error", tb(CUTE, "cutlass.base_dsl.common.DSLRuntimeError: 2880 to integer conversion is not supported")),
    ("kernel-compile-error", announced("DSLRuntimeError: Unsupported layout for tcgen05 mma")),
    # platform-kernels-unavailable
    ("kernel-compile-error", tb(FWD + ["sglang/srt/layers/quantization/gptq.py:apply", "sglang/srt/hardware_backend/gpu/quantization/gptq_kernels.py:_unsupported_kernel"], "RuntimeError: GPTQ CUDA kernels are unavailable on the current platform.")),
    ("kernel-compile-error", announced("RuntimeError: AWQ GPU kernels are unavailable on the current platform.")),
    ("kernel-compile-error", tb(SCHED + ["sglang/srt/layers/attention/linear/kernels/gdn_flashinfer.py:__init__"], "RuntimeError: FlashInfer GDN prefill kernel is unavailable.")),
    # package-required-install-it: SGLang's multimodal processors, transformers' chat-template helper
    ("missing-dependency", tb(SCHED + ["sglang/srt/managers/tokenizer_manager.py:_tokenize_one_request", "sglang/srt/multimodal/processors/mimo_audio.py:_ensure_audio_dependencies"], "RuntimeError: torchaudio is required for audio inputs; install torchaudio")),
    ("missing-dependency", tb(SCHED + ["sglang/srt/layers/moe/moe_runner/flashinfer_cutlass.py:_flashinfer_cutlass_fused_moe"], "RuntimeError: flashinfer_cutlass MoE runner backend requires flashinfer to be installed.")),
    ("missing-dependency", "ImportError: apply_chat_template requires jinja2 to be installed. Please install it using `pip install jinja2`."),
    # pd-transfer-engine-failed: SGLang's transfer-engine raise sites, Mooncake's glog lines
    ("nccl-error", tb(PD, "RuntimeError: Mooncake Transfer Engine initialization failed.")),
    ("nccl-error", tb(NIXL, "Exception: KVSender failed to post prepped transfer")),
    ("nccl-error", tb(SCHED + ["sglang/srt/disaggregation/mooncake/conn.py:transfer_worker"], "RuntimeError: Transfer thread failed because of [Errno 104] Connection reset. Prefill instance with bootstrap_port=8998 is dead.")),
    ("nccl-error", announced("RuntimeError: [Staging] Bulk RDMA transfer failed with ret=-1. src_ptr=0x7f2a00000000, dst_ptr=0x7e1b00000000, size=1048576. The decode staging buffer may not be properly registered.")),
    ("nccl-error", "E0711 14:00:00.412873  2817 rdma_context.cpp:214] Failed to register memory 0x7f2a00000000: Input/output error [5]"),
    ("nccl-error", "E0711 14:00:00.412873  2817 transfer_engine.cpp:118] Failed to install transport rdma"),
    # pd-kv-transfer-timed-out: every backend's receiver (mooncake/nixl/mori conn.py), as decode.py logs it
    ("nccl-error", "sglang-decode-1  | [2026-07-11 14:05:00 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='1f2e' decode_req.req.bootstrap_room=77 with exception KVTransferError(bootstrap_room=77): Request 77 timed out after 300.0s in KVPoll.WaitingForInput"),
    ("nccl-error", "The decode node logs this, then nothing:\nKVTransferError(bootstrap_room=5150): Request 5150 timed out after 45.0s in KVPoll.WaitingForInput"),
    # pd-request-transfer-failed: prefill.py / decode.py conclude a request whose transfer failed
    ("nccl-error", "sglang-prefill-1  | [2026-07-11 14:06:00 TP0] Prefill transfer failed for request rank=0 req.rid='aa01' req.bootstrap_room=901 with exception KVTransferError(bootstrap_room=901): Aborted by AbortReq."),
    ("nccl-error", "Decode transfer failed for request rank=2 decode_req.req.rid='bb02' decode_req.req.bootstrap_room=902 with exception NIXL KVReceiver Exception"),
    # nodes-never-exchanged-their-ports
    ("nccl-error", traceback_text(DP, "RuntimeError: Failed to receive worker ports from node 0 within timeout")),
    ("nccl-error", tb(SCHED + ["sglang/srt/distributed/device_communicators/vmm_utils.py:exchange_posix_fds"], "RuntimeError: timed out waiting for POSIX fd exchange")),
    # no-accelerator-in-sglang-words
    ("no-gpu", traceback_text(DEVICE + ["sglang/srt/utils/common.py:get_amdgpu_memory_capacity"], "RuntimeError: rocm-smi not found. Ensure AMD ROCm drivers are installed and accessible.")),
    ("no-gpu", traceback_text(DEVICE + ["sglang/srt/utils/common.py:get_nvgpu_memory_capacity", "sglang/srt/utils/common.py:_cuda_mem_fallback"], "RuntimeError: nvidia-smi not found. No CUDA devices found via torch.cuda.")),
    ("no-gpu", announced("RuntimeError: No supported accelerator (CUDA/XPU) available")),
    ("no-gpu", "RuntimeError: Platform plugin 'sglang_ascend' is installed but activate() returned None (hardware not available on this machine?)."),
    # import-error-naming-a-package-while-loading
    ("missing-dependency", tb(LOAD, "ImportError: ModelExpress support requires the 'modelexpress' package. Install it in the SGLang image.")),
    ("missing-dependency", tb(LOAD + ["sglang/srt/model_loader/loader.py:_export_modelopt_checkpoint"], "ImportError: ModelOpt export functionality is not available. Please ensure you have the latest version of modelopt installed.")),
]

NEAR_MISSES = [
    # a real device-side assert is still a bad memory access, with torch's hint after it
    ("illegal-memory-access", tb(FWD, "RuntimeError: CUDA error: device-side assert triggered" + TORCH_HINT)),
    ("illegal-memory-access", tb(TRITON, "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered")),
    # Triton's other runtime errors stay where the older rules put them
    ("kernel-compile-error", tb(TRITON, "RuntimeError: Triton Error [CUDA]: invalid argument")),
    # an NCCL failure whose CUDA error is not memory stays a communication failure
    ("nccl-error", tb(NCCL, "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 1 'invalid argument'")),
    # ROCm's aperture violation keeps its older rule (same category)
    ("illegal-memory-access", rocm("HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION", "The agent attempted to access memory beyond the largest legal address.", "0x29")),
    # a kernel library that is not installed at all is a missing package, not an unloadable module
    ("missing-dependency", "ModuleNotFoundError: No module named 'sgl_kernel'"),
    # an MLIR pass pipeline that ran out of shared memory is still a kernel build failure, an OOM is memory
    ("cuda-oom", tb(CUTE, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.")),
    # a checkpoint file that is not there while loading stays a load error
    ("model-load-error", tb(LOAD + ["sglang/srt/model_loader/weight_utils.py:download_weights_from_hf"], "RuntimeError: Cannot find any model weights with `/models/qwen3-8b`")),
    # a missing module by name keeps the older rule (same category)
    ("missing-dependency", tb(LOAD, "ModuleNotFoundError: No module named 'modelexpress'")),
    # the same size checks outside any graph code are not a graph's shape (an SGLang code path's bug)
    ("other", tb(FWD + ["sglang/srt/layers/sampler.py:forward"], "IndexError: index 151936 is out of bounds for dimension 0 with size 151936")),
    ("other", tb(FWD + ["sglang/srt/layers/attention/torch_native_backend.py:forward_extend"], "RuntimeError: start (0) + length (40) exceeds dimension size (16).")),
    # an NPU synchronisation error with no fault string of its own is not placed by the new rule
    ("other", tb(FWD + ["torch_npu/npu/utils.py:synchronize"], "RuntimeError: ACL stream synchronize failed, error code:507035")),
    # the main KV pool's own refusal keeps its older rule (same category)
    ("kv-pool-too-small", tb(SCHED + ["sglang/srt/model_executor/model_runner.py:init_memory_pool"], "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")),
    # a pool refusal that is an option, not a size, stays unsupported-config
    ("unsupported-config", tb(SCHED + ["sglang/srt/mem_cache/allocator/swa.py:alloc_extend"], "NotImplementedError: PureSWATokenToKVPoolAllocator does not support page_size > 1.")),
    # no GPU in torch's words keeps the older rule
    ("no-gpu", "RuntimeError: No CUDA GPUs are available"),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
