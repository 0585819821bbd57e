# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""Diagnosis generalises to the phrasings SGLang, torch, NCCL and the kernel libraries print for each
failure class (written from their sources and docs, not from the held-out corpus part): every text
below is diagnosed through `ddtreed diagnose`'s own path and must get its category."""

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from phrasing_helpers import traceback_text

RULES = load_rules([shipped("rules")])

def tb(frames, last, pre=""):
    return traceback_text(frames, last, pre)


SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__"]
MR = SCHED + ["sglang/srt/managers/tp_worker.py:__init__", "sglang/srt/model_executor/model_runner.py:__init__"]
FWD = ["sglang/srt/managers/scheduler.py:event_loop_normal", "sglang/srt/managers/scheduler.py:run_batch",
       "sglang/srt/managers/tp_worker.py:forward_batch_generation", "sglang/srt/model_executor/model_runner.py:forward"]
PHRASINGS = [
 # port-in-use
 ("port-in-use", "ERROR:    [Errno 98] Address already in use"),
 ("port-in-use", tb(["sglang/srt/entrypoints/http_server.py:launch_server", "uvicorn/server.py:startup"], "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use")),
 ("port-in-use", tb(SCHED+["sglang/srt/utils.py:get_zmq_socket", "zmq/sugar/socket.py:bind"], "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:30001')")),
 ("port-in-use", tb(MR+["sglang/srt/distributed/parallel_state.py:init_distributed_environment","torch/distributed/distributed_c10d.py:init_process_group","torch/distributed/rendezvous.py:_create_c10d_store"], "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")),
 ("port-in-use", tb(["sglang/launch_server.py:<module>","sglang/srt/server_args.py:__post_init__", "sglang/srt/server_args.py:_handle_ports"], "ValueError: nccl_port at 31000 is not available in 30 seconds.")),
 ("port-in-use", "OSError: [WinError 10048] Only one usage of each socket address (protocol/network address/port) is normally permitted"),
 ("port-in-use", tb(SCHED+["sglang/srt/disaggregation/mooncake/conn.py:__init__", "zmq/sugar/socket.py:bind"], "zmq.error.ZMQError: Address in use")),
 # nccl
 ("nccl-error", tb(FWD+["sglang/srt/distributed/communication_op.py:tensor_model_parallel_all_reduce","torch/distributed/distributed_c10d.py:all_reduce"], "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA function failed.")),
 ("nccl-error", "[rank3]:[E1201 10:00:00.000 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before timing out."),
 ("nccl-error", "[E ProcessGroupGloo.cpp:138] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"),
 ("nccl-error", tb(MR+["sglang/srt/distributed/parallel_state.py:init_distributed_environment","torch/distributed/distributed_c10d.py:init_process_group"], "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients joined.")),
 ("nccl-error", tb(FWD+["sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch","deep_ep/buffer.py:dispatch"], "RuntimeError: DeepEP error: CPU recv timeout")),
 ("nccl-error", "RuntimeError: DeepEP error: timeout (dispatch CPU)"),
 ("nccl-error", tb(FWD+["torch/distributed/distributed_c10d.py:all_gather_into_tensor"], "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:2384")),
 ("nccl-error", "[rank0]:[E1201 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout"),
 ("nccl-error", "[E ProcessGroupNCCL.cpp:1895] [PG 0 Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1"),
 ("nccl-error", tb(MR+["sglang/srt/distributed/parallel_state.py:initialize_model_parallel","sglang/srt/distributed/device_communicators/pynccl.py:__init__"], "RuntimeError: NCCL error: remote process exited or there was a network error")),
 ("nccl-error", tb(MR+["torch/distributed/distributed_c10d.py:barrier"], "torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout")),
 ("nccl-error", "W1201 torch/distributed/elastic/multiprocessing/api.py Sending process 123 closing signal SIGTERM\ntorch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"),
 ("nccl-error", tb(FWD, "RuntimeError: NCCL Error 6: remote process exited or there was a network error")),
 ("nccl-error", tb(SCHED+["sglang/srt/disaggregation/decode.py:pop_transferred","sglang/srt/disaggregation/mooncake/conn.py:poll"], "sglang.srt.disaggregation.base.conn.KVTransferError: Request 12 failed: Failed to get kvcache from prefill instance, it might be dead")),
 # unsupported-config
 ("unsupported-config", tb(["sglang/launch_server.py:<module>","sglang/srt/server_args.py:prepare_server_args","sglang/srt/server_args.py:__post_init__","sglang/srt/server_args.py:_handle_speculative_decoding"], "ValueError: Speculative decoding with EAGLE3 is not supported with --enable-dp-attention yet.")),
 ("unsupported-config", tb(["sglang/srt/server_args.py:__post_init__"], "AssertionError: tp_size must be divisible by dp_size when enable_dp_attention is set")),
 ("unsupported-config", "sglang.launch_server: error: argument --attention-backend: invalid choice: 'xformers' (choose from 'flashinfer', 'triton', 'torch_native')"),
 ("unsupported-config", tb(MR+["sglang/srt/model_executor/model_runner.py:init_attention_backend"], "ValueError: Invalid attention backend: fa4")),
 ("unsupported-config", tb(MR+["sglang/srt/layers/quantization/__init__.py:get_quantization_config"], "ValueError: Invalid quantization method: mxfp8. Available methods: ['fp8', 'awq', 'gptq']")),
 ("unsupported-config", tb(MR+["sglang/srt/model_executor/model_runner.py:load_model","sglang/srt/configs/model_config.py:_verify_quantization"], "ValueError: Quantization method specified in the model config (fp8) does not match the quantization method specified in the `quantization` argument (awq).")),
 ("unsupported-config", tb(MR, "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache (32000). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")),
 ("unsupported-config", tb(["sglang/srt/server_args.py:__post_init__","sglang/srt/server_args.py:check_server_args"], "AssertionError: FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`.")),
 ("unsupported-config", tb(MR+["sglang/srt/layers/attention/flashattention_backend.py:__init__"], "AssertionError: FlashAttention backend only supports page_size=1 for speculative decoding")),
 ("unsupported-config", tb(MR+["sglang/srt/configs/model_config.py:__init__"], "ValueError: User-specified context_length (200000) is greater than the derived context_length (131072). This may lead to incorrect model outputs or CUDA errors. To allow overriding context_length, please set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")),
 ("unsupported-config", tb(MR+["sglang/srt/layers/linear.py:weight_loader"], "ValueError: The output_size of gate's and up's weight = 192 is not divisible by weight quantization block_n = 128.")),
 ("unsupported-config", tb(["sglang/srt/server_args.py:__post_init__"], "NotImplementedError: --enable-dp-attention is not yet supported with pipeline parallelism")),
 ("unsupported-config", "sglang serve: error: the following arguments are required: --model-path"),
 ("unsupported-config", tb(MR+["sglang/srt/model_executor/model_runner.py:model_specific_adjustment"], "ValueError: Torch compile is not supported for model with sliding window attention")),
 ("unsupported-config", tb(MR+["sglang/srt/layers/quantization/fp8.py:__init__"], "ValueError: Currently, block-wise fp8 quantization is only supported on sm90 and above")),
 ("unsupported-config", tb(MR+["sglang/srt/models/deepseek_v2.py:__init__"], "ValueError: Unsupported activation: gelu_new. Only silu is supported for now.")),
 # other
 ("other", tb(FWD+["sglang/srt/managers/schedule_batch.py:prepare_for_decode"], "KeyError: 140")),
 ("other", tb(FWD+["sglang/srt/managers/schedule_batch.py:filter_batch"], "IndexError: list index out of range")),
 ("other", tb(FWD+["sglang/srt/sampling/sampling_batch_info.py:update_regex_vocab_mask"], "ZeroDivisionError: division by zero")),
 ("other", tb(["sglang/srt/entrypoints/openai/serving_chat.py:_process_messages","sglang/srt/parser/jinja_template_utils.py:process_content_for_template_format"], "jinja2.exceptions.UndefinedError: 'dict object' has no attribute 'content'")),
 ("other", tb(FWD+["sglang/srt/managers/scheduler.py:process_batch_result"], "RuntimeError: Trying to pop from an empty list")),
 ("other", tb(["sglang/srt/entrypoints/http_server.py:_wait_and_warmup"], "AssertionError")),
 ("other", tb(FWD+["sglang/srt/mem_cache/radix_cache.py:dec_lock_ref"], "AssertionError: dec_lock_ref on a node with lock_ref 0")),
 ("other", tb(["sglang/srt/managers/tokenizer_manager.py:_handle_batch_output"], "ValueError: Unknown finish reason")),
 ("other", tb(FWD+["sglang/srt/managers/scheduler.py:get_next_batch_to_run"], "AttributeError: 'NoneType' object has no attribute 'batch_is_full'")),
 ("other", tb(["sglang/srt/function_call/qwen25_detector.py:parse_base_json","json/decoder.py:raw_decode"], "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)")),
 ("other", tb(FWD+["sglang/srt/model_executor/forward_batch_info.py:init_new"], "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")),
 ("other", tb(["sglang/srt/managers/detokenizer_manager.py:event_loop","sglang/srt/managers/detokenizer_manager.py:handle_batch_token_id_out"], "KeyError: 'rid-1234'")),
 # kernel-compile
 ("kernel-compile-error", tb(FWD+["sglang/srt/layers/attention/triton_ops/extend_attention.py:extend_attention_fwd","triton/runtime/jit.py:run","triton/compiler/compiler.py:compile"], "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 166400, Hardware limit: 101376. Reducing block sizes or `num_stages` may help.")),
 ("kernel-compile-error", "ptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'"),
 ("kernel-compile-error", tb(FWD+["sgl_kernel/elementwise.py:rmsnorm","torch/_ops.py:__call__"], "RuntimeError: CUDA error: no kernel image is available for execution on the device")),
 ("kernel-compile-error", tb(MR+["flashinfer/jit/core.py:build_and_load","torch/utils/cpp_extension.py:_run_ninja_build"], "RuntimeError: Error building extension 'batch_prefill_with_kv_cache'")),
 ("kernel-compile-error", tb(FWD+["sgl_kernel/moe.py:moe_align_block_size","torch/_ops.py:__getattr__"], "AttributeError: '_OpNamespace' 'sgl_kernel' object has no attribute 'moe_align_block_size'")),
 ("kernel-compile-error", tb(MR+["aiter/jit/core.py:build_module"], "RuntimeError: HIP error: invalid device function\nHIP kernel errors might be asynchronously reported")),
 ("kernel-compile-error", tb(["sglang/srt/layers/quantization/fp8_kernel.py:<module>","sgl_kernel/__init__.py:<module>"], "ImportError: /usr/local/lib/python3.12/dist-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")),
 ("kernel-compile-error", tb(FWD+["triton/compiler/compiler.py:compile","triton/backends/nvidia/compiler.py:make_cubin"], "RuntimeError: Internal Triton PTX codegen error\n`ptxas` stderr:\nptxas /tmp/tmp.ptx, line 5; error   : Feature '.bf16' requires .target sm_80 or higher")),
 ("kernel-compile-error", tb(FWD+["torch/_inductor/compile_fx.py:compile_fx","torch/_inductor/codecache.py:load"], "torch._inductor.exc.InductorError: CalledProcessError: Command '['/usr/bin/gcc', '/tmp/cuda_utils.c']' returned non-zero exit status 1.")),
 ("kernel-compile-error", tb(FWD+["deep_gemm/jit/compiler.py:build"], "RuntimeError: Failed to compile /tmp/deep_gemm/kernel.cu: nvcc fatal : Unsupported gpu architecture 'compute_100a'")),
 ("kernel-compile-error", tb(FWD+["sgl_kernel/flash_attn.py:flash_attn_with_kvcache"], "RuntimeError: FlashAttention only supports Ampere GPUs or newer.")),
 # missing-dependency
 ("missing-dependency", tb(["sglang/launch_server.py:<module>","sglang/srt/entrypoints/http_server.py:<module>"], "ModuleNotFoundError: No module named 'uvloop'")),
 ("missing-dependency", tb(MR+["sglang/srt/layers/attention/flashinfer_backend.py:__init__"], "ImportError: FlashInfer is not installed. Please install it with pip install flashinfer-python")),
 ("missing-dependency", tb(["sglang/srt/utils.py:assert_pkg_version"], "Exception: transformers is installed with version 4.40.0, which is less than the minimum required version 4.46.0. Please reinstall it")),
 ("missing-dependency", tb(["sglang/srt/models/qwen2_vl.py:<module>","transformers/utils/import_utils.py:__getattr__"], "ImportError: cannot import name 'Qwen2VLVisionConfig' from 'transformers.models.qwen2_vl.configuration_qwen2_vl'")),
 ("missing-dependency", tb(["sglang/srt/utils.py:assert_pkg_version","importlib/metadata/__init__.py:version"], "importlib.metadata.PackageNotFoundError: No package metadata was found for sgl-kernel")),
 ("missing-dependency", tb(MR+["sglang/srt/layers/moe/ep_moe/layer.py:__init__"], "ImportError: DeepEP is not installed. Please install it following https://github.com/deepseek-ai/DeepEP")),
 # cuda-oom
 ("cuda-oom", tb(FWD, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.12 GiB is free.")),
 ("cuda-oom", tb(FWD+["torch/nn/functional.py:linear"], "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")),
 ("cuda-oom", tb(FWD, "torch.cuda.OutOfMemoryError: HIP out of memory. Tried to allocate 1.5 GiB")),
 ("cuda-oom", tb(FWD, "RuntimeError: CUDA driver error: out of memory")),
 ("cuda-oom", tb(FWD+["flashinfer/prefill.py:plan"], "RuntimeError: Failed to allocate memory for batch_prefill_tmp_v with size 603979776 and alignment 16 in AlignedAllocator")),
 # kv-pool
 ("kv-pool-too-small", tb(MR+["sglang/srt/model_executor/model_runner.py:init_memory_pool"], "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")),
 ("kv-pool-too-small", "[2026-01-01 10:00:00] Prefill out of memory. Try to lower your batch size.\nTry to allocate 8192 tokens.\nAvailable tokens: 1024"),
 ("kv-pool-too-small", tb(FWD+["sglang/srt/managers/schedule_batch.py:alloc_token_slots"], "RuntimeError: Decode out of memory. Try to lower your batch size.")),
 # watchdog
 ("scheduler-watchdog-timeout", "[2026-01-01 10:00:00] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"),
 ("scheduler-watchdog-timeout", "[2026-01-01 10:00:00 TP0] Watchdog timeout (self.watchdog_timeout=300)"),
 # fatal-signal
 ("fatal-signal", "Fatal Python error: Segmentation fault\n\nThread 0x00007f (most recent call first):\n  File \"/usr/lib/python3.10/threading.py\", line 320 in wait"),
 ("fatal-signal", "!!!!!!! Segfault encountered !!!!!!!\n  File \"<unknown>\", line 0, in ncclCommInitRank"),
 ("fatal-signal", "*** SIGSEGV received at time=1700000000 on cpu 3 ***\nPC: @ 0x7f0 (unknown) (unknown)"),
 # gpu-hw
 ("gpu-hardware-fault", "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus."),
 ("gpu-hardware-fault", tb(FWD, "RuntimeError: CUDA error: uncorrectable ECC error encountered")),
 # illegal mem
 ("illegal-memory-access", tb(FWD, "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call")),
 ("illegal-memory-access", "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [0,0,0], thread: [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed."),
 ("illegal-memory-access", "Memory access fault by GPU node-2 (Agent handle: 0x55) on address 0x7f. Reason: Unknown."),
 # model-load
 ("model-load-error", tb(MR+["sglang/srt/model_loader/loader.py:load_model","sglang/srt/models/llama.py:load_weights"], "KeyError: 'model.layers.0.mlp.experts.w13_weight_scale'")),
 ("model-load-error", tb(MR+["sglang/srt/configs/model_config.py:__init__","transformers/configuration_utils.py:get_config_dict"], "OSError: /models/x does not appear to have a file named config.json. Checkout 'https://huggingface.co/x/tree/None' for available files.")),
 ("model-load-error", tb(MR+["sglang/srt/model_loader/weight_utils.py:safetensors_weights_iterator","safetensors/torch.py:load_file"], "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer")),
 ("model-load-error", tb(MR+["sglang/srt/model_loader/loader.py:_get_model_initialization_kwargs"], "ValueError: Model architectures ['Glm4vMoeForConditionalGeneration'] are not supported for now. Supported architectures: dict_keys([...])")),
 # shape mismatch
 ("cuda-graph-shape-mismatch", tb(FWD+["sglang/srt/model_executor/cuda_graph_runner.py:replay","sglang/srt/model_executor/cuda_graph_runner.py:replay_prepare"], "RuntimeError: The expanded size of the tensor (16) must match the existing size (24) at non-singleton dimension 0.  Target sizes: [16].  Tensor sizes: [24]")),
 # capture failed
 ("cuda-graph-capture-failed", tb(MR+["sglang/srt/model_executor/model_runner.py:init_device_graphs","sglang/srt/model_executor/cuda_graph_runner.py:__init__"], "Exception: Capture cuda graph failed: \nPossible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n3. disable torch compile by not using --enable-torch-compile\n4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\nOpen an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose")),
 ("cuda-graph-capture-failed", tb(MR+["sglang/srt/model_executor/cuda_graph_runner.py:capture","torch/_dynamo/eval_frame.py:_fn"], "torch._dynamo.exc.Unsupported: call_function BuiltinVariable(get_device_name) [] {}")),
 # no-gpu
 ("no-gpu", tb(MR, "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver")),
 ("no-gpu", tb(MR, "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable")),
 # kv leak
 ("kv-cache-leak", tb(SCHED+["sglang/srt/managers/scheduler.py:check_memory"], "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=100, protected_size=0, self.max_total_num_tokens=200")),
 ("model-load-error", tb(MR+["sglang/srt/model_loader/loader.py:load_model","sglang/srt/model_loader/weight_utils.py:download_weights_from_hf"], "RuntimeError: Cannot find any model weights with `/models/Qwen3-8B`")),
 ("model-load-error", tb(MR+["sglang/srt/hf_transformers_utils.py:get_config","huggingface_hub/utils/_validators.py:validate_repo_id"], "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/data/models/x'. Use `repo_type` argument if needed.")),
 ("model-load-error", tb(MR+["sglang/srt/hf_transformers_utils.py:get_tokenizer","transformers/models/auto/tokenization_auto.py:from_pretrained"], "OSError: Can't load tokenizer for '/models/x'. If you were trying to load it from 'https://huggingface.co/models', make sure you don't have a local directory with the same name.")),
 ("model-load-error", tb(MR+["sglang/srt/hf_transformers_utils.py:get_config"], "ValueError: The repository for /models/x contains custom code which must be executed to correctly load the model. You can inspect the repository content at https://hf.co//models/x. Please pass the argument `trust_remote_code=True` to allow custom code to be run.")),
 ("model-load-error", tb(MR+["sglang/srt/model_loader/loader.py:load_model"], "FileNotFoundError: [Errno 2] No such file or directory: '/models/x/model.safetensors.index.json'")),
 ("other", tb(["sglang/launch_server.py:<module>","sglang/srt/server_args.py:__post_init__","sglang/srt/server_args.py:_handle_speculative_decoding"], "TypeError: '>' not supported between instances of 'NoneType' and 'int'")),
 ("nccl-error", tb(FWD+["torch/distributed/distributed_c10d.py:barrier"], "torch.distributed.DistStoreError: Socket Timeout")),
 ("nccl-error", tb(FWD+["sglang/srt/disaggregation/nixl/conn.py:poll"], "RuntimeError: NIXL_ERR_BACKEND: transfer failed")),
 ("nccl-error", "[ERROR] RCCL error: unhandled system error"),
 ("port-in-use", "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='/m')\n[2026-01-01 10:00:02] Exception in run_scheduler_process: zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:30001')"),

 ("model-load-error", tb(MR+["sglang/srt/model_loader/loader.py:load_model","sglang/srt/models/qwen2_vl.py:load_weights"], "KeyError: 'visual.merger.mlp.0.weight_scale_inv'")),
 ("model-load-error", tb(MR+["sglang/srt/model_loader/loader.py:load_model","torch/nn/modules/module.py:load_state_dict"], "RuntimeError: Error(s) in loading state_dict for EagleDraft: Missing key(s) in state_dict: \"fc.weight\"")),
 ("model-load-error", tb(MR+["sglang/srt/model_loader/weight_utils.py:pt_weights_iterator","torch/serialization.py:load"], "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two options")),
 ("port-in-use", "RuntimeError: Failed to start the metrics server: port 30001 already in use"),
]

LOAD = MR + ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/model_loader/loader.py:load_model"]
LW = LOAD + ["sglang/srt/models/qwen3.py:load_weights"]
ARGS = ["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:prepare_server_args", "sglang/srt/server_args.py:from_cli_args", "sglang/srt/server_args.py:__post_init__"]
CFG = SCHED + ["sglang/srt/configs/model_config.py:from_server_args", "sglang/srt/configs/model_config.py:__init__"]
TOK = ["sglang/srt/managers/tokenizer_manager.py:__init__", "sglang/srt/utils/hf_transformers_utils.py:get_tokenizer"]
DIST = MR + ["sglang/srt/model_executor/model_runner.py:init_torch_distributed", "sglang/srt/distributed/parallel_state.py:init_distributed_environment", "torch/distributed/distributed_c10d.py:init_process_group"]
# Written from SGLang 0.5.16's own raise sites (model_loader/, layers/quantization/, configs/,
# utils/hf_transformers/, server_args.py and arg_groups/, distributed/) and torch's c10d/elastic
# wordings, with near misses that must keep their category.
PHRASINGS += [
 # Refusals SGLang's loader and quantization code raise while the model loads (model_loader/loader.py,
 # layers/quantization/*): the options are refused, not the checkpoint. The loader's catch-all must not take them.
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_get_quantization_config"], "ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 89. Current capability: 86.")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_get_quantization_config"], "ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_load_weights"], "ValueError: Prequant BitsAndBytes models with TP is not supported.Please try with PP.")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_load_weights"], "AttributeError: Model Qwen3ForCausalLM does not support BitsAndBytes quantization yet.")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/models/llama.py:__init__","sglang/srt/layers/quantization/fp8.py:create_weights"], "ValueError: Weight output_partition_size = 576 is not divisible by weight quantization block_n = 128.")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/models/deepseek_v2.py:__init__","sglang/srt/layers/quantization/fp8.py:__init__"], "AssertionError: cutlass_fp8 MoE requires SM90, SM100, or SM120 GPUs")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/layers/quantization/mxfp4.py:apply"], "AssertionError: Expert parallel is not supported when using triton kernels")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/layers/quantization/compressed_tensors/compressed_tensors.py:get_moe_scheme"], "NotImplementedError: The W8A8Int8 Fused MoE scheme is implemented only for NPU for now.")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/layers/quantization/w8a8_int8.py:process_weights_after_loading"], "AssertionError: W8A8Int8LinearMethod on CPU only works on AMX or Arm64")),
 ("unsupported-config", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/layers/quantization/fp8.py:apply"], "NotImplementedError: Unsupported runner backend: flashinfer_cutedsl")),
 # ...and the near misses: an architecture this SGLang lacks is a model-load error, even worded "not supported"
 ("model-load-error", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/model_loader/utils.py:get_model_architecture"], "ValueError: Model architectures ['Glm4vMoeForConditionalGeneration'] are not supported for now. Supported architectures: dict_keys(['LlamaForCausalLM'])")),
 ("model-load-error", tb(LOAD+["sglang/srt/model_loader/utils.py:resolve_transformers_arch"], "ValueError: Qwen3NextForCausalLM has no SGlang implementation and the Transformers implementation is not compatible with SGLang.")),
 ("model-load-error", tb(LW, "KeyError: 'model.layers.0.mlp.experts.w13_weight_scale'")),
 # ...and a package the loader asks for is a missing dependency, not a broken checkpoint
 ("missing-dependency", tb(LOAD+["sglang/srt/model_loader/loader.py:_get_gguf_weights_map"], "ImportError: Please install gguf via `pip install gguf` to use gguf quantizer.")),
 ("missing-dependency", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/layers/quantization/mxfp4.py:dequant_mxfp4"], "ImportError: The package `amd-quark` is required to use MX-FP4 models. Please install it with `pip install amd-quark`.")),
 ("missing-dependency", tb(TOK+["sglang/srt/utils/hf_transformers/tokenizer.py:_ensure_fastokens_patched"], "ImportError: The fastokens package is required when --tokenizer-backend=fastokens. Install it with: pip install 'sglang[fastokens]'")),
 # bare asserts: where they were raised decides
 ("unsupported-config", tb(ARGS+["sglang/srt/server_args.py:_handle_data_parallelism"], "AssertionError")),
 ("unsupported-config", tb(ARGS+["sglang/srt/arg_groups/speculative_hook.py:handle_speculative_decoding","sglang/srt/arg_groups/speculative_hook.py:_handle_eagle_family"], "AssertionError")),
 ("model-load-error", tb(LW+["sglang/srt/layers/linear.py:weight_loader"], "AssertionError")),
 ("model-load-error", tb(LOAD+["sglang/srt/model_loader/weight_utils.py:default_weight_loader"], "AssertionError")),
 ("other", tb(FWD+["sglang/srt/managers/schedule_batch.py:prepare_for_extend"], "AssertionError")),
 # SGLang's argument hooks moved to arg_groups/: a refusal there is still an argument check, even with server_args.py trimmed
 ("unsupported-config", tb(["sglang/srt/arg_groups/speculative_hook.py:_handle_dspark"], "ValueError: DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1), got 1.")),
 ("unsupported-config", tb(["sglang/srt/arg_groups/overrides.py:_moe_runner_backend_quant_constraints"], "ValueError: --quantization nvfp4_online is supported only on NVIDIA Blackwell SM100/SM103 GPUs.")),
 ("other", tb(ARGS+["sglang/srt/arg_groups/overrides.py:run_post_process_pass"], "TypeError: post-process pass _deepseek_family_overrides must return a dict, got NoneType")),
 # other refusal wordings of the attention/parallel code
 ("unsupported-config", tb(MR+["sglang/srt/model_executor/model_runner.py:init_attention_backend","sglang/srt/layers/attention/attention_registry.py:create_trtllm_mla_backend"], "ValueError: trtllm_mla backend can only be used with MLA models.")),
 ("unsupported-config", tb(MR+["sglang/srt/layers/attention/vision.py:__init__"], "Exception: VisionFlash3Attention is only available for cuda or musa")),
 ("unsupported-config", tb(FWD+["sglang/srt/layers/attention/flashattention_backend.py:_init_sliding_window_attn_spec_metadata"], "AssertionError: FlashAttention backend doesn't support topk > 1 speculative decoding with sliding window attention")),
 ("unsupported-config", tb(MR+["sglang/srt/distributed/parallel_state.py:initialize_model_parallel"], "RuntimeError: world_size (8) is not equal to tensor_model_parallel_size (4) x pipeline_model_parallel_size (1)")),
 ("unsupported-config", tb(MR+["sglang/srt/model_executor/pool_configurator.py:calculate_pool_sizes"], "AssertionError: page_size must be multiple of 128 for compressed attention")),
 # the checkpoint's config/tokenizer/processor not readable (configs/, hf_transformers utils, transformers' from_pretrained)
 ("model-load-error", tb(CFG+["sglang/srt/configs/model_config.py:get_total_num_kv_heads"], "RuntimeError: Couldn't determine number of kv heads")),
 ("model-load-error", tb(CFG+["sglang/srt/configs/model_config.py:_get_and_verify_dtype"], "ValueError: Unknown dtype: float8_e4m3")),
 ("model-load-error", tb(CFG+["sglang/srt/utils/hf_transformers_utils.py:get_config","transformers/models/auto/configuration_auto.py:from_pretrained","transformers/configuration_utils.py:get_config_dict","transformers/configuration_utils.py:_get_config_dict","transformers/configuration_utils.py:_dict_from_json_file","json/decoder.py:raw_decode"], "json.decoder.JSONDecodeError: Expecting ',' delimiter: line 20 column 5 (char 512)")),
 ("model-load-error", tb(TOK+["transformers/models/auto/tokenization_auto.py:from_pretrained","transformers/tokenization_utils_base.py:_from_pretrained","tokenizers/__init__.py:from_file"], "Exception: data did not match any variant of untagged enum ModelWrapper at line 757443 column 3")),
 ("model-load-error", tb(["sglang/srt/managers/tokenizer_manager.py:__init__","sglang/srt/utils/hf_transformers_utils.py:get_processor","sglang/srt/utils/hf_transformers/processor.py:_build_processor_manually"], "ValueError: Cannot determine processor class for /models/x")),
 ("model-load-error", tb(CFG+["sglang/srt/utils/hf_transformers_utils.py:get_config","transformers/models/auto/configuration_auto.py:from_pretrained"], "OSError: Incorrect path_or_model_id: '/models/x'. Please provide either the path to a local folder or the repo_id of a model on the Hub.")),
 # ...near misses: a refused option, a missing package, a Python bug in the same code keep their categories
 ("unsupported-config", tb(CFG+["sglang/srt/configs/model_config.py:_verify_quantization"], "ValueError: Quantization method specified in the model config (fp8) does not match the quantization method specified in the `quantization` argument (awq).")),
 ("missing-dependency", tb(TOK+["transformers/models/auto/tokenization_auto.py:from_pretrained","transformers/tokenization_utils_base.py:_from_pretrained"], "ModuleNotFoundError: No module named 'tiktoken'")),
 ("other", tb(CFG+["sglang/srt/configs/deepseek_ocr.py:get_image_size"], "TypeError: Unsupported image type: <class 'list'>")),
 # communication exception types: the type is the evidence (torch.distributed, elastic)
 ("nccl-error", "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"),
 ("nccl-error", "RendezvousTimeoutError"),
 ("nccl-error", tb(["torch/distributed/elastic/agent/server/api.py:run","torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:next_rendezvous"], "torch.distributed.elastic.rendezvous.api.RendezvousClosedError")),
 ("nccl-error", tb(DIST+["torch/distributed/rendezvous.py:_create_c10d_store"], "torch.distributed.DistNetworkError: The client socket has failed to connect to [node-1]:5000 (errno: 110 - Connection timed out).")),
 ("nccl-error", tb(DIST, "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 7/8 clients joined.")),
 ("nccl-error", tb(FWD+["torch/distributed/distributed_c10d.py:all_reduce"], "torch.distributed.DistBackendError: [c10d] recvValue failed on SocketImpl(fd=5, addr=[::1]:4000, remote=[::1]:29500): Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?")),
 ("nccl-error", "[E1201 10:00:00 TCPStore.cpp:1050] [c10d] TCP client failed to connect/validate to host 10.0.0.1:29500 - timed out (try=0, timeout=600000ms): The client socket has timed out after 600000ms while trying to connect to (10.0.0.1, 29500)."),
 ("nccl-error", tb(FWD+["torch/distributed/distributed_c10d.py:all_reduce"], "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5\nncclInternalError: Internal check failed.\nLast error:\nMessage truncated : received 4096 bytes instead of 256")),
 ("nccl-error", "node1:1234:5678 [3] transport/net_ib.cc:2000 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1 remoteGid ::ffff:10.0.0.2 hca mlx5_0"),
 ("nccl-error", "[2026-01-01 10:00:00 TP0] Init torch distributed begin.\nnode1:1:2 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.1.1.1<38017> failed : Software caused connection abort\n[2026-01-01 10:05:00] Rank 0 scheduler died during initialization (exit code: -6). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer."),
 # ...near misses: a CUDA error a collective or its watchdog reports is that CUDA error
 ("illegal-memory-access", "[rank0]:[E1201 10:00:00.000 ProcessGroupNCCL.cpp:1944] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered"),
 ("illegal-memory-access", tb(FWD+["torch/distributed/distributed_c10d.py:all_reduce"], "torch.distributed.DistBackendError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call")),
 ("other", "[2026-01-01 10:00:00 TP0] Load weight end. mem usage=15.3 GB\n[2026-01-01 10:05:00] Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer."),
 # frameless plain errors: other, but never over what the words say
 ("other", "KeyError: 'req-7f3a'"),
 ("other", "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"),
 ("model-load-error", "ValueError: The checkpoint you are trying to load has model type `glm5_next` but Transformers does not recognize this architecture."),
 ("cuda-oom", "RuntimeError: CUDA error: out of memory"),
]
HF = CFG + ["sglang/srt/utils/hf_transformers_utils.py:get_config","transformers/models/auto/configuration_auto.py:from_pretrained","transformers/configuration_utils.py:get_config_dict","transformers/configuration_utils.py:_get_config_dict"]
PHRASINGS += [
 # model loading through the hub, transformers and tokenizers (their own wordings)
 ("model-load-error", tb(HF+["transformers/utils/hub.py:cached_file"], "PermissionError: [Errno 13] Permission denied: '/models/x/config.json'")),
 ("model-load-error", tb(LOAD+["sglang/srt/model_loader/weight_utils.py:download_weights_from_hf","huggingface_hub/_snapshot_download.py:snapshot_download"], "OSError: [Errno 28] No space left on device")),
 ("model-load-error", tb(HF+["transformers/utils/hub.py:cached_file"], "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached files and it looks like Qwen/Qwen3-8B is not the path to a directory containing a file named config.json.")),
 ("model-load-error", tb(HF+["huggingface_hub/utils/_http.py:hf_raise_for_status"], "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/meta-llama/Llama-3-8B")),
 ("model-load-error", tb(HF+["requests/adapters.py:send"], "requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /Qwen/Qwen3-8B/resolve/main/config.json\"))")),
 ("model-load-error", tb(TOK+["transformers/models/auto/image_processing_auto.py:from_pretrained"], "ValueError: Unrecognized image processor in /models/x. Should have a `image_processor_type` key in its preprocessor_config.json of config.json")),
 ("model-load-error", tb(HF, "OSError: It looks like the config file at '/models/x/config.json' is not a valid JSON file.")),
 ("model-load-error", tb(LOAD+["sglang/srt/model_loader/loader.py:_prepare_weights","huggingface_hub/_snapshot_download.py:snapshot_download"], "OSError: /models/x does not appear to have files named ('model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'). Checkout 'https://huggingface.co//models/x/tree/main' for available files.")),
 ("model-load-error", "Exception: data did not match any variant of untagged enum PyPreTokenizerTypeWrapper at line 960 column 3"),
 ("model-load-error", tb(LOAD+["sglang/srt/model_loader/weight_utils.py:safetensors_weights_iterator","safetensors/torch.py:load_file"], "safetensors_rust.SafetensorError: Error while deserializing header: InvalidHeaderDeserialization")),
 ("model-load-error", tb(LW, "KeyError: 'model.layers.0.self_attn.q_proj.weight'")),
 ("model-load-error", "KeyError: 'model.layers.61.mlp.experts.255.down_proj.weight_scale_inv'"),
 ("model-load-error", tb(LW, "RuntimeError: Error(s) in loading state_dict for ParallelLMHead:\n\tsize mismatch for weight: copying a param with shape torch.Size([151936, 4096]) from checkpoint, the shape in current model is torch.Size([152064, 4096]).")),
 ("model-load-error", tb(LW+["sglang/srt/layers/linear.py:weight_loader"], "RuntimeError: narrow(): length must be non-negative.")),
 ("model-load-error", tb(LW+["sglang/srt/layers/moe/fused_moe_triton/layer.py:weight_loader"], "ValueError: expert_id 256 is out of range for 256 experts")),
 ("model-load-error", tb(LOAD+["sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/models/qwen3_moe.py:__init__","transformers/configuration_utils.py:__getattribute__"], "AttributeError: 'Qwen3MoeConfig' object has no attribute 'moe_intermediate_size'")),
 ("model-load-error", tb(MR+["sglang/srt/model_executor/model_runner.py:load_model","sglang/srt/model_loader/loader.py:load_model","sglang/srt/model_loader/loader.py:_initialize_model"], "TypeError: Qwen2ForCausalLM.__init__() got an unexpected keyword argument 'prefix'")),
 # ...near miss: the server's own warm-up request through requests stays the warm-up's echo
 ("other", tb(["sglang/srt/entrypoints/http_server.py:_wait_and_warmup","requests/adapters.py:send"], "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries exceeded with url: /generate (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111] Connection refused'))")),
 ("model-load-error", tb(MR+["sglang/srt/model_loader/loader.py:load_model","sglang/srt/model_loader/weight_utils.py:download_weights_from_hf","huggingface_hub/_snapshot_download.py:snapshot_download"], "OSError: /models/kimi-k2 does not appear to have a file named config.json. Checkout 'https://huggingface.co//models/kimi-k2/tree/None' for available files.")),
]
AR2 = FWD + ["sglang/srt/distributed/communication_op.py:tensor_model_parallel_all_reduce", "torch/distributed/distributed_c10d.py:all_reduce"]
PHRASINGS += [
 # torch's c10d / gloo / elastic and NCCL's own wordings (from torch's sources and the strings of libtorch)
 ("nccl-error", "[W1201 10:00:00.000000 socket.cpp:663] [c10d] The client socket cannot be initialized to connect to [localhost]:29500 (errno: 97 - Address family not supported by protocol)."),
 ("nccl-error", "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600080 milliseconds before timing out."),
 ("illegal-memory-access", "terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: an illegal memory access was encountered"),
 ("nccl-error", "[rank0]:[E1201 10:00:00 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives."),
 ("nccl-error", tb(AR2, "torch.distributed.DistStoreError: Stop_waiting response is expected")),
 ("nccl-error", tb(AR2, "RuntimeError: Socket Timeout")),
 ("nccl-error", tb(DIST, "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to find address for: eth0")),
 ("nccl-error", tb(AR2, "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, remote process exited or there was a network error, NCCL version 2.26.2\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\nLast error:\nNET/IB: Got completion from peer 10.0.0.2<54321> with status=12 opcode=0 len=0 vendor err 129 (Recv)")),
 ("nccl-error", tb(DIST, "torch.distributed.DistNetworkError: Connection reset by peer")),
 ("illegal-memory-access", tb(FWD+["sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch","deep_ep/buffer.py:low_latency_dispatch"], "RuntimeError: Failed: CUDA error /sgl-workspace/DeepEP/csrc/kernels/internode_ll.cu:341 'unspecified launch failure'")),
 ("nccl-error", "/sgl-workspace/nvshmem/src/host/init/init.cu:1001: non-zero status: 7 nvshmem detect topo failed \n/sgl-workspace/nvshmem/src/host/init/init.cu:nvshmemi_check_state_and_init:1080: nvshmem initialization failed, exiting"),
 ("nccl-error", "WARNING: NVSHMEM_IB_ENABLE_IBGDA is set but IBGDA is not supported\nnvshmem initialization failed, exiting"),
 ("nccl-error", tb(MR+["sglang/srt/distributed/parallel_state.py:initialize_model_parallel","sglang/srt/distributed/parallel_state.py:init_model_parallel_group","torch/distributed/distributed_c10d.py:new_group"], "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\nncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\nLast error:\nError: failed to extend /dev/shm/nccl-Kq1bY9 to 9637892 bytes")),
 ("nccl-error", "ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR expected, but not set"),
 ("nccl-error", "torch.distributed.elastic.rendezvous.etcd_rendezvous.EtcdRendezvousRetryableFailure: Rendezvous state transition no longer possible. Must re-enter."),
 ("nccl-error", tb(["torch/distributed/elastic/agent/server/api.py:run","torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:next_rendezvous","torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py:get_state","torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py:_call_store"], "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.")),
]
PHRASINGS += [
 # options refused outside server_args.py: Engine kwargs, SGLANG_* environment flags
 ("unsupported-config", tb(["myscript.py:<module>","sglang/srt/entrypoints/engine.py:__init__"], "TypeError: ServerArgs.__init__() got an unexpected keyword argument 'enable_dp_attn'")),
 ("unsupported-config", tb(SCHED+["sglang/srt/environ.py:get","sglang/srt/environ.py:parse"], 'ValueError: "yes please" is not a valid boolean value')),
 # ...near miss: another class's unexpected keyword is a code mismatch, not an option
 ("other", tb(FWD+["sglang/srt/function_call/function_call_parser.py:__init__"], "TypeError: Glm45Detector.__init__() got an unexpected keyword argument 'continue_final_message'")),
]
PHRASINGS += [
 # errors of any library type raised through SGLang code, no family: other (last resort)
 ("other", tb(["sglang/srt/managers/tokenizer_manager.py:handle_loop","zmq/sugar/socket.py:recv_pyobj"], "zmq.error.ZMQError: Operation cannot be accomplished in current state")),
 ("other", tb(["sglang/srt/managers/tokenizer_manager.py:handle_loop"], "ConnectionResetError: [Errno 104] Connection reset by peer")),
 ("other", tb(FWD+["sglang/srt/constrained/outlines_backend.py:init_value_impl","outlines/fsm/guide.py:__init__"], "interegular.patterns.InvalidSyntax: ('Unexpected character', 5)")),
 ("other", tb(["sglang/srt/managers/detokenizer_manager.py:event_loop","tokenizers/decoders.py:decode"], "OverflowError: out of range integral type conversion attempted")),
 ("other", "OverflowError: out of range integral type conversion attempted"),
 ("other", "RuntimeError: Event loop is closed"),
 # ...near miss: a CUDA fault printed while processing results is that fault
 ("illegal-memory-access", tb(["sglang/srt/managers/scheduler.py:event_loop_overlap","sglang/srt/managers/scheduler.py:process_batch_result"], "RuntimeError: CUDA error: an illegal memory access was encountered")),
]
PHRASINGS += [
 # a model constructor (frames trimmed to it) reading a field its config lacks; a dotted name is a weight
 ("model-load-error", tb(["sglang/srt/models/qwen3_moe.py:__init__","sglang/srt/models/qwen3_moe.py:__init__"], "KeyError: 'rope_theta'")),
 ("model-load-error", tb(["sglang/srt/models/qwen3.py:load_weights"], "KeyError: 'lm_head.weight'")),
 ("unsupported-config", tb(["sglang/srt/models/deepseek_v2.py:__init__","sglang/srt/layers/moe/ep_moe/layer.py:__init__"], "AssertionError: num_experts (256) must be divisible by ep_size (3)")),
 ("model-load-error", tb(MR+["sglang/srt/model_loader/loader.py:load_model"], "ValueError: GGUF model with architecture qwen3moe is not supported yet.")),
 # ...near miss: a KeyError on a request id in the scheduler is a code bug
 ("other", tb(FWD+["sglang/srt/managers/scheduler.py:process_batch_result"], "KeyError: 'a1b2c3d4'")),
]
PHRASINGS += [
 # the phase decides a plain error whose loader frames were trimmed; a Python type bug stays a bug
 ("model-load-error", "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n" + tb(["sglang/srt/layers/linear.py:weight_loader"], "RuntimeError: start (0) + length (2048) exceeds dimension size (1024).")),
 ("model-load-error", "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n" + tb(["sglang/srt/layers/vocab_parallel_embedding.py:weight_loader"], "AssertionError: loaded_weight.shape[output_dim]=151936, org_vocab_size=152064")),
 ("other", "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n" + tb(["sglang/srt/layers/rotary_embedding.py:__init__"], "TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'")),
 ("cuda-oom", "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n" + tb(["sglang/srt/layers/linear.py:create_weights"], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.")),
 ("unsupported-config", "[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n" + tb(["sglang/srt/layers/quantization/fp8.py:create_weights"], "ValueError: Weight output_partition_size = 576 is not divisible by weight quantization block_n = 128.")),
]
PHRASINGS += [
 # argument checks that name a transport or backend are refusals (server_args.py, arg_groups/, 0.4.x and 0.5.x)
 ("unsupported-config", tb(ARGS, "AssertionError: DeepEP MoE `auto` mode is not supported with DP Attention.")),
 ("unsupported-config", tb(ARGS+["sglang/srt/server_args.py:_handle_elastic_ep"], "AssertionError: Elastic EP scale-up requires --moe-a2a-backend nixl (got moe_a2a_backend=deepep).")),
 ("unsupported-config", tb(ARGS+["sglang/srt/server_args.py:_handle_model_specific_adjustments"], "ValueError: --enable-dsa-cache-layer-split currently only supports the mooncake transfer backend (mooncake / mooncake_tcp)")),
 ("unsupported-config", tb(ARGS+["sglang/srt/arg_groups/pd_disaggregation_hook.py:handle_pd_disaggregation"], "ValueError: SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', got 'ascend'.")),
 # ...near misses: a package the check asks for, a port it cannot get, keep theirs
 ("missing-dependency", tb(ARGS+["sglang/srt/server_args.py:_handle_ssl_validation"], "ValueError: --enable-http2 requires the 'granian' package. Install it with: pip install \"sglang[http2]\"")),
 ("port-in-use", tb(ARGS+["sglang/srt/server_args.py:_handle_ports"], "ValueError: nccl_port at 31000 is not available in 30 seconds.")),
 ("nccl-error", tb(FWD+["sglang/srt/layers/moe/token_dispatcher/deepep.py:dispatch"], "RuntimeError: DeepEP error: timeout (dispatch CPU)")),
]
PHRASINGS += [
 # a transport named in a refusal is an option it cannot serve (layers/moe, disaggregation/)
 ("unsupported-config", tb(FWD+["sglang/srt/disaggregation/nixl/conn.py:maybe_send_extra"], "RuntimeError: PD Disaggregation via NIXL does NOT support mamba hybrid models yet.")),
 ("unsupported-config", tb(FWD+["sglang/srt/layers/moe/ep_moe/layer.py:run_moe_core"], "NotImplementedError: Unquantized DeepEP MoE currently supports low_latency mode only")),
 ("unsupported-config", tb(MR+["sglang/srt/layers/moe/ep_moe/layer.py:__init__"], "AssertionError: DeepEP normal mode requires deep_gemm")),
 ("unsupported-config", tb(FWD+["sglang/srt/layers/moe/topk.py:select_experts"], "AssertionError: num_token_non_padded is not yet supported in custom_routing_function")),
 ("unsupported-config", tb(FWD+["sglang/srt/layers/moe/cutlass_moe.py:cutlass_fused_experts_fp8"], "AssertionError: Only support fp8 blockscale for now")),
 # ...near misses: a transfer that failed is a communication failure; an errno's "not supported" is not a refusal
 ("nccl-error", tb(FWD+["sglang/srt/disaggregation/nixl/conn.py:transfer_worker"], "RuntimeError: NIXL transfer encountered ERR room=1234")),
 ("nccl-error", "WARNING: NVSHMEM_IB_ENABLE_IBGDA is set but IBGDA is not supported\nnvshmem initialization failed, exiting"),
 ("nccl-error", "[W1201 10:00:00.000000 socket.cpp:663] [c10d] The client socket cannot be initialized to connect to [localhost]:29500 (errno: 97 - Address family not supported by protocol)."),
]
PHRASINGS += [
 # SGLang's own port checks (utils/network.py, --strict-ports)
 ("port-in-use", "ValueError: nccl_port is used by a process already. process.name()='python3' process.cmdline()=['python3', '-m', 'sglang.launch_server']"),
 ("port-in-use", "RuntimeError: HTTP port 30000 is unavailable and --strict-ports is enabled. Either use a different port or disable --strict-ports."),
 ("port-in-use", "RuntimeError: Port is already in use. dist_init_port=None port_base=30000 detokenizer_port=30001 nccl_port=30002 scheduler_input_port=30003"),
]
PHRASINGS += [
 # SGLang's memory-pool checks in their 0.5.16 wordings (mem_cache/, scheduler's idle check, model_runner)
 ("kv-cache-leak", tb(SCHED+["sglang/srt/managers/scheduler.py:event_loop_normal","sglang/srt/managers/scheduler_runtime_checker_mixin.py:check_memory"], "AssertionError: Full Pool Mem Leak Detected! full_available_size=100, full_evictable_size=0")),
 ("kv-cache-leak", tb(SCHED+["sglang/srt/managers/scheduler_runtime_checker_mixin.py:check_memory"], "ValueError: req_to_token_pool memory leak detected!available_size=10, total_size=20")),
 ("kv-pool-too-small", tb(MR+["sglang/srt/model_executor/model_runner.py:init_memory_pool"], "AssertionError: Memory pool size is too small")),
 ("kv-pool-too-small", tb(FWD+["sglang/srt/managers/schedule_batch.py:retract_decode"], "ValueError: Out of memory even after retracting all other requests in the decode batch. Try setting --max-running-requests lower.")),
 ("kv-pool-too-small", tb(["sglang/srt/managers/tokenizer_manager.py:_validate_one_request"], "ValueError: Request length is longer than the KV cache pool size or the max context length. Tokens: 300000")),
]
PHRASINGS += [
 # native deaths in the shell's and launchers' words; a CUDA "illegal instruction" stays a kernel fault
 ("fatal-signal", "Illegal instruction (core dumped)"),
 ("fatal-signal", "Aborted (core dumped)"),
 ("fatal-signal", "corrupted double-linked list\nAborted (core dumped)"),
 ("fatal-signal", "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV"),
 ("illegal-memory-access", tb(FWD, "RuntimeError: CUDA error: an illegal instruction was encountered")),
]
PHRASINGS += [
 # torchrun's failure summary for a worker killed by a signal (torch elastic's ChildFailedError)
 ("fatal-signal", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n============================================================\nsglang.launch_server FAILED\n------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n  time      : 2026-01-01_10:00:00\n  host      : node1\n  rank      : 0 (local_rank: 0)\n  exitcode  : -11 (pid: 4242)\n  error_file: <N/A>\n  traceback : Signal 11 (SIGSEGV) received by PID 4242"),
]
PHRASINGS += [
 # a kernel library that has no kernel for this GPU, named in the message or on the stack
 ("kernel-compile-error", "RuntimeError: FlashInfer requires GPUs with sm75 or higher"),
 ("kernel-compile-error", tb(FWD+["flashinfer/decode.py:run"], "RuntimeError: FlashInfer requires GPUs with sm75 or higher")),
 ("kernel-compile-error", tb(FWD+["deep_gemm/jit_kernels/impls/smxx_fp8_gemm_1d2d.py:fp8_gemm_nt"], "RuntimeError: Assertion error (csrc/apis/gemm.hpp:40): arch_major == 9 or arch_major == 10")),
 ("kernel-compile-error", tb(FWD+["triton/runtime/jit.py:run","triton/compiler/compiler.py:compile"], "triton.compiler.errors.CompilationError: at 32:12:\n    acc = tl.dot(a, b)\nAssertionError()")),
 # ...near miss: SGLang's own quantization check on the GPU, raised while loading, is a refused option
 ("unsupported-config", tb(MR+["sglang/srt/model_loader/loader.py:load_model","sglang/srt/model_loader/loader.py:_initialize_model","sglang/srt/layers/quantization/fp8.py:__init__"], "AssertionError: cutlass_fp8 MoE requires SM90, SM100, or SM120 GPUs")),
]

# Known limits: phrasings that still miss (kept out of the gate, listed so they are not forgotten).
LIMITS: set[str] = set()


@pytest.mark.parametrize("category,text", [(c, t) for c, t in PHRASINGS
                                           if not any(limit in t for limit in LIMITS)],
                         ids=lambda value: value if len(value) < 30 else None)
def test_phrasing_gets_its_category(category, text):
    diagnoses = diagnose_lines(text.splitlines(), "<phrasing>", RULES, None)
    assert diagnoses, "nothing diagnosed"
    assert diagnoses[0].match.category == category, diagnoses[0].match.diagnosis


def test_a_crash_line_naming_its_error_inline_decides_over_the_bare_death():
    log = ["[2026-01-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB",
           "[2026-01-01 10:00:02 TP0] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. "
           "Tried to allocate 2.00 GiB.",
           "[2026-01-01 10:00:03] Received sigquit from a child process. It usually means the child failed."]
    [diagnosis] = diagnose_lines(log, "<log>", RULES, None)
    assert diagnosis.match.category == "cuda-oom"
    # the assembler takes the announced error as the crash (a live daemon sees it too)
    assert (diagnosis.crash.exception, diagnosis.crash.prefix) == ("torch.OutOfMemoryError", "Scheduler hit an exception")


def test_the_first_error_line_beats_another_ranks_cut_off_traceback():
    log = ["NameError: name 'deep_gemm' is not defined", "",
           "[2026-09-21 06:49:24 TP2] Scheduler hit an exception: Traceback (most recent call last):",
           '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 400, in capture',
           "    self.capture_one_batch_size(bs, forward)"]
    [diagnosis] = diagnose_lines(log, "<log>", RULES, None)
    assert diagnosis.match.category == "other"
    assert diagnosis.crash.exception == "NameError"


def test_other_ranks_collective_timeouts_after_a_ranks_own_error_are_its_echo():
    log = ["[2026-01-01 10:00:00] The server is fired up and ready to roll!",
           "[2026-01-01 10:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
           '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/schedule_batch.py", line 300, in filter_batch',
           "    keep = [i for i in keep_indices if self.reqs[i].finished() is False]",
           "IndexError: list index out of range", "",
           "[rank1]:[E1201 10:15:00.000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 "
           "milliseconds before timing out.",
           "[2026-01-01 10:15:01] Received sigquit from a child process. It usually means the child failed."]
    [diagnosis] = diagnose_lines(log, "<log>", RULES, None)
    assert (diagnosis.match.category, diagnosis.crash.exception) == ("other", "IndexError")
    assert len(diagnosis.crashes) == 2  # the timeout is kept in the incident, it just does not decide


def test_a_collective_timeout_that_comes_first_still_decides():
    log = ["[rank1]:[E1201 10:15:00.000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 "
           "milliseconds before timing out.",
           "[2026-01-01 10:15:01] Received sigquit from a child process. It usually means the child failed."]
    [diagnosis] = diagnose_lines(log, "<log>", RULES, None)
    assert diagnosis.match.category == "nccl-error"
