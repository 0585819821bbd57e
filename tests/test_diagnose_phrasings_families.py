# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""Rule families, not wordings: each failure class in the phrasings its real sources print (SGLang's
own raise sites in server_args.py, arg_groups/, mem_cache/, model_loader/; torch's allocator and
CHECK texts; Triton, ptxas, nvcc, ninja, FlashInfer's JIT, sgl_kernel's op registry, HIP;
transformers, huggingface_hub and safetensors while a checkpoint loads; Python's import system),
each in a context a report would carry it in: a full scheduler traceback, the same error with its
frames trimmed, or an ERROR line. Written from those sources, never from the corpus's test part.

The ranking traps of issue 15 are here too: a frame of server_args.py or of the model loader on the
stack must not decide over a message that names another failure (memory, a missing module, a
port, a kernel build), and an argument check that names a transport is a refused option."""

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from phrasing_helpers import traceback_text

RULES = load_rules([shipped("rules")])
# What the launcher prints after a scheduler's one-line error (the line alone is not yet a crash).
SIGQUIT = "[2026-05-01 10:00:01] Received sigquit from a child process. It usually means the child failed."
BANNER = "[2026-05-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):"


def tb(frames, last, before=""):
    return traceback_text(frames, last, before, banner=BANNER, line=200, body="    call()")


def plain_tb(frames, last, before=""):
    return traceback_text(frames, last, before)


SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__"]
MR = SCHED + ["sglang/srt/managers/tp_worker.py:__init__", "sglang/srt/model_executor/model_runner.py:__init__"]
LOAD = MR + ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/model_loader/loader.py:load_model"]
FWD = ["sglang/srt/managers/scheduler.py:event_loop_overlap", "sglang/srt/managers/scheduler.py:run_batch",
       "sglang/srt/managers/tp_worker.py:forward_batch_generation", "sglang/srt/model_executor/model_runner.py:forward"]
ARGS = ["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:prepare_server_args",
        "sglang/srt/server_args.py:from_cli_args", "sglang/srt/server_args.py:__post_init__"]
HOOK = ARGS + ["sglang/srt/arg_groups/moe_hook.py:handle_a2a_moe"]
CAPTURE = MR + ["sglang/srt/model_executor/model_runner.py:init_device_graphs",
                "sglang/srt/model_executor/cuda_graph_runner.py:__init__", "sglang/srt/model_executor/cuda_graph_runner.py:capture"]
POOL = MR + ["sglang/srt/model_executor/model_runner.py:init_memory_pool", "sglang/srt/mem_cache/kv_cache_configurator.py:configure"]
HF = LOAD + ["sglang/srt/model_loader/loader.py:_prepare_weights", "sglang/srt/model_loader/weight_utils.py:download_weights_from_hf",
             "huggingface_hub/_snapshot_download.py:snapshot_download"]
CFG = SCHED + ["sglang/srt/configs/model_config.py:from_server_args", "sglang/srt/configs/model_config.py:__init__",
               "sglang/srt/utils/hf_transformers_utils.py:get_config", "transformers/models/auto/configuration_auto.py:from_pretrained"]
TRITON = FWD + ["sglang/srt/layers/attention/triton_ops/decode_attention.py:decode_attention_fwd",
                "triton/runtime/jit.py:run", "triton/compiler/compiler.py:compile"]
JIT = MR + ["sglang/srt/layers/attention/flashinfer_backend.py:__init__", "flashinfer/jit/core.py:build_and_load",
            "flashinfer/jit/cpp_ext.py:run_ninja"]

PHRASINGS = [
 # --- unsupported-config: SGLang's argument checks, whatever transport or backend they name ---
 ("unsupported-config", tb(HOOK, "ValueError: DeepEP v2 MoE currently supports only --moe-runner-backend deep_gemm. Got triton. Add a runner adapter before enabling DeepEP v2 with other MoE runners.")),
 ("unsupported-config", tb(HOOK, "ValueError: DeepEP v2 MoE has not implemented the TBO/SBO overlap hooks yet. Disable --enable-two-batch-overlap and --enable-single-batch-overlap when using --moe-a2a-backend deepep_v2.")),
 ("unsupported-config", tb(HOOK, "ValueError: --shared-experts-tp-size requires an expert-parallel all-to-all backend (deepep, megamoe, mooncake, ascend_fuseep or mori).")),
 ("unsupported-config", tb(ARGS + ["sglang/srt/server_args.py:_handle_disaggregation"], "ValueError: PD decode DCP requires --disaggregation-transfer-backend mooncake, nixl, mori, ascend, or fake for synthetic benchmarking, got nccl.")),
 ("unsupported-config", tb(ARGS + ["sglang/srt/server_args.py:_deterministic_rocm_rccl_check"], "ValueError: --disable-custom-all-reduce cannot be combined with --enable-deterministic-inference on ROCm when --tp-size is above 2: the all-reduce would run through RCCL.")),
 ("unsupported-config", tb(ARGS + ["sglang/srt/server_args.py:_handle_elastic_ep"], "AssertionError: Elastic EP runtime scale-up requires --elastic-ep-backend mooncake (got elastic_ep_backend=nixl).")),
 ("unsupported-config", tb(ARGS + ["sglang/srt/server_args.py:_handle_multimodal"], "TypeError: mm_process_config must be a dict, but got str")),
 # the same refusals with the frames trimmed: their own words say "options"
 ("unsupported-config", "ValueError: --enable-lmcache and --enable-hierarchical-cache are mutually exclusive"),
 ("unsupported-config", "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be used at the same time. Please use only one of them."),
 ("unsupported-config", "ValueError: --disable-fast-image-processor conflicts with --image-processor-backend=pil."),
 ("unsupported-config", "ValueError: --ssl-ca-certs has no effect without --ssl-certfile and --ssl-keyfile."),
 ("unsupported-config", "ValueError: Cannot set --encoder-only and --language-only together"),
 ("unsupported-config", "ValueError: SGLANG_MOE_NVFP4_DISPATCH cannot be set together with --flashinfer-a2a-dispatch-type."),
 ("unsupported-config", "ValueError: Cannot enable both --enable-tokenizer-batch-encode and --enable-dynamic-batch-tokenizer. Please choose one tokenizer batching approach."),
 ("unsupported-config", "ValueError: --prefill-kv-cache-dequant-dtype applies only with --kv-cache-dtype=nvfp4."),
 ("unsupported-config", "AssertionError: KV4 MHA expects attention_backend to be one of ['fa3', 'trtllm_mha'], but got triton"),
 ("unsupported-config", "ValueError: Invalid disaggregation_mode=both"),
 ("unsupported-config", tb(ARGS, "ValueError: --grpc-port (30000) must differ from --port (30000)")),
 # ...near misses in the same file: a port it cannot get, a package it needs, a Python bug
 ("port-in-use", tb(ARGS + ["sglang/srt/server_args.py:_handle_ports"], "ValueError: nccl_port at 31000 is not available in 30 seconds.")),
 ("missing-dependency", tb(ARGS + ["sglang/srt/server_args.py:_handle_ssl_validation"], "ValueError: --enable-http2 requires the 'granian' package. Install it with: pip install \"sglang[http2]\"")),
 ("missing-dependency", tb(ARGS + ["sglang/srt/server_args.py:_handle_attention_backend_compatibility", "sglang/srt/utils/common.py:is_flashinfer_available"], "ModuleNotFoundError: No module named 'flashinfer'")),
 ("model-load-error", tb(ARGS + ["sglang/srt/server_args.py:get_hf_config", "sglang/srt/utils/hf_transformers_utils.py:get_config", "transformers/models/auto/configuration_auto.py:from_pretrained", "transformers/configuration_utils.py:get_config_dict", "transformers/utils/hub.py:cached_file"], "OSError: /models/Qwen3-8B does not appear to have a file named config.json. Checkout 'https://huggingface.co//models/Qwen3-8B/tree/main' for available files.")),
 ("no-gpu", tb(ARGS + ["sglang/srt/server_args.py:_handle_gpu_memory_settings", "sglang/srt/utils/common.py:get_device_memory_capacity", "torch/cuda/__init__.py:_lazy_init"], "RuntimeError: No CUDA GPUs are available")),
 ("other", tb(ARGS + ["sglang/srt/server_args.py:_handle_speculative_decoding"], "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'")),

 # --- model-load-error: transformers, huggingface_hub and safetensors while a checkpoint loads ---
 ("model-load-error", tb(LOAD + ["sglang/srt/model_loader/loader.py:_prepare_weights"], "RuntimeError: Cannot find any model weights with `/models/DeepSeek-V3`")),
 ("model-load-error", tb(HF + ["huggingface_hub/utils/_validators.py:_inner_fn", "huggingface_hub/_snapshot_download.py:_inner_hf_hub_download"], "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub and we cannot find the requested files in the local cache. Please check your connection and try again or make sure your Internet connection is on.")),
 ("model-load-error", "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub and we cannot find the requested files in the local cache. Please check your connection and try again or make sure your Internet connection is on."),
 ("model-load-error", tb(CFG + ["transformers/configuration_utils.py:get_config_dict", "transformers/utils/hub.py:cached_file"], "OSError: You are trying to access a gated repo.\nMake sure to have access to it at https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct.\n401 Client Error. (Request ID: Root=1-abc)")),
 ("model-load-error", "OSError: You are trying to access a gated repo.\nMake sure to have access to it at https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct."),
 ("model-load-error", tb(CFG, "OSError: Error no file named pytorch_model.bin, model.safetensors, tf_model.h5, model.ckpt.index or flax_model.msgpack found in directory /models/x.")),
 ("model-load-error", tb(CFG, "ValueError: Unrecognized model in /models/x. Should have a `model_type` key in its config.json, or contain one of the following strings in its name: albert, align, altclip")),
 ("model-load-error", tb(CFG + ["transformers/models/llama/configuration_llama.py:__init__", "transformers/models/llama/configuration_llama.py:_rope_scaling_validation"], "ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`, got {'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, 'original_max_position_embeddings': 8192, 'rope_type': 'llama3'}")),
 ("model-load-error", tb(LOAD + ["sglang/srt/model_loader/loader.py:load_weights_and_postprocess", "sglang/srt/models/qwen2.py:load_weights", "sglang/srt/model_loader/weight_utils.py:safetensors_weights_iterator", "safetensors/torch.py:load_file"], "safetensors_rust.SafetensorError: Error while deserializing header: HeaderTooLarge")),
 ("model-load-error", "safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered"),
 ("model-load-error", tb(LOAD + ["sglang/srt/models/llama.py:load_weights", "sglang/srt/layers/linear.py:weight_loader"], "AssertionError: Attempted to load weight (torch.Size([4096, 4096])) into parameter (torch.Size([2048, 4096]))")),
 ("model-load-error", tb(LOAD + ["sglang/srt/models/llama.py:load_weights", "sglang/srt/layers/vocab_parallel_embedding.py:weight_loader"], "RuntimeError: The size of tensor a (151936) must match the size of tensor b (152064) at non-singleton dimension 0")),
 ("model-load-error", tb(CFG, "KeyError: 'qwen3_next'")),
 ("model-load-error", "ValueError: The checkpoint you are trying to load has model type `qwen3_5_moe` but Transformers does not recognize this architecture. This could be because of an issue with the checkpoint, or because your version of Transformers is out of date."),
 ("model-load-error", tb(LOAD + ["sglang/srt/model_loader/loader.py:_initialize_model", "sglang/srt/model_loader/utils.py:get_model_architecture", "sglang/srt/models/registry.py:resolve_model_cls", "sglang/srt/models/registry.py:_raise_for_unsupported"], "ValueError: Model architectures ['MiniMaxM2ForCausalLM'] are not supported for now. Supported architectures: dict_keys(['LlamaForCausalLM', 'Qwen2ForCausalLM'])")),
 # whatever transformers / huggingface_hub raise while the checkpoint is read (any type, any words)
 ("model-load-error", tb(CFG + ["transformers/configuration_utils.py:from_dict", "transformers/configuration_utils.py:__init__"], "TypeError: `text_config` must be a `dict`, `PreTrainedConfig`, or `None`, got `list`")),
 ("model-load-error", tb(SCHED + ["sglang/srt/managers/tokenizer_manager.py:__init__", "sglang/srt/utils/hf_transformers_utils.py:get_tokenizer", "transformers/models/auto/tokenization_auto.py:from_pretrained", "transformers/tokenization_utils_base.py:from_pretrained", "transformers/tokenization_utils_base.py:_from_pretrained"], "TypeError: Special token pad_token has to be either str or AddedToken but got: <class 'dict'>")),
 ("model-load-error", tb(HF + ["huggingface_hub/_snapshot_download.py:_raise_if_incomplete_snapshot"], "huggingface_hub.errors.IncompleteSnapshotError: The cached snapshot for 'Qwen/Qwen3-8B' (revision 'main', commit 9c1b) is incomplete: 2 file(s) are missing (model-00003-of-00005.safetensors, model-00004-of-00005.safetensors).")),
 ("model-load-error", tb(CFG + ["transformers/configuration_utils.py:get_config_dict", "transformers/utils/hub.py:cached_file", "huggingface_hub/utils/_validators.py:validate_repo_id"], "huggingface_hub.errors.HFValidationError: Repo id must use alphanumeric chars or '-', '_', '.', '--' and '..' are forbidden, '-' and '.' cannot start or end the name, max length is 96: '/data/models/Qwen3-8B/'.")),
 # ...near miss: the same libraries at request time (a chat template applied while serving) are not the checkpoint load
 ("unsupported-config", tb(["sglang/srt/entrypoints/openai/serving_chat.py:_apply_jinja_template", "transformers/tokenization_utils_base.py:apply_chat_template"], "ValueError: continue_final_message is not compatible with return_assistant_tokens_mask.")),
 # ...near misses: the loader's frames do not decide over a message that names something else
 ("cuda-oom", tb(LOAD + ["sglang/srt/model_loader/loader.py:_initialize_model", "sglang/srt/models/llama.py:__init__", "torch/nn/modules/module.py:to"], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated memory 77.50 GiB is allocated by PyTorch, and 12.13 MiB is reserved by PyTorch but unallocated.")),
 ("missing-dependency", tb(LOAD + ["sglang/srt/model_loader/loader.py:_initialize_model", "sglang/srt/layers/quantization/awq.py:__init__"], "ModuleNotFoundError: No module named 'awq_ext'")),
 ("missing-dependency", tb(LOAD + ["sglang/srt/model_loader/loader.py:_get_quantized_weights_iterator"], "ImportError: Please install bitsandbytes>=0.44.0 via `pip install bitsandbytes>=0.44.0` to use bitsandbytes quantizer.")),
 ("kernel-compile-error", tb(LOAD + ["sglang/srt/model_loader/loader.py:load_weights_and_postprocess", "sglang/srt/layers/quantization/fp8.py:process_weights_after_loading", "sgl_kernel/gemm.py:fp8_blockwise_scaled_mm", "torch/_ops.py:__call__"], "RuntimeError: CUDA error: no kernel image is available for execution on the device\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")),
 ("unsupported-config", tb(LOAD + ["sglang/srt/model_loader/loader.py:_initialize_model", "sglang/srt/configs/model_config.py:_verify_quantization"], "ValueError: fp8 quantization is currently not supported in ROCm.")),

 # --- missing-dependency: every shape of a failed import ---
 ("missing-dependency", plain_tb(["sglang/launch_server.py:<module>", "sglang/srt/entrypoints/http_server.py:<module>", "sglang/srt/managers/tokenizer_manager.py:<module>"], "ModuleNotFoundError: No module named 'sgl_kernel'")),
 ("missing-dependency", "ImportError: libnuma.so.1: cannot open shared object file: No such file or directory"),
 ("missing-dependency", plain_tb(["sglang/srt/layers/quantization/fp8_kernel.py:<module>", "sgl_kernel/__init__.py:<module>", "ctypes/__init__.py:__init__"], "OSError: libibverbs.so.1: cannot open shared object file: No such file or directory")),
 ("missing-dependency", tb(LOAD + ["sglang/srt/model_loader/loader.py:_initialize_model", "transformers/dynamic_module_utils.py:check_imports"], "ImportError: This modeling file requires the following packages that were not found in your environment: flash_attn. Run `pip install flash_attn`")),
 ("missing-dependency", "RuntimeError: Cannot find a working triton installation. Either the package is not installed or it is too old. More information on installing Triton can be found at: https://github.com/triton-lang/triton"),
 ("missing-dependency", "ImportError: cannot import name 'is_torch_fx_available' from 'transformers.utils' (/usr/local/lib/python3.12/dist-packages/transformers/utils/__init__.py)"),
 ("missing-dependency", plain_tb(["sglang/srt/utils/common.py:assert_pkg_version"], "Exception: sgl-kernel is installed with version 0.3.1, which is less than the minimum required version 0.3.5. Please reinstall the latest version with `pip install sgl-kernel --force-reinstall`")),
 # installed, but at a version the rest cannot use (system libraries, NumPy's ABI, transformers' lazy imports, torchvision)
 ("missing-dependency", plain_tb(["sglang/srt/layers/activation.py:<module>", "sgl_kernel/__init__.py:<module>"], "ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by /usr/local/lib/python3.12/dist-packages/sgl_kernel/sm90/common_ops.abi3.so)")),
 ("missing-dependency", "A module that was compiled using NumPy 1.x cannot be run in\nNumPy 2.1.0 as it may crash. To support both 1.x and 2.x\nversions of NumPy, modules must be compiled with NumPy 2.0."),
 ("missing-dependency", tb(LOAD + ["transformers/utils/import_utils.py:_get_module"], "RuntimeError: Failed to import transformers.models.qwen2.modeling_qwen2 because of the following error (look up to see its traceback):\nNo module named 'torch.distributed.tensor'")),
 ("missing-dependency", plain_tb(["sglang/srt/multimodal/processors/qwen_vl.py:<module>", "torchvision/__init__.py:<module>", "torchvision/_meta_registrations.py:<module>", "torch/library.py:register_fake"], "RuntimeError: operator torchvision::nms does not exist")),
 ("missing-dependency", "Could not load library libcudnn_cnn_infer.so.8. Error: libcudnn_cnn_infer.so.8: cannot open shared object file: No such file or directory"),
 # ...near miss: an sgl_kernel build with the symbols of another torch is a kernel mismatch
 ("kernel-compile-error", plain_tb(["sglang/srt/layers/activation.py:<module>", "sgl_kernel/__init__.py:<module>", "sgl_kernel/load_utils.py:_load_architecture_specific_ops"], "ImportError: /usr/local/lib/python3.12/dist-packages/sgl_kernel/sm90/common_ops.abi3.so: undefined symbol: _ZNK3c1010TensorImpl15incref_pyobjectEv")),

 # --- kernel-compile-error: Triton, ptxas, nvcc, ninja, FlashInfer JIT, sgl_kernel ops, HIP ---
 ("kernel-compile-error", tb(TRITON + ["triton/compiler/compiler.py:make_ir"], "triton.compiler.errors.CompilationError: at 45:16:\n        offs_n = start_n + tl.arange(0, BLOCK_N)\n                ^\nValueError('arange\\'s range must be a power of 2')")),
 ("kernel-compile-error", tb(TRITON + ["triton/backends/nvidia/compiler.py:make_cubin"], "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\nptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'")),
 ("kernel-compile-error", tb(TRITON + ["triton/runtime/driver.py:__getattr__", "triton/backends/nvidia/driver.py:__init__", "triton/runtime/build.py:_build", "subprocess.py:check_call"], "subprocess.CalledProcessError: Command '['/usr/bin/gcc', '/tmp/tmpabc/main.c', '-O3', '-shared', '-fPIC', '-o', '/tmp/tmpabc/cuda_utils.cpython-312-x86_64-linux-gnu.so', '-lcuda']' returned non-zero exit status 1.")),
 ("kernel-compile-error", "/usr/bin/ld: cannot find -lcuda: No such file or directory\ncollect2: error: ld returned 1 exit status"),
 ("kernel-compile-error", tb(TRITON, "RuntimeError: Triton Error [CUDA]: device kernel image is invalid")),
 ("kernel-compile-error", tb(JIT, "RuntimeError: Ninja build failed. Ninja output:\nFAILED: batch_decode_with_kv_cache.cuda.o\nnvcc fatal   : Unsupported gpu architecture 'compute_120a'\nninja: build stopped: subcommand failed.")),
 ("kernel-compile-error", "nvcc fatal   : Unsupported gpu architecture 'compute_120a'"),
 ("kernel-compile-error", tb(FWD + ["sglang/srt/layers/moe/fused_moe_triton/fused_moe.py:moe_align_block_size", "sgl_kernel/moe.py:moe_align_block_size", "torch/_ops.py:__getattr__"], "AttributeError: '_OpNamespace' 'sgl_kernel' object has no attribute 'moe_align_block_size'")),
 ("kernel-compile-error", "RuntimeError: No such operator sgl_kernel::fp8_scaled_mm"),
 ("kernel-compile-error", tb(FWD + ["aiter/ops/triton/gemm_a8w8.py:gemm_a8w8"], "RuntimeError: HIP error: invalid device function\nHIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing AMD_SERIALIZE_KERNEL=3")),
 ("kernel-compile-error", "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or directory for GPU arch : gfx1100"),
 ("kernel-compile-error", "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.\nCUDA kernel errors might be asynchronously reported at some other API call"),
 ("kernel-compile-error", tb(FWD + ["torch/_inductor/codecache.py:load", "torch/_inductor/runtime/triton_heuristics.py:precompile"], "torch._inductor.exc.InductorError: SubprocessException: An exception occurred in a subprocess:\nptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'")),
 # compilers' own failure lines (LLVM behind Triton, MLIR's pass manager, nvcc diagnostics, torch's compiler checks)
 ("kernel-compile-error", "LLVM ERROR: Cannot select: intrinsic %llvm.nvvm.shfl.sync.bfly.i32"),
 ("kernel-compile-error", tb(TRITON + ["triton/backends/nvidia/compiler.py:make_llir"], "RuntimeError: PassManager::run failed")),
 ("kernel-compile-error", tb(FWD + ["torch/_inductor/codecache.py:compile_file"], "torch._inductor.exc.CppCompileError: C++ compile error")),
 ("kernel-compile-error", "/usr/local/cuda/include/cuda_fp8.hpp(12): error: identifier \"__nv_fp8_e4m3\" is undefined\n1 error detected in the compilation of \"/tmp/norm.cu\"."),
 ("kernel-compile-error", tb(JIT + ["torch/utils/cpp_extension.py:_check_cuda_version"], "RuntimeError: The current installed version of g++ (9.4.0) is less than the minimum required version by CUDA 12.8 (11.0.0). Please make sure to use an adequate version of g++ (>=11.0.0, <14.0).")),
 ("kernel-compile-error", tb(FWD + ["deep_gemm/jit/compiler.py:__init__"], "RuntimeError: DeepGEMM requires NVCC 12.3 or higher")),
 ("kernel-compile-error", tb(TRITON + ["triton/runtime/build.py:_build"], "RuntimeError: Failed to find C compiler. Please specify via CC environment variable.")),
 # ...near miss: a Triton kernel that ran out of memory at run time is memory
 ("cuda-oom", tb(TRITON, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 201.12 MiB is free.")),

 # --- cuda-oom: torch's and the libraries' allocation failures, any phase ---
 ("cuda-oom", tb(FWD + ["sglang/srt/layers/logits_processor.py:forward", "torch/nn/functional.py:linear"], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.27 GiB. GPU 0 has a total capacity of 79.10 GiB of which 4.31 GiB is free. Process 112358 has 74.78 GiB memory in use. Of the allocated memory 70.12 GiB is allocated by PyTorch, and 1.89 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")),
 ("cuda-oom", tb(FWD + ["torch/nn/functional.py:linear"], "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")),
 ("cuda-oom", tb(FWD, "torch.AcceleratorError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")),
 ("cuda-oom", "[2026-05-01 10:00:00 TP3] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB. GPU 3 has a total capacity of 139.72 GiB of which 97.06 MiB is free.\n" + SIGQUIT),
 ("cuda-oom", tb(FWD + ["sglang/srt/layers/moe/fused_moe_triton/fused_moe.py:fused_experts_impl"], "torch.cuda.OutOfMemoryError: HIP out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 191.98 GiB of which 1.20 GiB is free.")),
 ("cuda-oom", tb(FWD + ["flashinfer/prefill.py:plan"], "RuntimeError: Failed to allocate memory for batch_prefill_tmp_s with size 13631488 and alignment 16 in AlignedAllocator")),
 ("cuda-oom", tb(CAPTURE, "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.40 GiB is free.\nPossible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n3. disable torch compile by not using --enable-torch-compile\n4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)")),

 # --- kv-pool-too-small: SGLang's memory-pool sizing and slot allocation ---
 ("kv-pool-too-small", tb(POOL + ["sglang/srt/mem_cache/kv_cache_configurator.py:_profile_available_bytes"], "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.6. Raise --mem-fraction-static above 0.712 (minimum viable = 1 - available/pre = 0.7021). If using speculative decoding, draft weights are now counted.")),
 ("kv-pool-too-small", tb(POOL + ["sglang/srt/mem_cache/kv_cache_configurator.py:resolve_max_num_reqs"], "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. max_mamba_cache_size=4, mamba_ratio=3, resulting max_num_reqs=0. Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with more memory.")),
 ("kv-pool-too-small", tb(FWD + ["sglang/srt/managers/schedule_batch.py:prepare_for_extend", "sglang/srt/mem_cache/memory_pool.py:alloc"], "AssertionError: Not enough space for mamba cache, try to increase --mamba-full-memory-ratio or --max-mamba-cache-size.")),
 ("kv-pool-too-small", tb(POOL, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")),
 ("kv-pool-too-small", tb(FWD + ["sglang/srt/managers/schedule_batch.py:prepare_for_extend", "sglang/srt/mem_cache/allocation.py:alloc_req_slots"], "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`. req_to_token_pool.available_size()=0, num_reqs=1, ")),
 ("kv-pool-too-small", tb(FWD + ["sglang/srt/managers/schedule_batch.py:prepare_for_decode", "sglang/srt/mem_cache/common.py:alloc_for_decode", "sglang/srt/mem_cache/common.py:alloc_token_slots"], "RuntimeError: Decode out of memory. Try to lower your batch size.\nTry to allocate 64 tokens.\nAvailable tokens: 0\nself.token_to_kv_pool_allocator.available_size()=0\nself.tree_cache.evictable_size()=0\n")),

 ("kv-pool-too-small", tb(FWD + ["sglang/srt/managers/schedule_batch.py:alloc_req_slots", "sglang/srt/mem_cache/memory_pool.py:alloc"], "RuntimeError: Out of memory. Please set a smaller number for `--max-running-requests`.")),
 ("kv-pool-too-small", "AssertionError: Not enough memory for the KV cache: need 12.0 GB, available 3.1 GB"),
 # ...near misses: GPUs partly held by other processes are a GPU-memory problem; a request-time OOM is not the pool
 ("cuda-oom", tb(MR + ["sglang/srt/model_executor/model_runner.py:init_torch_distributed"], "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory=10.52, local_gpu_memory=79.10, local_gpu_memory * 0.9=71.19")),
 ("cuda-oom", tb(FWD + ["sglang/srt/layers/sampler.py:forward", "torch/nn/functional.py:softmax"], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 11.59 GiB. GPU 0 has a total capacity of 79.19 GiB of which 6.40 GiB is free.")),

 # --- kv-cache-leak: the idle check's wordings ---
 ("kv-cache-leak", tb(FWD + ["sglang/srt/managers/scheduler.py:self_check_during_idle", "sglang/srt/managers/scheduler_runtime_checker_mixin.py:check_memory"], "ValueError: token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens=1000, available_size=900, evictable_size=0, protected_size=0")),
 ("kv-cache-leak", tb(FWD + ["sglang/srt/managers/scheduler_runtime_checker_mixin.py:check_memory"], "ValueError: SWA Pool Mem Leak Detected! swa_available_size=100, swa_evictable_size=0")),
 ("kv-cache-leak", "[2026-05-01 10:00:00 TP0] Scheduler hit an exception: ValueError: Mamba Pool Mem Leak Detected! mamba_available_size=10, mamba_evictable_size=2\n" + SIGQUIT),

 # --- cuda-graph-capture-failed: errors raised inside capture, with and without SGLang's banner ---
 ("cuda-graph-capture-failed", tb(CAPTURE + ["sglang/srt/model_executor/cuda_graph_runner.py:capture_one_batch_size", "torch/cuda/graphs.py:__exit__"], "RuntimeError: CUDA error: operation failed due to a previous error during capture\nCUDA kernel errors might be asynchronously reported at some other API call")),
 ("cuda-graph-capture-failed", tb(CAPTURE + ["sglang/srt/model_executor/cuda_graph_runner.py:capture_one_batch_size", "torch/cuda/random.py:get_rng_state"], "RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture. If you need this call to be captured, please file an issue. Current cudaStreamCaptureStatus: cudaStreamCaptureStatusActive")),
 ("cuda-graph-capture-failed", "[2026-05-01 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB\n" + tb(["sglang/srt/layers/attention/flashinfer_backend.py:init_forward_metadata_capture_cuda_graph"], "AssertionError: flashinfer decode wrapper capture needs a fixed batch size")),
]


@pytest.mark.parametrize("category,text", PHRASINGS, ids=lambda value: value if len(value) < 30 else None)
def test_family_phrasing_gets_its_category(category, text):
    diagnoses = diagnose_lines(text.splitlines(), "<phrasing>", RULES, None)
    assert diagnoses, "nothing diagnosed"
    assert diagnoses[0].match.category == category, (diagnoses[0].match.rule_id, diagnoses[0].match.diagnosis)


WARMUP = plain_tb(["sglang/srt/entrypoints/http_server.py:_wait_and_warmup", "requests/api.py:post", "requests/adapters.py:send"],
                  "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries exceeded with url: /generate (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused'))")
LAUNCHER_EOF = plain_tb(["sglang/launch_server.py:<module>", "sglang/srt/entrypoints/http_server.py:launch_server", "sglang/srt/entrypoints/engine.py:_launch_subprocesses", "sglang/srt/entrypoints/engine.py:_wait_for_scheduler_ready", "multiprocessing/connection.py:recv", "multiprocessing/connection.py:_recv_bytes"], "EOFError")
WATCHDOG = ("[rank1]:[E1201 10:15:00.000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.")

# (category, the first cause's text, the echoes printed after it): the first cause decides.
FIRST_CAUSE = [
 ("cuda-oom", tb(FWD, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 2.10 GiB is free."), [SIGQUIT, WARMUP]),
 ("model-load-error", tb(LOAD + ["sglang/srt/models/qwen3.py:load_weights"], "KeyError: 'model.layers.0.mlp.experts.w13_weight_scale_inv'"), ["[2026-05-01 10:00:02] Rank 0 scheduler is dead. Please check if there are relevant logs.", LAUNCHER_EOF]),
 ("missing-dependency", tb(MR + ["sglang/srt/layers/attention/flashinfer_backend.py:__init__"], "ModuleNotFoundError: No module named 'flashinfer'"), ["[2026-05-01 10:00:02] Rank 0 scheduler is dead. Please check if there are relevant logs.", LAUNCHER_EOF]),
 ("kv-cache-leak", tb(FWD + ["sglang/srt/managers/scheduler_runtime_checker_mixin.py:check_memory"], "ValueError: token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens=1000, available_size=900, evictable_size=0, protected_size=0"), [WATCHDOG, SIGQUIT]),
 ("kv-pool-too-small", tb(POOL, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."), ["[2026-05-01 10:00:02] Rank 0 scheduler is dead. Please check if there are relevant logs.", LAUNCHER_EOF]),
 ("kernel-compile-error", tb(JIT, "RuntimeError: Ninja build failed. Ninja output:\nnvcc fatal   : Unsupported gpu architecture 'compute_120a'"), [SIGQUIT, WARMUP]),
 ("unsupported-config", tb(HOOK, "ValueError: DeepEP v2 MoE is not validated as a speculative draft backend. Select another --speculative-moe-a2a-backend."), []),
 ("cuda-graph-capture-failed", tb(CAPTURE + ["torch/_dynamo/eval_frame.py:_fn"], "torch._dynamo.exc.Unsupported: Attempted to call function marked as skipped"), [WATCHDOG, SIGQUIT]),
]


@pytest.mark.parametrize("category,first,echoes", FIRST_CAUSE, ids=[c for c, _, _ in FIRST_CAUSE])
def test_the_first_cause_decides_over_the_echoes_after_it(category, first, echoes):
    # SGLang logs the scheduler's traceback with its trailing newline: a blank line ends it.
    lines = "\n".join([first, "", *echoes]).splitlines()
    [diagnosis] = diagnose_lines(lines, "<log>", RULES, None)
    assert diagnosis.match.category == category, (diagnosis.match.rule_id, diagnosis.match.diagnosis)


MORE = [
 # FlashInfer's dispatch finding no tile configuration for the model's head dim
 ("unsupported-config", tb(FWD + ["flashinfer/prefill.py:run"], "RuntimeError: Error in function 'BatchPrefillWithPagedKVCacheDispatched' at /usr/local/include/flashinfer/attention/prefill.cuh:2300: FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=1 NUM_MMA_D_QK=2 NUM_MMA_D_VO=2 NUM_MMA_KV=4 NUM_WARPS_Q=4 NUM_WARPS_KV=1 please create an issue (https://github.com/flashinfer-ai/flashinfer/issues) and report the issue to the developers.")),
 # a kernel library's dispatch finding no build for this compute capability
 ("kernel-compile-error", "NotImplementedError: No compiled cutlass_scaled_mm for a compute capability less than CUDA device capability: 120"),
 ("kernel-compile-error", tb(FWD + ["sgl_kernel/gemm.py:cutlass_scaled_mm"], "RuntimeError: cutlass_scaled_mm is not implemented for current compute capability: 120")),
 # capture failures in torch's and the backends' own words, no SGLang banner, no stack
 ("cuda-graph-capture-failed", "RuntimeError: CUDA error: operation failed due to a previous error during capture"),
 ("cuda-graph-capture-failed", "Exception: Failed to capture CUDA graph for batch size 64: invalid argument"),
 # a request refused for its length, a client answered 503 by the router: the caller's problem, not a crash
 ("other", tb(["sglang/srt/managers/tokenizer_manager.py:generate_request", "sglang/srt/managers/tokenizer_manager.py:_validate_one_request"], "ValueError: Requested token count exceeds the model's maximum context length of 40960 tokens. You requested a total of 43778 tokens: 19202 tokens from the input messages and 24576 tokens for the completion.")),
 ("other", "ValueError: The input (50000 tokens) is longer than the model's context length (32768 tokens)."),
 ("other", plain_tb(["slime/utils/http_utils.py:post", "httpx/_models.py:raise_for_status"], "httpx.HTTPStatusError: Server error '503 Service Unavailable' for url 'http://10.0.0.1:3776/generate'\nFor more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/503")),
 # ...near miss: the KV pool refusing a request that fits the context stays the pool's
 ("kv-pool-too-small", "ValueError: Request length is longer than the KV cache pool size or the max context length. Tokens: 300000"),
 # an exception line cut to a fragment of its type, raised through SGLang code: still SGLang's error
 ("other", tb(FWD + ["sglang/jit_kernel/deepseek_v4.py:fused_rope", "python/tvm_ffi/cython/function.pxi:tvm_ffi.core.Function.__call__"], "tvm.error.Inte")),
 # a kernel's TMA descriptor rejected for the shapes/strides a code path passes
 ("other", "DeepGEMM failed for matrix shapes M=256, N=1076, K=1152.\nThis typically occurs when dimensions are too small for DeepGEMM's TMA descriptors."),
 # the custom all-reduce's CUDA check names its source file (no capture frames: the communication
 # kernel, distributed.toml's rule); AITER's chip table refusing this GPU
 ("nccl-error", "Failed: Cuda error /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:350 'invalid argument'"),
 ("kernel-compile-error", plain_tb(ARGS + ["sglang/srt/server_args.py:_handle_amd_specifics", "aiter/jit/utils/chip_info.py:get_gfx_custom_op_core"], "KeyError: \"Unknown GPU architecture: gfx1101. Supported architectures: ['native', 'gfx90a', 'gfx942', 'gfx950']\"")),
 # a bare assert in a weight loader, the paste's closing fence right after it
 ("model-load-error", "```\nFile \".../sglang/srt/layers/linear.py\", line 269, in weight_loader\n    assert param.size() == loaded_weight.size()\nAssertionError\n```"),
 # torch_memory_saver's raw CUresult (2 = CUDA_ERROR_OUT_OF_MEMORY); the launcher's child-death line
 ("cuda-oom", "[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103"),
 ("other", "Child process unexpectedly failed with exitcode=9. pid=211"),
 # an exception line cut to its type, raised inside capture: the stack decides
 ("cuda-graph-capture-failed", tb(CAPTURE + ["sglang/srt/layers/attention/triton_backend.py:init_cuda_graph_state"], "torch.O")),
 # SGLang's type-based dispatcher (sglang/utils.py) for a request type it has no handler for
 ("other", "[14:26:31] Invalid object: UpdateWeightsFromDiskReqInput(model_path='/models/x', load_format='auto')"),
 ("other", tb(["sglang/srt/managers/data_parallel_controller.py:event_loop", "sglang/utils.py:__call__"], "ValueError: Invalid object: GetWeightsByNameReqInput(name='lm_head.weight', truncate_size=100)")),
 ("other", tb(["sglang/srt/entrypoints/engine.py:__init__", "sglang/srt/server_args.py:__init__"], "TypeError: ServerArgs.__init__() got multiple values for keyword argument 'log_level'")),
 # NotImplementedError pasted alone or raised in a library; Rust launchers' clap errors; tensor-parallel refusals
 ("unsupported-config", "NotImplementedError: Speculative decoding is not implemented for this model"),
 ("unsupported-config", plain_tb(["flashinfer/decode.py:plan", "flashinfer/utils.py:_check_kv_layout"], "NotImplementedError: KV layout HND is not supported for this kernel")),
 ("unsupported-config", "error: unexpected argument '--prefill-urls' found\n\n  tip: to pass '--prefill-urls' as a value, use '-- --prefill-urls'\n\nUsage: sglang-router [OPTIONS]"),
 ("unsupported-config", "error: invalid value 'rr' for '--policy <POLICY>'\n  [possible values: random, round_robin, cache_aware, power_of_two]"),
 ("unsupported-config", "RuntimeError: The specified --tp-size 3 does not evenly divide the number of attention heads 32"),
 ("unsupported-config", "ValueError: The input size is not aligned with the quantized weight shape. This can be caused by too large tensor parallel size."),
 # ...near miss: a memory pool's placeholder method stays SGLang's bug
 ("other", tb(FWD + ["sglang/srt/mem_cache/memory_pool.py:get_cpu_copy"], "NotImplementedError")),
 # an ImportError in any words is the environment's; argparse's type checks refuse values
 ("missing-dependency", tb(MR + ["sglang/srt/layers/moe/token_dispatcher/moriep.py:__init__"], "ImportError: MORI EPv2 requires a MORI build with cco and dispatch_combine_v2")),
 ("missing-dependency", "ImportError: DLL load failed while importing _C: The specified module could not be found."),
 ("unsupported-config", plain_tb(ARGS + ["argparse.py:parse_args", "sglang/srt/model_executor/cuda_graph_config.py:parse_cuda_graph_config_arg"], "argparse.ArgumentTypeError: --cuda-graph-config['decode'] must be a JSON object, got 8")),
 # ...near miss: an import during capture that a kernel needs is still the capture's kernel problem
 ("kernel-compile-error", tb(CAPTURE + ["sgl_kernel/__init__.py:<module>"], "ImportError: /usr/local/lib/python3.12/dist-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")),
]


@pytest.mark.parametrize("category,text", MORE, ids=lambda value: value if len(value) < 30 else None)
def test_more_family_phrasings(category, text):
    test_family_phrasing_gets_its_category(category, text)


def test_a_stack_cut_in_the_argument_checks_reads_as_refused_options():
    text = plain_tb(ARGS + ["sglang/srt/server_args.py:_handle_speculative_decoding"], "    if self.speculative_algorithm == \"DFLASH\":")
    [diagnosis] = diagnose_lines(text.splitlines()[:-1], "<paste>", RULES, None)  # the error line cut
    assert (diagnosis.match.category, diagnosis.match.rule_id) == ("unsupported-config", "argument-checks-stack-cut-off")
    # ...while a stack cut in a helper the checks call is not claimed by it
    helper = plain_tb(ARGS + ["sglang/srt/utils/hf_transformers_utils.py:get_config"], "x")
    [other] = diagnose_lines(helper.splitlines()[:-1], "<paste>", RULES, None)
    assert other.match.rule_id != "argument-checks-stack-cut-off"


REPLAY = FWD + ["sglang/srt/model_executor/cuda_graph_runner.py:replay", "sglang/srt/model_executor/cuda_graph_runner.py:replay_prepare"]
EAGER = FWD + ["sglang/srt/model_executor/model_runner.py:forward_extend", "sglang/srt/models/llama.py:forward"]
# torch's other shape wordings (einsum, view, unflatten, split, cat/stack, TORCH_CHECK on a size)
TORCH_SHAPES = [
 "RuntimeError: einsum(): operands do not broadcast with remapped shapes (original->remapped): [16, 8]->[16, 1, 8] [17, 8]->[1, 17, 8]",
 "RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.",
 "RuntimeError: unflatten: Provided sizes [8, 64] don't multiply up to the size of dim 1 (576) in the input tensor",
 "RuntimeError: split_with_sizes expects split_sizes to sum exactly to 300 (input tensor's size at dimension 0), but got split_sizes=[128, 128]",
 "RuntimeError: Tensors must have same number of dimensions: got 2 and 3",
 "RuntimeError: stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [2, 4] at entry 1",
 "RuntimeError: Expected q.size(0) == qo_indptr[-1] to be true, but got false.  (Could this error message be improved?  If so, please report an enhancement request to PyTorch.)",
 "AssertionError: q.shape[0]=17 != 16",
]


@pytest.mark.parametrize("message", TORCH_SHAPES)
def test_torch_shape_wordings_are_placed_by_where_they_were_raised(message):
    test_family_phrasing_gets_its_category("cuda-graph-shape-mismatch", tb(REPLAY, message))
    test_family_phrasing_gets_its_category("other", tb(EAGER, message))
    # pasted alone, an eager op's own wording says it was not a graph buffer's copy
    test_family_phrasing_gets_its_category("other", message)


@pytest.mark.parametrize("category,message", [
 # the copies that fill a graph's static buffers
 ("cuda-graph-shape-mismatch", "RuntimeError: The size of tensor a (96) must match the size of tensor b (90) at non-singleton dimension 1"),
 ("cuda-graph-shape-mismatch", "RuntimeError: The expanded size of the tensor (16) must match the existing size (17) at non-singleton dimension 1.  Target sizes: [32, 16].  Tensor sizes: [32, 17]"),
 # torch.cat, an indexed assignment, a matmul, a view: eager ops
 ("other", "RuntimeError: Sizes of tensors must match except in dimension 0. Expected size 4096 but got size 2048 for tensor number 1 in the list."),
 ("other", "RuntimeError: shape mismatch: value tensor of shape [64, 1, 128] cannot be broadcast to indexing result of shape [66, 1, 128]"),
 ("other", "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x2048 and 4096x4096)"),
 ("other", "RuntimeError: shape '[16, -1, 128]' is invalid for input of size 1000"),
])
def test_a_shape_error_without_stack_is_placed_by_the_op_that_raised_it(category, message):
    test_family_phrasing_gets_its_category(category, message)


TMA_LINES = ["Error: Failed to initialize the TMA descriptor due to invalid argument", "tmaFormat: 9 dim: 4 gmem: 0x7b4cc0000000",
             "Shape: 192 131072 128 1 48", "swizzleType: 3"]


def test_a_traceback_cut_before_its_error_line_is_read_by_the_line_printed_before_it():
    cut = tb(FWD + ["sglang/srt/layers/attention/trtllm_mla_backend.py:forward_extend"], "x").splitlines()[:-1]
    [diagnosis] = diagnose_lines(TMA_LINES + cut, "<paste>", RULES, None)
    assert (diagnosis.match.category, diagnosis.match.rule_id) == ("other", "tma-descriptor-rejected-before-cut-traceback")
    # the same cut traceback without that line is not claimed by the context rule
    [alone] = diagnose_lines(cut, "<paste>", RULES, None)
    assert alone.match.rule_id != "tma-descriptor-rejected-before-cut-traceback"
