# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-7.toml adds, in the words of SGLang's own raising
code (sglang/srt in 0.5.9 and 0.5.23), not of a corpus report. Where each phrasing comes from:

- GPU-generation gates: srt/mem_cache/deepseek_v4_memory_pool.py (select_dsv4_kv_layout: `the V4.1
  KV cache layouts need an SM100 / SM103 GPU`, `… on HIP require gfx950 …`),
  srt/layers/attention/hip_flash_mla.py (resolve_hip_flashmla_backend: `… needs gfx950 …`), the MoE
  runners' `… needs a Blackwell (SM100+) device`;
- embedding-only model classes: srt/models/qwen2_rm.py, llama_embedding.py, gemma2_reward.py,
  roberta.py (forward's `assert get_embedding, "<Class> is only used for embedding|rerank"`);
- refusals worded as not yet / terse: srt/models/xllm.py (`… does not yet support EPLB …`),
  srt/layers/quantization/mxfp4.py (from_config: `Current platform {platform} not support mxfp4
  computation`), srt/layers/attention/hybrid_linear_attn_backend.py (`linear backend: {b} is not
  support for now`), srt/utils/offloader.py (`not yet support tp_size!=1`), srt/models/kimi_k25.py
  (`No support for _thw: {x}`);
- quantization scheme requirements: srt/layers/quantization/compressed_tensors/schemes/
  (compressed_tensors_w8a8_fp8_moe.py, compressed_tensors_w8a8_int8_moe.py, compressed_tensors_wNa16.py);
- incomplete checkpoint quantization configs: srt/layers/quantization/base_config.py
  (get_from_keys), modelopt_quant.py (from_config), compressed_tensors/utils.py (find_matched_target),
  fp8.py (create_weights), w8a8_int8.py (is_layer_skipped), quark/quark.py (from_config);
- activation dtypes a layer's kernel refuses: srt/layers/moe/fused_moe_triton/triton_kernels_moe.py
  (`hidden_states must be bfloat16`), srt/layers/quantization/marlin_utils.py (`The params dtype must
  be float16, but got …`), srt/layers/moe/token_dispatcher/moriep.py (`… expects BF16 activations …`);
- fields the model's config lacks: srt/layers/sparse_pooler.py (`Config X missing required '<f>'
  attribute`), srt/multimodal/processors/llava.py (`Required `vision_config.model_type` is not found
  in hf_config`), srt/models/deepseek_common/deepseek_weight_loader.py, srt/models/hunyuan.py;
- checks that open with a launch option's field name (ServerArgs' dataclass fields in 0.5.9 and
  0.5.23): srt/server_args.py (`max_loaded_loras should be greater than or equal to
  max_loras_per_batch`, `mamba_track_interval … must be greater than or equal to …`, `ep_size *
  moe_dp_size must be less than or equal to tp_size`), srt/managers/prefill_delayer.py,
  srt/managers/tokenizer_communicator_mixin.py (`dp_size must be 1 or dp attention must be enabled …`);
- PD disaggregation's check that both servers lay KV out alike: srt/disaggregation/common/conn.py
  (try_ensure_parallel_info: `Page size mismatch: prefill server has page_size=…, but decode server
  has page_size=…. Both servers must use the same --page-size value.`, the kv_cache_dtype one);
- HiCache's host pool not fitting in host memory: srt/mem_cache/hicache_auto_size.py (`No host memory
  is left for HiCache after the 10 GiB reserve …`), memory_pool_host.py (0.5.9: `The host memory
  should be larger than the device memory …`), pool_host/common.py (`Pinned host memory allocation
  of … returned a null pointer`);
- a platform package without its device: srt/utils/common.py (is_npu, get_xpu_memory_capacity).

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file. None of the phrasings is a corpus
report's text (checked against the development part; the held-out part is never read)."""

from phrasing_helpers import new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "source-families-7.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

INIT = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__",
        "sglang/srt/managers/tp_worker.py:__init__", "sglang/srt/model_executor/model_runner.py:__init__"]
LOAD = INIT + ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/model_loader/loader.py:load_model",
               "sglang/srt/model_loader/loader.py:_initialize_model", "sglang/srt/models/deepseek_v2.py:__init__"]
SERVE = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:event_loop_normal",
         "sglang/srt/managers/scheduler.py:run_batch", "sglang/srt/managers/tp_worker.py:forward_batch_generation",
         "sglang/srt/model_executor/model_runner.py:forward", "sglang/srt/model_executor/model_runner.py:forward_extend"]
ARGS = ["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:prepare_server_args", "sglang/srt/server_args.py:__post_init__"]
PD = ["sglang/srt/managers/scheduler.py:event_loop_normal_disagg_decode", "sglang/srt/disaggregation/decode.py:pop_preallocated",
      "sglang/srt/disaggregation/mooncake/conn.py:__init__", "sglang/srt/disaggregation/common/conn.py:try_ensure_parallel_info"]
POOL = INIT + ["sglang/srt/model_executor/model_runner.py:init_memory_pool"]
QUANT_INIT = INIT + ["sglang/srt/configs/model_config.py:_parse_quant_hf_config"]

PHRASINGS = [
    # launch-option-named-in-a-requirement (ServerArgs' field names, raised as AssertionError)
    ("unsupported-config", traceback_text(ARGS + ["sglang/srt/server_args.py:_handle_lora_settings"], "AssertionError: max_loaded_loras should be greater than or equal to max_loras_per_batch. max_loaded_loras=2, max_loras_per_batch=4")),
    ("unsupported-config", traceback_text(ARGS + ["sglang/srt/server_args.py:_handle_mamba_radix_cache"], "AssertionError: mamba_track_interval 128 must be greater than or equal to speculative_num_draft_tokens 256")),
    ("unsupported-config", "AssertionError: ep_size * moe_dp_size must be less than or equal to tp_size"),
    ("unsupported-config", traceback_text(INIT + ["sglang/srt/managers/prefill_delayer.py:__init__"], "AssertionError: To use PrefillDelayer, enable_dp_attention must be enabled.")),
    ("unsupported-config", traceback_text(["sglang/srt/entrypoints/http_server.py:update_weights_from_distributed", "sglang/srt/managers/tokenizer_communicator_mixin.py:init_weights_update_group"], "AssertionError: dp_size must be 1 or dp attention must be enabled for update weights from distributed")),
    # feature-needs-a-gpu-generation
    ("unsupported-config", traceback_text(POOL + ["sglang/srt/mem_cache/deepseek_v4_memory_pool.py:select_dsv4_kv_layout"], "AssertionError: the V4.1 KV cache layouts need an SM100 / SM103 GPU")),
    ("unsupported-config", traceback_text(INIT + ["sglang/srt/layers/attention/hip_flash_mla.py:resolve_hip_flashmla_backend"], "ValueError: SGLANG_HACK_FLASHMLA_BACKEND=aiter_sparse needs gfx950 (aiter's gluon sparse decode kernel); use auto or tilelang")),
    ("unsupported-config", traceback_text(SERVE + ["sglang/srt/layers/moe/fused_moe_triton/layer.py:forward"], "ValueError: sequence-parallel prefill dispatches the routed experts through the TRT-LLM FP4 MoE runner, which needs a Blackwell (SM100+) device; this device reports sm_90")),
    # model-serves-only-embedding
    ("unsupported-config", traceback_text(SERVE + ["sglang/srt/models/qwen2_rm.py:forward"], "AssertionError: Qwen2ForRewardModel is only used for embedding")),
    ("unsupported-config", traceback_text(SERVE + ["sglang/srt/models/llama_embedding.py:forward"], "AssertionError: LlamaEmbeddingModel / MistralModel is only used for embedding")),
    ("unsupported-config", traceback_text(SERVE + ["sglang/srt/models/roberta.py:forward"], "AssertionError: XLMRobertaForSequenceClassification is only used for rerank")),
    # refusal-not-yet-or-terse-support
    ("unsupported-config", traceback_text(QUANT_INIT + ["sglang/srt/layers/quantization/mxfp4.py:from_config"], "ValueError: Current platform hip not support mxfp4 computation")),
    ("unsupported-config", traceback_text(SERVE + ["sglang/srt/layers/attention/hybrid_linear_attn_backend.py:forward_extend"], "ValueError: linear backend: seg_la is not support for now")),
    ("unsupported-config", traceback_text(LOAD + ["sglang/srt/utils/offloader.py:__init__"], "AssertionError: not yet support tp_size!=1")),
    ("unsupported-config", traceback_text(LOAD + ["sglang/srt/models/hunyuan.py:__init__"], "RuntimeError: Not support attnention type")),
    ("unsupported-config", traceback_text(INIT + ["sglang/srt/models/xllm.py:_validate_mova_config"], "ValueError: Native serving does not yet support EPLB, non-trivial initial expert placement, or redundant experts")),
    ("unsupported-config", traceback_text(SERVE + ["sglang/srt/models/kimi_k25.py:forward"], "AssertionError: No support for _thw: (1, 28, 28)")),
    # quantization-scheme-requirement
    ("unsupported-config", traceback_text(LOAD + ["sglang/srt/layers/quantization/compressed_tensors/compressed_tensors.py:get_moe_method", "sglang/srt/layers/quantization/compressed_tensors/schemes/compressed_tensors_w8a8_fp8_moe.py:__init__"], "ValueError: For FP8 Fused MoE layer, we require either per tensor or channelwise, dynamic per token quantization.")),
    ("unsupported-config", traceback_text(LOAD + ["sglang/srt/layers/quantization/compressed_tensors/schemes/compressed_tensors_w8a8_int8_moe.py:__init__"], "ValueError: For INT8 Fused MoE layers, we require channelwise, dynamic per token quantization. Found static input scales.")),
    ("unsupported-config", traceback_text(LOAD + ["sglang/srt/layers/quantization/compressed_tensors/schemes/compressed_tensors_wNa16.py:__init__"], "ValueError: Marlin kernels require group quantization or channelwise quantization, but found no group size and strategy is not channelwise.")),
    ("unsupported-config", "ValueError: For INT8 Fused MoE layers, we require channelwise, dynamic per token quantization. Found per-group weights"),  # a paste cut to its last line
    # checkpoint-quantization-config-incomplete
    ("model-load-error", traceback_text(QUANT_INIT + ["sglang/srt/layers/quantization/modelopt_quant.py:from_config"], "ValueError: Cannot find 'quant_algo' in the model's quantization config. Expected either flat format (config.json) or nested format (hf_quant_config.json).")),
    ("model-load-error", traceback_text(QUANT_INIT + ["sglang/srt/layers/quantization/awq.py:from_config", "sglang/srt/layers/quantization/base_config.py:get_from_keys"], "ValueError: Cannot find any of ['w_bit', 'bits'] in the model's quantization config.")),
    ("model-load-error", traceback_text(LOAD + ["sglang/srt/layers/quantization/compressed_tensors/utils.py:find_matched_target"], "ValueError: Unable to find matching target for model.layers.3.mlp.experts.0.down_proj in the compressed-tensors config.")),
    ("model-load-error", traceback_text(LOAD + ["sglang/srt/layers/quantization/fp8.py:create_weights"], "ValueError: Found static activation scheme for checkpoint that was not serialized fp8.")),
    ("model-load-error", traceback_text(LOAD + ["sglang/srt/layers/quantization/w8a8_int8.py:is_layer_skipped"], "ValueError: Detected some but not all shards of model.layers.0.self_attn.qkv_proj are quantized. All shards of fused layers to have the same precision.")),
    # activation-dtype-refused-by-layer
    ("unsupported-config", traceback_text(SERVE + ["sglang/srt/models/gpt_oss.py:forward", "sglang/srt/layers/moe/fused_moe_triton/triton_kernels_moe.py:triton_kernel_fused_experts"], "AssertionError: hidden_states must be bfloat16")),
    ("unsupported-config", traceback_text(LOAD + ["sglang/srt/layers/quantization/marlin_utils.py:create_weights"], "ValueError: The params dtype must be float16, but got torch.bfloat16")),
    ("unsupported-config", traceback_text(SERVE + ["sglang/srt/layers/moe/token_dispatcher/moriep.py:dispatch_a"], "AssertionError: MORI EPv2 expects BF16 activations before transport quantization; hidden_states.dtype=torch.float16")),
    # model-config-lacks-a-field
    ("model-load-error", traceback_text(INIT + ["sglang/srt/layers/sparse_pooler.py:__init__"], "AttributeError: Config XLMRobertaConfig missing required 'vocab_size' attribute")),
    ("model-load-error", traceback_text(INIT + ["sglang/srt/managers/tokenizer_manager.py:__init__", "sglang/srt/multimodal/processors/llava.py:__init__"], "ValueError: Required `vision_config.model_type` is not found in hf_config: `LlavaConfig`")),
    ("model-load-error", traceback_text(INIT + ["sglang/srt/models/deepseek_common/deepseek_weight_loader.py:_initialize_nextn_conf"], "ValueError: num_nextn_predict_layers is not in the config")),
    ("model-load-error", traceback_text(INIT + ["sglang/srt/models/hunyuan.py:get_head_dim"], "ValueError: Missing head dim config, try set head_dim in config.json")),
    ("model-load-error", "AttributeError: Config Gemma3TextConfig missing required 'hidden_size' attribute"),  # a paste cut to its last line
    # prefill-and-decode-servers-differ
    ("unsupported-config", traceback_text(PD, "RuntimeError: Page size mismatch: prefill server has page_size=64, but decode server has page_size=1. Both servers must use the same --page-size value.")),
    ("unsupported-config", traceback_text(PD, "RuntimeError: KV cache dtype mismatch: prefill server has kv_cache_dtype=fp8_e4m3, but decode server has kv_cache_dtype=auto. Both servers must use the same --kv-cache-dtype value.")),
    # hierarchical-cache-host-memory-short
    ("kv-pool-too-small", traceback_text(INIT + ["sglang/srt/mem_cache/hicache_auto_size.py:auto_size_hicache"], "ValueError: No host memory is left for HiCache after the 10 GiB reserve; set --hicache-ratio or --hicache-size explicitly.")),
    ("kv-pool-too-small", traceback_text(INIT + ["sglang/srt/mem_cache/hiradix_cache.py:__init__", "sglang/srt/mem_cache/memory_pool_host.py:__init__"], "AssertionError: The host memory should be larger than the device memory with the current protocol")),
    ("kv-pool-too-small", traceback_text(INIT + ["sglang/srt/mem_cache/pool_host/common.py:alloc_with_pin_memory_xpu"], "RuntimeError: Pinned host memory allocation of 96 GiB (103079215104 bytes) returned a null pointer")),
    # platform-device-not-visible
    ("no-gpu", traceback_text(["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:__post_init__", "sglang/srt/utils/common.py:is_npu"], "RuntimeError: torch_npu detected, but NPU device is not available or visible.")),
    ("no-gpu", traceback_text(["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:_handle_gpu_memory_settings", "sglang/srt/utils/common.py:get_device_memory_capacity", "sglang/srt/utils/common.py:get_xpu_memory_capacity"], "RuntimeError: torch.xpu is not available.")),
]

NEAR_MISSES = [
    # a kernel library's own architecture refusal (its frames on the stack) stays a kernel failure
    ("kernel-compile-error", traceback_text(SERVE + ["sgl_kernel/gemm.py:fp8_blockwise_scaled_mm"], "RuntimeError: fp8_blockwise_scaled_mm requires SM90 or SM100")),
    # a toolkit-version requirement is not a GPU generation
    ("kernel-compile-error", traceback_text(SERVE + ["flashinfer/compilation_context.py:_normalize_cuda_arch"], "RuntimeError: SM 12.x requires CUDA >= 12.9")),
    # "operation not supported" while a graph is captured stays the capture's failure
    ("cuda-graph-capture-failed", traceback_text(INIT + ["sglang/srt/model_executor/cuda_graph_runner.py:__init__", "sglang/srt/model_executor/cuda_graph_runner.py:capture"], "RuntimeError: CUDA error: operation not permitted when stream is capturing")),
    # a model class only for a purpose outside serving modes stays a code bug
    ("other", traceback_text(SERVE + ["sglang/srt/models/llama_eagle.py:forward"], "AssertionError: LlamaForCausalLMEagle is only used for speculative decoding")),
    # "require" outside a quantization method stays a code bug
    ("other", traceback_text(SERVE + ["sglang/srt/lora/layers.py:apply"], "AssertionError: LoRA layers require the base layer's output buffer")),
    # the weights themselves missing stays the loader's finding (model files), not the quant config
    ("model-load-error", traceback_text(LOAD + ["sglang/srt/model_loader/loader.py:_prepare_weights"], "RuntimeError: Cannot find any model weights with `/models/llama-3-8b-awq`")),
    # a quantization config that mixes schemes SGLang refuses stays a refused setup
    ("unsupported-config", traceback_text(QUANT_INIT + ["sglang/srt/layers/quantization/quark/quark.py:from_config", "sglang/srt/layers/quantization/quark/quark.py:_find_matched_config"], "ValueError: Found a different quantization configuration for ['q_proj', 'k_proj', 'v_proj'] in model.layers.0.self_attn.qkv_proj. SGLang requires all to use the same scheme.")),
    # a scale tensor's dtype is data SGLang built, not the launch's dtype: a code bug
    ("other", traceback_text(SERVE + ["sglang/srt/layers/moe/cutlass_moe.py:cutlass_fused_experts_fp8"], "AssertionError: MXFP8 w1_scale must be uint8")),
    # a dtype check while a CUDA graph is captured stays the capture's failure
    ("cuda-graph-capture-failed", "Exception: Capture cuda graph failed: mat_a must be bf16\nPossible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)"),
    # a storage backend's own config file missing keys is not the model's config
    ("other", traceback_text(INIT + ["sglang/srt/mem_cache/storage/hf3fs/storage_hf3fs.py:from_env_config"], "ValueError: Missing required keys in config: {'file_size', 'numjobs'}")),
    # an option's field name in a check that says SGLang itself went wrong stays a code bug
    ("other", traceback_text(INIT + ["sglang/srt/lora/lora_registry.py:__init__"], "AssertionError: server_args.lora_paths should have been normalized to LoRARef objects during server initialization. Please file an issue if you see this error.")),
    # a field name in a KV-pool shortage stays the pool's finding
    ("kv-pool-too-small", traceback_text(POOL, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5")),
    # a transfer's own index-length mismatch between the two sides stays SGLang's code
    ("other", traceback_text(PD[:2] + ["sglang/srt/disaggregation/nixl/conn.py:maybe_send_extra"], "RuntimeError: State index length mismatch: prefill=4, dst=2")),
    # the device running out of memory while the host pool is set up stays a GPU OOM
    ("cuda-oom", traceback_text(INIT + ["sglang/srt/mem_cache/memory_pool_host.py:__init__"], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 2.31 GiB is free.")),
    # a package that is not available stays a missing dependency
    ("missing-dependency", traceback_text(INIT + ["sglang/srt/layers/moe/token_dispatcher/deepep.py:__init__"], "ImportError: DeepEP is not available. Please install DeepEP package from https://github.com/deepseek-ai/DeepEP.")),
    # no CUDA device at all stays no-gpu through the shipped rules
    ("no-gpu", traceback_text(INIT, "RuntimeError: No CUDA GPUs are available")),
    # an out-of-memory while an unsupported-looking kernel runs stays an OOM
    ("cuda-oom", traceback_text(SERVE, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.12 GiB is free.")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
