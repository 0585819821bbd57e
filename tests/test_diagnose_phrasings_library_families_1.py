# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/library-families-1.toml adds, in the words of the libraries under
an SGLang server, not of a corpus report. Where each phrasing comes from:

- the CUDA runtime's cudaGetErrorString table (cudaErrorStubLibrary `CUDA driver is a stub library`,
  cudaErrorCallRequiresNewerDriver, cudaErrorStartupFailure, cudaErrorDeviceNotLicensed,
  cudaErrorDeviceAlreadyInUse, the cudaErrorMps* strings, cudaErrorInitializationError
  `initialization error`; HIP's hipGetErrorString for hipErrorInsufficientDriver `driver version is
  insufficient for runtime version`) as torch (`CUDA error: <string>`, c10/cuda/CUDAException.h), Triton's
  driver (`Triton Error [CUDA]: <string>`, third_party/nvidia/backend/driver.c) and NCCL's CUDACHECK
  (`Cuda failure '<string>'`, src/include/checks.h) print them;
- Triton's driver loading: triton/backends/nvidia/driver.py libcuda_dirs() (`libcuda.so cannot
  found!` and its two hints) and triton/runtime/driver.py _create_driver() (`{n} active drivers
  ({actives}). There should only be one.`, with n = 0);
- torch's CUDA caching allocator: reportProcessMemoryInfo() in c10/cuda/CUDACachingAllocator.cpp,
  called only while the allocator builds its out-of-memory message, asserts on NVML
  (`NVML_SUCCESS == r`, `NVML_SUCCESS == DriverAPI::get()->nvmlDeviceGetHandleByPciBusId_v2_( pci_id,
  &nvml_device)`) through TORCH_INTERNAL_ASSERT's `… INTERNAL ASSERT FAILED at "<file>":<line>, please
  report a bug to PyTorch.`;
- the CUDA runtime's stream-capture strings (cudaErrorStreamCaptureMerge `operation would result in
  a merge of separate capture sequences`, …Unmatched, …Isolation, …Implicit, …WrongThread)
  and the driver API's CUDA_ERROR_STREAM_CAPTURE_* names; the invalidated capture's and the
  capture-unsupported strings only as Triton's driver reports them;
- huggingface_hub: file_download.py's _raise_on_head_call_error (`An error happened while trying to
  locate the file on the Hub and we cannot find the requested files in the local cache. …`, `Cannot
  find the requested files in the disk cache and outgoing traffic has been disabled. …`),
  _snapshot_download.py (`Cannot find an appropriate cached snapshot folder for the specified
  revision on the local disk and outgoing traffic has been disabled. …`), utils/_http.py's
  OfflineAdapter (`Cannot reach {url}: offline mode is enabled. To disable it, please unset the
  `HF_HUB_OFFLINE` environment variable.`), and the error classes of errors.py;
- FlashInfer's flashinfer::Error (include/flashinfer/exception.h: `Error in function '<f>' at
  <file>:<line>: <message>`) with the messages of csrc/trtllm_fmha_kernel_launcher.cu (`Missing
  TRTLLM-GEN kernel (decode): <kernel info>`), csrc/trtllm_batched_gemm_runner.cu (`No kernel found
  for the given options: mDtypeA: …`) and include/flashinfer/attention/scheduler.cuh
  (`PrefillPlanInfo::FromVector: vec.size() should be 15, but got …`);
- torch's cuDNN checks (torch/backends/cudnn/__init__.py _init: `cuDNN version incompatibility:
  PyTorch was compiled  against … but found runtime version …`, with its two spaces, and `cuDNN
  version N is not compatible with devices with SM < 7.5. …`) and cuDNN's status enum
  (CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED, …_SUBLIBRARY_VERSION_MISMATCH, …_VERSION_MISMATCH,
  …_NOT_SUPPORTED_ARCH_MISMATCH) as torch's `cuDNN error: <status>` prints it;
- Mooncake's transfer engine, through glog (`E<mmdd> <time> <tid> <file>:<line>] <message>`):
  src/transfer_engine_impl.cpp (`Transfer engine cannot be initialized: cannot allocate local
  segment`, `Failed to install RDMA transport`) and the transports' install()
  (`EfaTransport: cannot initialize EFA resources`, `RdmaTransport: cannot initialize RDMA
  resources`); its RPC layer's `RDMA initialization failed: …`, followed by a TCP fallback, is a
  near miss.

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file. None of the phrasings is a corpus
report's text (checked against the development part; the held-out part is never read)."""

from phrasing_helpers import (new_rule_file_tests,
                              traceback_text, with_and_without)

NEW_FILE = "library-families-1.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

INIT = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__",
        "sglang/srt/managers/tp_worker.py:__init__", "sglang/srt/model_executor/model_runner.py:__init__"]
DIST = INIT + ["sglang/srt/model_executor/model_runner.py:init_torch_distributed",
               "sglang/srt/distributed/parallel_state.py:init_distributed_environment",
               "sglang/srt/distributed/parallel_state.py:initialize_model_parallel",
               "sglang/srt/distributed/parallel_state.py:init_model_parallel_group",
               "torch/distributed/distributed_c10d.py:barrier"]
SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:event_loop_normal",
         "sglang/srt/managers/scheduler.py:run_batch", "sglang/srt/managers/tp_worker.py:forward_batch_generation",
         "sglang/srt/model_executor/model_runner.py:forward"]
TRITON_RUN = SCHED + ["sglang/srt/layers/attention/triton_ops/decode_attention.py:decode_attention_fwd",
                      "triton/runtime/jit.py:run", "triton/backends/nvidia/driver.py:__call__"]
TRITON_LOAD = INIT + ["sglang/srt/layers/quantization/fp8_kernel.py:<module>", "triton/runtime/jit.py:run",
                      "triton/runtime/driver.py:active", "triton/runtime/driver.py:_create_driver"]
CAPTURE = INIT + ["sglang/srt/model_executor/model_runner.py:init_device_graphs",
                  "sglang/srt/model_executor/cuda_graph_runner.py:__init__", "sglang/srt/model_executor/cuda_graph_runner.py:capture",
                  "sglang/srt/model_executor/cuda_graph_runner.py:capture_one_batch_size"]
LOAD = INIT + ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/model_loader/loader.py:load_model",
               "sglang/srt/model_loader/weight_utils.py:download_weights_from_hf"]
HUB = LOAD + ["huggingface_hub/utils/_validators.py:_inner_fn", "huggingface_hub/_snapshot_download.py:snapshot_download"]
# SGLang's start-up reaching the hub directly (an optional file such as a quantization config)
DIRECT = INIT + ["huggingface_hub/utils/_validators.py:_inner_fn", "huggingface_hub/file_download.py:hf_hub_download",
                 "huggingface_hub/file_download.py:_hf_hub_download_to_cache_dir", "huggingface_hub/file_download.py:_raise_on_head_call_error"]
FI_ATTN = SCHED + ["sglang/srt/layers/attention/trtllm_mla_backend.py:forward_decode", "flashinfer/decode.py:trtllm_batch_decode_with_kv_cache_mla",
                   "tvm_ffi/cython/function.pxi:core.Function.__call__"]
FI_MOE = SCHED + ["sglang/srt/layers/moe/fused_moe_triton/layer.py:forward", "flashinfer/fused_moe/core.py:trtllm_fp4_block_scale_moe",
                  "tvm_ffi/cython/function.pxi:core.Function.__call__"]
FI_PREFILL = SCHED + ["sglang/srt/layers/attention/flashinfer_backend.py:forward_extend", "flashinfer/prefill.py:run",
                      "tvm_ffi/cython/function.pxi:core.Function.__call__"]
VISION = SCHED + ["sglang/srt/models/qwen2_5_vl.py:forward", "sglang/srt/models/qwen2_5_vl.py:get_image_feature",
                  "torch/nn/modules/conv.py:forward", "torch/nn/modules/conv.py:_conv_forward"]
CONFIG = INIT + ["sglang/srt/configs/model_config.py:__init__", "sglang/srt/utils/hf_transformers_utils.py:get_config",
                 "transformers/models/auto/configuration_auto.py:from_pretrained", "huggingface_hub/file_download.py:hf_hub_download"]
NCCL_CUDA = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
             "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\n"
             "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n")
TORCH_TAIL = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
              "For debugging consider passing CUDA_LAUNCH_BLOCKING=1")

PHRASINGS = [
    # cuda-runtime-finds-no-usable-driver-or-device
    ("no-gpu", traceback_text(INIT, "torch.AcceleratorError: CUDA error: CUDA driver is a stub library" + TORCH_TAIL)),
    ("no-gpu", traceback_text(TRITON_RUN, "RuntimeError: Triton Error [CUDA]: API call is not supported in the installed CUDA driver")),
    ("no-gpu", traceback_text(INIT, "RuntimeError: CUDA error: MPS client failed to connect to the MPS control daemon or the MPS server" + TORCH_TAIL)),
    ("no-gpu", traceback_text(TRITON_RUN, "RuntimeError: Triton Error [CUDA]: initialization error")),
    ("no-gpu", traceback_text(DIST, NCCL_CUDA + "Cuda failure 'initialization error'")),
    ("no-gpu", traceback_text(INIT, "RuntimeError: CUDA error: device doesn't have valid Grid license" + TORCH_TAIL)),
    ("no-gpu", traceback_text(INIT, "RuntimeError: HIP error: driver version is insufficient for runtime version\nHIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3")),
    # triton-finds-no-gpu-driver
    ("no-gpu", traceback_text(SCHED + ["triton/runtime/jit.py:run", "triton/backends/nvidia/driver.py:__init__", "triton/backends/nvidia/driver.py:library_dirs",
                                       "triton/backends/nvidia/driver.py:libcuda_dirs"],
                              'AssertionError: libcuda.so cannot found!\nPlease make sure GPU is set up and then run "/sbin/ldconfig" (requires sudo) to refresh the linker cache.')),
    ("no-gpu", traceback_text(SCHED + ["torch/_inductor/runtime/triton_heuristics.py:precompile", "triton/backends/nvidia/driver.py:libcuda_dirs"],
                              "AssertionError: libcuda.so cannot found!\nPossible files are located at ['/usr/lib64-nvidia/libcuda.so.1'].Please create a symlink of libcuda.so to any of the files.")),
    ("no-gpu", traceback_text(TRITON_LOAD, "RuntimeError: 0 active drivers ([]). There should only be one.")),
    # oom-report-failed-on-nvml
    ("cuda-oom", traceback_text(SCHED + ["torch/nn/modules/module.py:_call_impl"], 'RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":1016, please report a bug to PyTorch. ')),
    ("cuda-oom", traceback_text(LOAD, 'RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlDeviceGetHandleByPciBusId_v2_( pci_id, &nvml_device) INTERNAL ASSERT FAILED at "../c10/cuda/CUDACachingAllocator.cpp":963, please report a bug to PyTorch. ')),
    # cuda-stream-capture-rule-broken
    ("cuda-graph-capture-failed", traceback_text(CAPTURE + ["torch/cuda/graphs.py:__exit__"], "torch.AcceleratorError: CUDA error: operation would result in a merge of separate capture sequences" + TORCH_TAIL)),
    ("cuda-graph-capture-failed", traceback_text(SCHED, "RuntimeError: CUDA error: dependency created on uncaptured work in another stream" + TORCH_TAIL)),
    ("cuda-graph-capture-failed", traceback_text(CAPTURE + ["triton/runtime/jit.py:run", "triton/backends/nvidia/driver.py:__call__"], "RuntimeError: Triton Error [CUDA]: operation failed due to a previous error during capture")),
    ("cuda-graph-capture-failed", traceback_text(SCHED + ["triton/backends/nvidia/driver.py:__call__"], "RuntimeError: Triton Error [CUDA]: operation not permitted when stream is capturing")),
    ("cuda-graph-capture-failed", traceback_text(CAPTURE, "RuntimeError: cuGraphInstantiate failed with CUDA_ERROR_STREAM_CAPTURE_UNJOINED")),
    # model-download-library-found-no-file
    ("model-load-error", traceback_text(DIRECT, "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub and we cannot find the requested files in the local cache. Please check your connection and try again or make sure your Internet connection is on.")),
    ("model-load-error", traceback_text(HUB, "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and downloads online, pass 'local_files_only=False' as input.")),
    ("model-load-error", traceback_text(CONFIG + ["huggingface_hub/utils/_http.py:send"], "huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/org/model/resolve/main/hf_quant_config.json: offline mode is enabled. To disable it, please unset the `HF_HUB_OFFLINE` environment variable.")),
    ("model-load-error", traceback_text(DIRECT[:-1], "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and outgoing traffic has been disabled. To enable hf.co look-ups and downloads online, set 'local_files_only' to False.")),
    # model-download-library-error-type
    ("model-load-error", traceback_text(DIRECT[:-1] + ["huggingface_hub/file_download.py:_get_metadata_or_catch_error"], "huggingface_hub.errors.DisabledRepoError: Access to this resource is disabled.")),
    ("model-load-error", traceback_text(INIT + ["huggingface_hub/utils/_validators.py:_inner_fn", "huggingface_hub/utils/_validators.py:validate_repo_id"], "huggingface_hub.errors.HFValidationError: Repo id must use alphanumeric chars or '-', '_', '.', '--' and '..' are forbidden, '-' and '.' cannot start or end the name, max length is 96: '/models/my model'.")),
    ("model-load-error", traceback_text(CONFIG, "huggingface_hub.errors.EntryNotFoundError: 404 Client Error. (Request ID: Root=1-6650a1b2-0c1d2e3f4a5b6c7d8e9f0a1b)\n\nEntry Not Found for url: https://huggingface.co/org/model/resolve/main/preprocessor_config.json.")),
    # kernel-library-ships-no-kernel-for-these-options
    ("unsupported-config", traceback_text(FI_ATTN, "RuntimeError: Error in function 'trtllm_paged_attention_launcher' at /workspace/csrc/trtllm_fmha_kernel_launcher.cu:320: Missing TRTLLM-GEN kernel (decode): qkvLayout=2, maskType=0, kernelType=2, tileScheduler=0, multiCtasKvMode=1, headDimPerCtaV=512, headDimQk=576, headDimV=512, tileSizeKv=128, numTokensPerPage=64, maxNumHeadsQPerKvInCta=128, reuseSmemKForV=0, uses2CtaMma=0")),
    ("unsupported-config", traceback_text(FI_MOE, "RuntimeError: Error in function 'getValidConfigIndices' at /workspace/csrc/trtllm_batched_gemm_runner.cu:231: No kernel found for the given options: mDtypeA: E2m1, mDtypeB: E4m3, mDtypeC: Bfloat16, mUseDeepSeekFp8: 0, mActType: 0, mEltwiseActType: 0, mTransposeMmaOutput: 1, mRouteAct: 1, mFusedAct: 1, mIsStaticBatch: 0, mTileSize: 8")),
    # kernel-library-plan-layout-mismatch
    ("kernel-compile-error", traceback_text(FI_PREFILL, "RuntimeError: Error in function 'FromVector' at /usr/local/lib/python3.12/dist-packages/flashinfer/data/include/flashinfer/attention/scheduler.cuh:743: PrefillPlanInfo::FromVector: vec.size() should be 15, but got 14")),
    ("kernel-compile-error", traceback_text(FI_ATTN, "RuntimeError: Error in function 'FromVector' at /root/.cache/flashinfer/0.4.1/90/generated/batch_mla/scheduler.cuh:1090: MLAPlanInfo::FromVector: vec.size() should be 18, but got 16")),
    # cudnn-libraries-do-not-match
    ("missing-dependency", traceback_text(VISION + ["torch/backends/cudnn/__init__.py:_init"], "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 10, 2) but found runtime version (9, 1, 0). PyTorch already comes bundled with cuDNN. One option to resolving this error is to ensure PyTorch can find the bundled cuDNN. Looks like your LD_LIBRARY_PATH contains incompatible version of cudnn. Please either remove it from the path or install cudnn (9, 10, 2)")),
    ("missing-dependency", traceback_text(VISION, "RuntimeError: cuDNN error: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED")),
    ("missing-dependency", traceback_text(VISION, "RuntimeError: cuDNN error: CUDNN_STATUS_VERSION_MISMATCH")),
    # cudnn-build-refuses-this-gpu
    ("kernel-compile-error", traceback_text(VISION + ["torch/backends/cudnn/__init__.py:_init"], "RuntimeError: cuDNN version 91002 is not compatible with devices with SM < 7.5. Please install a version of PyTorch with a compatible cuDNN version. https://github.com/pytorch/pytorch/blob/main/RELEASE.md#release-compatibility-matrix")),
    ("kernel-compile-error", traceback_text(VISION, "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH")),
    # transfer-engine-could-not-set-up-a-transport
    ("nccl-error", "E1203 05:11:12.123456 48211 transfer_engine_impl.cpp:142] Transfer engine cannot be initialized: cannot allocate local segment"),
    ("nccl-error", "I1203 05:11:12.001200 48211 transfer_engine_impl.cpp:371] Installing RDMA transport\nE1203 05:11:12.123456 48211 transfer_engine_impl.cpp:384] Failed to install RDMA transport"),
    ("nccl-error", "E1203 05:11:12.123456 48211 efa_transport.cpp:208] EfaTransport: cannot initialize EFA resources"),
]

NEAR_MISSES = [
    # Mooncake's RPC layer falls back to TCP when RDMA does not start: no failure, no category
    ("unknown", "E1203 05:11:12.123456 48211 rpc_communicator.cpp:92] RDMA initialization failed: No RDMA devices found"),
    # a cuDNN kernel that faulted stays a kernel fault
    ("illegal-memory-access", traceback_text(VISION, "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED")),
    # cuDNN failing to allocate stays an out-of-memory
    ("cuda-oom", traceback_text(VISION, "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED")),
    # a trtllm-gen backend with no cubins for this GPU at all stays a kernel that does not run here
    ("kernel-compile-error", traceback_text(FI_MOE, "RuntimeError: Error in function 'TrtllmGenBatchedGemmRunner' at /workspace/csrc/trtllm_batched_gemm_runner.cu:219: The trtllm-gen batched GEMM cubin manifest contains no kernels runnable on sm120; this backend currently ships cubins for sm100, sm103 and sm107.")),
    # FlashInfer's workspace running out stays an out-of-memory
    ("cuda-oom", traceback_text(FI_PREFILL, "RuntimeError: Error in function 'aligned_alloc' at /usr/local/lib/python3.12/dist-packages/flashinfer/data/include/flashinfer/allocator.h:49: Buffer overflow when allocating memory for batch_prefill_tmp_v with size 1409286144 and alignment 16, but only 268435456 bytes available in AlignedAllocator. Increase the workspace buffer size.")),
    # a second active Triton backend is no missing driver
    ("kernel-compile-error", traceback_text(TRITON_LOAD, "RuntimeError: 2 active drivers ([<triton.backends.nvidia.driver.CudaDriver object at 0x7f2c>, <triton.backends.amd.driver.HIPDriver object at 0x7f2d>]). There should only be one.")),
    # NVML's own failure outside the allocator's report stays a driver problem
    ("no-gpu", traceback_text(INIT + ["torch/cuda/__init__.py:_lazy_init"], "RuntimeError: Failed to initialize NVML: Driver/library version mismatch")),
    # another internal assertion of the caching allocator is no out-of-memory
    ("other", traceback_text(SCHED, 'RuntimeError: isBlockKnown INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":2075, please report a bug to PyTorch.')),
    # Triton's CUDA error for memory during capture stays an out-of-memory
    ("cuda-oom", traceback_text(CAPTURE + ["triton/backends/nvidia/driver.py:__call__"], "RuntimeError: Triton Error [CUDA]: out of memory")),
    # Triton's CUDA error for a kernel image stays a kernel that does not load
    ("kernel-compile-error", traceback_text(TRITON_RUN, "RuntimeError: Triton Error [CUDA]: device kernel image is invalid")),
    # a CUDA error that names a memory fault stays a memory fault
    ("illegal-memory-access", traceback_text(SCHED, "torch.AcceleratorError: CUDA error: an illegal memory access was encountered" + TORCH_TAIL)),
    # huggingface_hub lacking a name SGLang imports is a package version, not the model's files
    ("missing-dependency", traceback_text(["sglang/launch_server.py:<module>", "sglang/srt/model_loader/weight_utils.py:<module>"], "ImportError: cannot import name 'split_torch_state_dict_into_shards' from 'huggingface_hub' (/usr/local/lib/python3.12/dist-packages/huggingface_hub/__init__.py)")),
    # the server's own warm-up request answered with an HTTP error stays the warm-up's failure
    ("other", traceback_text(["sglang/srt/entrypoints/http_server.py:_wait_and_warmup", "requests/models.py:raise_for_status"], "requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: http://127.0.0.1:30000/get_model_info")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
