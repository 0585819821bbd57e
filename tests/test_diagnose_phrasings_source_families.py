# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families.toml adds, in the words of the software that
prints them, not of a corpus report. Where each phrasing comes from:

- Triton: triton/compiler/errors.py (`CompilationError` and its subclasses `CompileTimeAssertionFailure`,
  `UnsupportedLanguageConstruct`, all formatted `at LINE:COL:` + source excerpt + error);
- the JIT builders: flashinfer/jit/cpp_ext.py (`Ninja build failed.`), ninja's own summary
  (`FAILED: <target>`, `ninja: build stopped: subcommand failed.`), gcc/nvcc's `error: #error`;
- the CUDA runtime/driver error strings (cudaGetErrorString / cuGetErrorString): `device kernel image
  is invalid`, `a PTX JIT compilation failed`, `PTX JIT compiler library not found`, CUDA_ERROR_* names;
- cuda-gdb (`CUDA Exception: Warp Illegal Address` …) and compute-sanitizer memcheck (`Invalid
  __global__ read of size 4 bytes`);
- torch: distributed_c10d.py's `_store_based_barrier`, tensor_numpy.cpp's `Numpy is not available`,
  caffe2's inline_container.cc (`PytorchStreamReader failed reading zip archive`), the dynamic
  linker's `undefined symbol` for libtorch_cuda.so against an older NCCL/cuDNN wheel;
- transformers: tokenization_utils_fast.py (`You need to have sentencepiece installed …`),
  configuration_utils.py (`It looks like the config file at … is not a valid JSON file.`);
- huggingface_hub's file_download.py (`Consistency check failed: file should be of size …`);
- safetensors' SafetensorError (`File does not contain tensor …`, header errors).

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file: the new rules only reach what they
are for. None of the phrasings is a corpus report's text (checked against the development part;
the held-out part is never read)."""


from phrasing_helpers import (new_rule_file_tests,
                              traceback_text, with_and_without)

NEW_FILE = "source-families.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)


def tb(frames, last):
    """A traceback as SGLang's scheduler prints it, under its `Scheduler hit an exception` banner."""
    return traceback_text(frames, last, line=318, body="    step()",
                          banner="[2026-06-03 09:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):")


def announced(message):
    """The one-line form: the scheduler's banner with the error inline, then the launcher's SIGQUIT."""
    return (f"[2026-06-03 09:00:00 TP1] Scheduler hit an exception: {message}\n"
            "[2026-06-03 09:00:01] Received sigquit from a child process. It usually means the child failed.")


SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__"]
FWD = ["sglang/srt/managers/scheduler.py:event_loop_normal", "sglang/srt/managers/scheduler.py:run_batch",
       "sglang/srt/managers/tp_worker.py:forward_batch_generation", "sglang/srt/model_executor/model_runner.py:forward"]
TRITON = FWD + ["sglang/srt/layers/attention/triton_ops/extend_attention.py:extend_attention_fwd",
                "triton/runtime/jit.py:run", "triton/compiler/compiler.py:compile", "triton/compiler/compiler.py:make_ir"]
JIT = SCHED + ["sglang/srt/model_executor/model_runner.py:__init__", "sglang/srt/layers/attention/flashinfer_backend.py:__init__",
               "flashinfer/jit/core.py:build_and_load", "flashinfer/jit/cpp_ext.py:run_ninja"]
INIT = SCHED + ["sglang/srt/model_executor/model_runner.py:init_torch_distributed",
                "sglang/srt/distributed/parallel_state.py:init_distributed_environment",
                "torch/distributed/distributed_c10d.py:init_process_group", "torch/distributed/distributed_c10d.py:_store_based_barrier"]
LOAD = SCHED + ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/model_loader/loader.py:load_model",
                "sglang/srt/model_loader/loader.py:load_weights_and_postprocess"]
TOKENIZER = ["sglang/srt/managers/tokenizer_manager.py:__init__", "sglang/srt/utils/hf_transformers_utils.py:get_tokenizer",
             "transformers/models/auto/tokenization_auto.py:from_pretrained", "transformers/tokenization_utils_base.py:_from_pretrained",
             "transformers/tokenization_utils_fast.py:__init__"]
IMPORT = ["sglang/launch_server.py:<module>", "sglang/srt/entrypoints/http_server.py:<module>", "torch/__init__.py:<module>"]

PHRASINGS = [
    # triton-frontend-rejected-kernel: the subclasses, raised in Triton's compiler or pasted alone
    ("kernel-compile-error", tb(TRITON, "triton.compiler.errors.CompileTimeAssertionFailure: at 21:4:\n    tl.static_assert(BLOCK_DMODEL % 16 == 0)\n    ^\nBLOCK_DMODEL must be a multiple of 16")),
    ("kernel-compile-error", "triton.compiler.errors.CompileTimeAssertionFailure: at 9:4:\n    tl.static_assert(num_warps <= 8)\n    ^"),
    ("kernel-compile-error", tb(TRITON, "triton.compiler.errors.UnsupportedLanguageConstruct: at 14:15:\n        acc = [tl.zeros((BLOCK,), tl.float32) for _ in range(4)]\n               ^\nunsupported AST node type: ListComp")),
    ("kernel-compile-error", announced("triton.compiler.errors.CompilationError: at 33:12: <source unavailable>")),
    # jit-build-tool-failed: ninja's own summary, FlashInfer's wrapper pasted without its stack
    ("kernel-compile-error", "RuntimeError: Ninja build failed. Ninja output:\n[1/3] c++ -c norm.cpp\nFAILED: norm.cuda.o\n/usr/local/cuda/bin/nvcc -c norm.cu -o norm.cuda.o\n/usr/local/include/flashinfer/vec_dtypes.cuh(40): error: identifier \"__hmax2\" is undefined"),
    ("kernel-compile-error", "FAILED: /root/.cache/tvm-ffi/sgl_kernel_jit/fused_rope.so\nninja: build stopped: subcommand failed."),
    ("kernel-compile-error", tb(JIT, "RuntimeError: Ninja build failed. Ninja output: ninja: build stopped: subcommand failed.")),
    # cuda-kernel-image-unusable: the runtime's and the driver's strings, through torch and Triton
    ("kernel-compile-error", "RuntimeError: CUDA error: device kernel image is invalid\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."),
    ("kernel-compile-error", tb(FWD + ["sgl_kernel/elementwise.py:rmsnorm", "torch/_ops.py:__call__"], "torch.AcceleratorError: CUDA error: a PTX JIT compilation failed\nSearch for `cudaErrorInvalidPtx' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.")),
    ("kernel-compile-error", announced("RuntimeError: Triton Error [CUDA]: PTX JIT compiler library not found")),
    ("kernel-compile-error", "cuda.bindings.driver.CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU"),
    # compiler-preprocessor-error
    ("kernel-compile-error", "/root/.cache/tvm-ffi/build/fused_rope.cpp:3:2: error: #error \"CUDA 12.4 or newer is required for fp8 conversions\""),
    ("kernel-compile-error", "csrc/quant.cu:5:2: error: #error \"Blackwell kernels need CUDA 12.8\""),
    # debugger-reported-memory-fault: cuda-gdb and compute-sanitizer
    ("illegal-memory-access", "CUDA Exception: Warp Illegal Address\nThe exception was triggered at PC 0x7fff2a3b1c40 (fused_moe_kernel+0x1a40)"),
    ("illegal-memory-access", "Thread 1 \"python3\" received signal CUDA_EXCEPTION_6, Warp Misaligned Address."),
    ("illegal-memory-access", "========= Invalid __global__ write of size 16 bytes\n=========     at 0x1b0 in void flashinfer::BatchPrefillWithPagedKVCacheKernel\n=========     by thread (0,0,0) in block (7,0,0)"),
    ("illegal-memory-access", "========= Invalid __shared__ read of size 4 bytes"),
    # store-based-barrier-timeout
    ("nccl-error", tb(INIT, "RuntimeError: Timed out initializing process group in store based barrier on rank 3, for key: store_based_barrier_key:1 (world_size=16, num_workers_joined=8, timeout=0:30:00)")),
    ("nccl-error", announced("RuntimeError: Timed out initializing process group in store based barrier on rank 0, for key: store_based_barrier_key:2 (world_size=2, num_workers_joined=1, timeout=0:10:00)")),
    # optional-package-absent-in-its-users-words
    ("missing-dependency", tb(FWD + ["sglang/srt/managers/scheduler_output_processor_mixin.py:process_batch_result", "torch/_tensor.py:numpy"], "RuntimeError: Numpy is not available")),
    ("missing-dependency", tb(TOKENIZER, "ValueError: Couldn't instantiate the backend tokenizer from one of: \n(1) a `tokenizers` library serialization file, \n(2) a slow tokenizer instance to convert or \n(3) an equivalent slow tokenizer class to instantiate and convert. \nYou need to have sentencepiece installed to convert a slow tokenizer to a fast one.")),
    ("missing-dependency", "ValueError: You need to have sentencepiece or tiktoken installed to convert a slow tokenizer to a fast one."),
    # torch-wants-newer-cuda-library
    ("missing-dependency", traceback_text(IMPORT, "ImportError: /usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommWindowRegister")),
    ("missing-dependency", "OSError: /opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: cudnnGetLibConfig, version libcudnn_graph.so.9"),
    # checkpoint-file-unreadable
    ("model-load-error", tb(LOAD + ["sglang/srt/model_loader/weight_utils.py:pt_weights_iterator", "torch/serialization.py:load", "torch/serialization.py:__init__"], "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory")),
    ("model-load-error", "OSError: Consistency check failed: file should be of size 3963750880 but has size 2147483648 (model-00002-of-00004.safetensors).\nThis is usually due to network issues while downloading the file. Please retry with `force_download=True`."),
    ("model-load-error", "OSError: It looks like the config file at '/models/Qwen3-8B/config.json' is not a valid JSON file."),
    # safetensors-error-any-wording
    ("model-load-error", tb(LOAD + ["sglang/srt/models/llama.py:load_weights", "sglang/srt/model_loader/weight_utils.py:safetensors_weights_iterator"], "safetensors_rust.SafetensorError: File does not contain tensor model.layers.31.mlp.down_proj.weight_scale")),
    ("model-load-error", tb(LOAD + ["sglang/srt/model_loader/weight_utils.py:safetensors_weights_iterator"], "safetensors_rust.SafetensorError: Error while deserializing header: invalid dtype F4")),
    ("model-load-error", announced("safetensors_rust.SafetensorError: device cuda:9 is invalid")),
    # hip-kernel-fault-names: HIP's error names through torch, CUDA's assert names
    ("illegal-memory-access", tb(FWD + ["sglang/srt/layers/moe/fused_moe_triton/fused_moe.py:fused_experts"], "RuntimeError: HIP error: hipErrorLaunchFailure\nHIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3")),
    ("illegal-memory-access", announced("RuntimeError: HIP error: hipErrorAssert")),
    ("illegal-memory-access", "CUresult.CUDA_ERROR_ASSERT while synchronizing the stream"),
    # gpu-library-kernel-execution-failed: cuBLAS and cuDNN, eager (not in capture)
    ("illegal-memory-access", tb(FWD + ["sglang/srt/layers/linear.py:forward", "torch/nn/functional.py:linear"], "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasLtMatmul( ltHandle, computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor(), mat2_ptr, Bdesc.descriptor(), &beta_val, result_ptr, Cdesc.descriptor(), result_ptr, Cdesc.descriptor(), &heuristicResult.algo, workspace.mutable_data_ptr(), workspaceSize, at::cuda::getCurrentCUDAStream())`")),
    ("illegal-memory-access", "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"),
    # weight-shape-does-not-fit-parameter: SGLang's loaders and torch's load_state_dict, pasted without the loader's frames
    ("model-load-error", "AssertionError: Attempted to load weight (torch.Size([2048, 7168])) into parameter (torch.Size([1024, 7168]))"),
    # check-names-a-launch-flag: a refusal naming the flag to change, raised in a backend or pasted alone
    ("unsupported-config", tb(SCHED + ["sglang/srt/speculative/eagle_worker.py:__init__"], "AssertionError: Please provide --speculative-draft-model-path for EAGLE3")),
    ("unsupported-config", announced("ValueError: --tp-size (3) must divide the number of KV heads (8)")),
    ("unsupported-config", "NotImplementedError: Overlap scheduling with pipeline parallelism needs --disable-overlap-schedule"),
    ("model-load-error", announced("AssertionError:  Attempted to load weight (torch.Size([151936, 4096])) into parameter (torch.Size([152064, 4096]))")),
]

NEAR_MISSES = [
    # a Triton kernel out of GPU memory at launch is memory, not a compile failure
    ("cuda-oom", tb(TRITON, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 512.00 MiB is free.")),
    # the runtime's other launch errors stay where they belong: a bad memory access, a missing GPU
    ("illegal-memory-access", "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call"),
    ("no-gpu", "RuntimeError: CUDA error: no CUDA-capable device is detected"),
    # a kernel extension built for another torch names a c10 symbol in its own .so: a kernel mismatch
    ("kernel-compile-error", "ImportError: /usr/local/lib/python3.12/dist-packages/sgl_kernel/sm100/common_ops.abi3.so: undefined symbol: _ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"),
    # a shared library that is not there at all stays a missing library
    ("missing-dependency", "ImportError: libnccl.so.2: cannot open shared object file: No such file or directory"),
    # the c10d store's own client timeout and a collective timeout stay communication failures
    ("nccl-error", "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined."),
    # a config.json that names an unknown architecture is not a damaged file, but still the model's
    ("model-load-error", "ValueError: The checkpoint you are trying to load has model type `glm5` but Transformers does not recognize this architecture. This could be because of an issue with the checkpoint, or because your version of Transformers is out of date."),
    # an OOM while safetensors copies a tensor to the GPU is memory
    ("cuda-oom", tb(LOAD + ["sglang/srt/model_loader/weight_utils.py:safetensors_weights_iterator", "safetensors/torch.py:load_file"], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 301.12 MiB is free.")),
    # cuBLAS refusing its call inside a CUDA-graph capture stays the capture's failure
    ("cuda-graph-capture-failed", tb(SCHED + ["sglang/srt/model_executor/model_runner.py:init_device_graphs", "sglang/srt/model_executor/cuda_graph_runner.py:__init__", "sglang/srt/model_executor/cuda_graph_runner.py:capture", "sglang/srt/model_executor/cuda_graph_runner.py:capture_one_batch_size", "torch/nn/functional.py:linear"], "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`")),
    # torch's own load_state_dict wording keeps the older rule (same category)
    ("model-load-error", "RuntimeError: Error(s) in loading state_dict for EagleDraftHead:\n\tsize mismatch for fc.weight: copying a param with shape torch.Size([4096, 12288]) from checkpoint, the shape in current model is torch.Size([4096, 8192])."),
    # another failure's advice naming a flag stays that failure's
    ("kv-pool-too-small", "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.6. Raise --mem-fraction-static above 0.712."),
    ("missing-dependency", "ValueError: --enable-http2 requires the 'granian' package. Install it with: pip install \"sglang[http2]\""),
    ("port-in-use", "ValueError: --port 30000 is taken: [Errno 98] Address already in use"),
    # HIP out of memory is memory, whatever HIP calls it
    ("cuda-oom", "RuntimeError: HIP error: hipErrorOutOfMemory"),
    # a plain Python error mentioning a ninja-built module is not a build failure
    ("other", tb(FWD + ["sglang/srt/layers/attention/flashinfer_backend.py:forward_decode"], "TypeError: forward_decode() missing 1 required positional argument: 'save_kv_cache'")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
