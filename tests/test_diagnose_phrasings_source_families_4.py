# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-4.toml adds, in the words of the software that
prints them, not of a corpus report. Where each phrasing comes from:

- SGLang's model runner start-up check (srt/model_executor/model_runner.py: `SGLang only supports
  sm75 and above.` after the sm80 dtype fallback) and FlashInfer's stated floor;
- DeepGEMM's host assertions (csrc/apis/layout.hpp `Unknown SF transformation`, einsum.hpp
  `Unsupported architecture`, `Unknown recipe`), as the tvm/torch wrapper raises them;
- transformers' auto-class `register()` (models/auto/image_processing_auto.py, processing_auto.py)
  called by SGLang's srt/configs/utils.py with the 4.x argument order;
- SQLite's name resolution hint (resolve.c: `no such column: "X" - should this be a string literal
  in single-quotes?`) as diskcache's `_row_insert` reaches it under outlines;
- sgl-router's start-up wait (wait_for_healthy_workers / add_worker: `Worker {} health check is
  pending with error: {}`, `Timeout {}s waiting for workers {:?} to become healthy. …`), in the
  router's log formats.

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file. None of the phrasings is a corpus
report's text (checked against the development part; the held-out part is never read)."""

from phrasing_helpers import (new_rule_file_tests,
                              traceback_text, with_and_without)

NEW_FILE = "source-families-4.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__",
         "sglang/srt/managers/tp_worker.py:__init__", "sglang/srt/model_executor/model_runner.py:__init__"]
LOAD = SCHED + ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/models/deepseek_v2.py:post_load_weights"]
IMPORT = ["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:<module>", "sglang/srt/utils/hf_transformers_utils.py:<module>",
          "sglang/srt/configs/__init__.py:<module>", "sglang/srt/configs/janus_pro.py:<module>", "sglang/srt/configs/utils.py:register_image_processor"]
GRAMMAR = SCHED[:2] + ["sglang/srt/constrained/base_grammar_backend.py:create_grammar_backend",
                       "outlines/caching.py:get_cache", "diskcache/core.py:__setitem__", "diskcache/core.py:set", "diskcache/core.py:_row_insert"]

PHRASINGS = [
    # gpu-below-sglang-minimum-compute-capability
    ("unsupported-config", traceback_text(SCHED, "RuntimeError: SGLang only supports sm75 and above.")),
    ("unsupported-config", "[2026-07-15 03:12:44 TP0] Scheduler hit an exception: RuntimeError: SGLang only supports sm75 and above."),
    ("unsupported-config", "On our Tesla P100 nodes the launch stops with: SGLang only supports sm 75 and above"),
    # deepgemm-kernel-path-missing-for-architecture
    ("unsupported-config", traceback_text(LOAD + ["deep_gemm/__init__.py:transform_sf_into_required_layout"], "RuntimeError: Assertion error (/deepgemm/csrc/apis/layout.hpp:60): Unknown SF transformation")),
    ("unsupported-config", traceback_text(LOAD + ["deep_gemm/__init__.py:fp8_einsum"], "RuntimeError: Assertion error (csrc/apis/einsum.hpp:174): Unsupported architecture")),
    ("unsupported-config", "tvm.error.InternalError: Assertion error (/sgl-workspace/DeepGEMM/csrc/apis/layout.hpp:76): Unknown recipe"),
    # transformers-auto-class-register-signature
    ("missing-dependency", traceback_text(IMPORT, "TypeError: AutoImageProcessor.register() got multiple values for argument 'exist_ok'")),
    ("missing-dependency", traceback_text(IMPORT[:5] + ["sglang/srt/configs/utils.py:register_processor"], "TypeError: AutoProcessor.register() got an unexpected keyword argument 'exist_ok'")),
    # sqlite-rejects-double-quoted-identifier-diskcache
    ("missing-dependency", traceback_text(GRAMMAR, 'sqlite3.OperationalError: no such column: "expire_time" - should this be a string literal in single-quotes?')),
    ("missing-dependency", traceback_text(["outlines/caching.py:wrapper", "diskcache/core.py:get", "diskcache/core.py:_sql"], 'sqlite3.OperationalError: no such column: "store_time" - should this be a string literal in single-quotes?')),
    # router-waited-for-worker-startup
    ("other", "2026-07-15 03:12:44  INFO sglang_router_rs::router: src/router.rs:351: Worker http://10.0.0.5:30000 health check is pending with error: error sending request for url (http://10.0.0.5:30000/health)"),
    ("other", "router-1  | [Router (Rust)] 2026-07-15 03:12:44 - INFO - Worker http://10.0.0.5:30000 health check is pending with status: 503 Service Unavailable."),
    ("other", "2026-07-15 03:17:44 ERROR sglang_router_rs::router: Timeout 300s waiting for workers [\"http://10.0.0.5:30000\", \"http://10.0.0.6:30000\"] to become healthy. Please set --router-worker-startup-timeout-secs (sglang_router.launch_server) or --worker-startup-timeout-secs (sglang_worker.router) to a larger value"),
]

NEAR_MISSES = [
    # a kernel image missing for the GPU is a build that lacks the architecture, not a refused GPU
    ("kernel-compile-error", traceback_text(SCHED, "RuntimeError: CUDA error: no kernel image is available for execution on the device")),
    # SGLang's own code calling itself with a wrong keyword stays a code bug
    ("other", traceback_text(["sglang/srt/managers/scheduler.py:event_loop_overlap", "sglang/srt/managers/scheduler.py:run_batch"], "TypeError: FlashInferAttnBackend.init_forward_metadata() got an unexpected keyword argument 'spec_info'")),
    # the router giving up on a worker at serve time keeps its older rule (same category)
    ("other", "2026-07-15T03:12:44.412901Z  WARN sglang_router_rs::router: Removing failed worker: http://10.0.0.5:30000"),
    # an out-of-memory while DeepGEMM's JIT runs stays out of memory
    ("cuda-oom", traceback_text(LOAD, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.12 GiB is free.")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
