# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-5.toml adds, in the words of the software that
prints them, not of a corpus report. Where each phrasing comes from:

- SGLang's warm-up request (srt/entrypoints/http_server.py `_wait_and_warmup`: `assert
  res.status_code == 200, f"{res=}, {res.text=}"`) and urllib3's request log line
  (connectionpool.py `_make_request`: `%s://%s:%s "%s %s %s" %s %s`, the absolute URL when the
  request goes through a proxy);
- the CUDA runtime's string for cudaErrorInvalidConfiguration (`invalid configuration argument`) as
  torch and FlashInfer's / sgl-kernel's norm kernels (`RMSNorm failed with error code …`) raise it;
- tvm-ffi's argument count check (`Mismatched number of arguments when calling: …. Expected N but
  got M arguments`) and torch's operator schema checks (function_schema_inl.h: `is missing value
  for argument`, `expected at most N argument(s) but received M argument(s)`);
- the CUDA words for cudaErrorIllegalAddress capitalised as a report's title writes them.

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file. None of the phrasings is a corpus
report's text (checked against the development part; the held-out part is never read)."""

from phrasing_helpers import (new_rule_file_tests,
                              traceback_text, with_and_without)

NEW_FILE = "source-families-5.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

WARMUP = ["threading.py:run", "sglang/srt/entrypoints/http_server.py:_wait_and_warmup"]
SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:event_loop_normal",
         "sglang/srt/managers/scheduler.py:run_batch", "sglang/srt/managers/tp_worker.py:forward_batch_generation",
         "sglang/srt/model_executor/model_runner.py:forward"]
NORM = SCHED + ["sglang/srt/models/qwen2.py:forward", "sglang/srt/layers/layernorm.py:forward_cuda", "sgl_kernel/elementwise.py:fused_add_rmsnorm"]
PLAN = SCHED + ["sglang/srt/layers/attention/flashinfer_backend.py:init_forward_metadata",
                "sglang/srt/layers/attention/flashinfer_backend.py:fast_decode_plan"]
CUT = "    logits_output, can_run_cuda_graph = self.model_runner.forward(forward_batch)"

PHRASINGS = [
    # warm-up-request-answered-with-http-error
    ("other", traceback_text(WARMUP, "AssertionError: res=<Response [503]>, res.text='<html><body><h1>503 Service Unavailable</h1>No server is available to handle this request.</body></html>'")),
    ("other", "The server starts, then the warm-up fails with `res=<Response [407]>` (our HTTP proxy wants authentication)"),
    ("other", traceback_text(WARMUP, "AssertionError: warm-up failed",
                             before='[2026-07-15 03:12:44] http://10.1.2.3:3128 "POST http://0.0.0.0:30000/generate HTTP/1.1" 502 0')),
    # cuda-kernel-launch-configuration-invalid
    ("other", traceback_text(NORM, "RuntimeError: FusedAddRMSNorm failed with error code invalid configuration argument")),
    ("other", traceback_text(SCHED, "RuntimeError: CUDA error: invalid configuration argument\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")),
    ("other", "RuntimeError: GemmaRMSNorm failed with error code cudaErrorInvalidConfiguration"),
    # compiled-kernel-entry-point-argument-count
    ("missing-dependency", traceback_text(PLAN + ["tvm_ffi/cython/function.pxi:core.Function.__call__"], "TypeError: Mismatched number of arguments when calling: `plan(0: DLTensor*, 1: DLTensor*, 2: DLTensor*, 3: int, 4: bool) -> Array<int>`. Expected 19 but got 17 arguments")),
    ("missing-dependency", traceback_text(PLAN + ["torch/_ops.py:__call__"], "RuntimeError: flashinfer::batch_decode_with_paged_kv_cache_plan() is missing value for argument '_12'. Declaration: flashinfer::batch_decode_with_paged_kv_cache_plan(Tensor _0, Tensor _1, int _2) -> int[] _0")),
    ("missing-dependency", traceback_text(SCHED + ["sglang/srt/layers/quantization/fp8_kernel.py:apply", "torch/_ops.py:__call__"], "RuntimeError: sgl_kernel::fp8_scaled_mm() expected at most 6 argument(s) but received 7 argument(s). Declaration: sgl_kernel::fp8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, ScalarType out_dtype, Tensor? bias=None) -> Tensor")),
    # illegal-memory-access-in-title-words
    ("illegal-memory-access", "Illegal memory access when serving DeepSeek-V3 with --enable-dp-attention\n\n" + traceback_text(SCHED, CUT)),
    ("illegal-memory-access", "Illegal Memory Access during decode with EAGLE and CUDA graphs on H20"),
]

NEAR_MISSES = [
    # SGLang refusing an option in its own words stays a refused option
    ("unsupported-config", traceback_text(["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:__post_init__"], "ValueError: Invalid quantization method: fp7")),
    # SGLang's own code calling itself with a wrong keyword stays a code bug
    ("other", traceback_text(SCHED + ["sglang/srt/layers/attention/flashinfer_backend.py:init_forward_metadata"], "TypeError: FlashInferAttnBackend.init_forward_metadata() got an unexpected keyword argument 'spec_info'")),
    # an illegal memory access during a graph capture stays the capture's failure
    ("cuda-graph-capture-failed", "Exception: Capture cuda graph failed: RuntimeError: CUDA error: an illegal memory access was encountered"),
    # a client's request to a live server that fails to connect stays the client's notice
    ("other", traceback_text(["bench_serving.py:main", "requests/api.py:get", "urllib3/connectionpool.py:urlopen"], "requests.exceptions.ConnectionError: HTTPConnectionPool(host='0.0.0.0', port=30000): Max retries exceeded with url: /get_model_info")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
