# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/reports-e.toml adds, in the phrasings their sources print (CUDA's
and CANN's error strings, torch's device checks, SGLang's launcher and allocator), written for
each family, not copied from one report: every text is diagnosed through `ddtreed diagnose`'s own
path and must get its category. Near misses (a close wording that belongs elsewhere) must get the
same category with and without the new file: the new rules only reach what they are for."""

from phrasing_helpers import SITE as PKG, new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "reports-e.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)


def tb(frames, last, before=""):
    """A traceback as SGLang's scheduler prints it, under its `Scheduler hit an exception` banner."""
    return traceback_text(frames, last, before, line=321, body="    call()",
                          banner="[2026-05-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):")


SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:event_loop_overlap"]
INIT = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__",
        "sglang/srt/model_executor/model_runner.py:__init__"]
ALLOC = SCHED + ["sglang/srt/managers/schedule_batch.py:prepare_for_extend", "sglang/srt/mem_cache/common.py:alloc_for_extend"]
LAUNCH = ["sglang/launch_server.py:<module>", "sglang/srt/entrypoints/http_server.py:launch_server"]

PHRASINGS = [
    # refusal-wording-any-case: refusals with a capital or shouted
    ("unsupported-config", tb(INIT + ["sglang/srt/layers/quantization/compressed_tensors/schemes/w8a16_fp8.py:__init__"],
                              "ValueError: Unsupported weight strategy=group, supported strategies are [<QuantizationStrategy.CHANNEL: 'channel'>]")),
    ("unsupported-config", tb(SCHED + ["sglang/srt/disaggregation/nixl/conn.py:transfer_worker"],
                              "RuntimeError: PD Disaggregation does NOT support mixed page sizes between prefill and decode")),
    ("unsupported-config", "ValueError: Unsupported speculative algorithm NGRAM for this model, use EAGLE or disable speculative decoding"),
    # named-parameter-requirement: a snake_case parameter and what it must be
    ("unsupported-config", "ValueError: think_end_token '</think>' must encode to exactly one token for constrained reasoning."),
    ("unsupported-config", tb(INIT, "ValueError: page_size must be a power of 2, got 48")),
    ("unsupported-config", tb(INIT, "ValueError: `speculative_num_draft_tokens` should be at least speculative_num_steps + 1")),
    # device-memory-access-invalid
    ("illegal-memory-access", tb(SCHED + ["torch/cuda/streams.py:synchronize"],
                                 "torch.AcceleratorError: CUDA error: Invalid access of peer GPU memory over nvlink or a hardware error\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")),
    ("illegal-memory-access", "The decode step died with `RuntimeError: CUDA error: invalid access of peer GPU memory over nvlink or a hardware error` after an hour of load."),
    # npu-device-address-fault
    ("illegal-memory-access", "[rank0]:[W1101 10:00:00.000 compiler_depend.ts:57] Warning: EZ9999: Inner Error!\nEZ9999: The error from device(chipId:1, dieId:0), there is an exception of aivec error.\n        TraceBack (most recent call last):\n       The extend info: errcode:(0, 0x200, 0) errorStr: The MPU address access is invalid. subErrType:4."),
    ("illegal-memory-access", tb(SCHED + ["torch_npu/npu/streams.py:synchronize"],
                                 "RuntimeError: ACL stream synchronize failed, error code:507035\nEZ9999: Inner Error!\nEZ9999: The DDR address of the MTE instruction is out of range.[FUNC:PrintCoreErrorInfo]")),
    # npu-operator-kernel-not-loaded
    # (the same text pasted without its stack is left to the last-resort rule: the assembler keeps
    # only the exception's first line there; tests/corpus/dev-unreachable.json says so)
    ("kernel-compile-error", tb(SCHED + ["sglang/srt/layers/sampler.py:forward"],
                                "RuntimeError: NPU function error: call aclnnCumsum failed, error code is 561103\n[ERROR] PTA call acl api failed.\nEZ9999: Inner Error!\nEZ9999: Parse dynamic kernel config fail.\n        TraceBack (most recent call last):\n       AclOpKernelInit failed opType")),
    ("kernel-compile-error", tb(INIT + ["sglang/srt/layers/rotary_embedding.py:_compute_cos_sin_cache"],
                                "RuntimeError: call aclnnArange failed, error code is 561103\nEZ9999: Inner Error!\n       ArangeAiCore ADD_TO_LAUNCHER_LIST_AICORE failed.")),
    # cuda-api-call-invalid-argument
    ("other", tb(SCHED + ["sglang/srt/managers/cache_controller.py:start_writing"],
                 "RuntimeError: cudaMemcpyBatchAsync failed. failIdx=3 error=invalid argument")),
    ("other", "RuntimeError: hipMemcpyAsync failed: invalid argument (hipErrorInvalidValue)"),
    # tensor-on-wrong-device
    ("other", tb(SCHED + ["sglang/srt/mem_cache/hi_mamba_radix_cache.py:load_back"], "RuntimeError: Destination indices must be a CUDA tensor")),
    ("other", tb(SCHED + ["sglang/srt/layers/sampler.py:forward"],
                 "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:1 and cuda:0!")),
    # memory-pool-method-not-implemented
    ("other", tb(SCHED + ["sglang/srt/managers/scheduler.py:update_running_batch", "sglang/srt/mem_cache/allocator.py:available_size"], "NotImplementedError")),
    ("other", tb(SCHED + ["sglang/srt/mem_cache/memory_pool.py:get_state_buf_infos"], "NotImplementedError: ")),
    # worker-dead-on-fatal-signal
    ("fatal-signal", "Error: Rank 1 scheduler is dead. Exit code: -11 (SIGSEGV)"),
    ("fatal-signal", "2026-05-01T10:00:00Z ERROR worker: engine process exited unexpectedly, signal SIGBUS"),
    # scheduler-reported-dead
    ("other", "[05-01 10:00:00] Rank 0 scheduler is dead. Please check if there are relevant logs.\n[05-01 10:00:01] Exit code: -9"),
    ("other", "Error: Rank 2 scheduler is dead. Exit code: -9 (SIGKILL)"),
    # token-slot-allocation-raised
    ("kv-pool-too-small", tb(ALLOC + ["sglang/srt/mem_cache/common.py:alloc_token_slots"],
                             "RuntimeError: Out of memory. Try to lower your batch size.\nTry to allocate 2048 tokens.")),
    ("kv-pool-too-small", tb(ALLOC + ["sglang/srt/mem_cache/common.py:alloc_paged_token_slots_extend"], "    raise RuntimeError(error_msg")),
    ("kv-pool-too-small", tb(SCHED + ["sglang/srt/managers/schedule_batch.py:prepare_for_decode", "sglang/srt/managers/schedule_batch.py:alloc_token_slots"],
                             "RuntimeError: Out of memory. Try to lower your batch size.")),
    # scheduler-pipe-closed-at-launch
    ("other", "\n".join(["Traceback (most recent call last):",
                         f'  File "{PKG}sglang/srt/entrypoints/engine.py", line 880, in _launch_subprocesses',
                         "    data = scheduler_pipe_readers[i].recv()",
                         '  File "/usr/lib/python3.12/multiprocessing/connection.py", line 250, in recv',
                         "    buf = self._recv_bytes()", "EOFError"])),
    ("other", "\n".join(["Traceback (most recent call last):",
                         f'  File "{PKG}sglang/srt/entrypoints/engine.py", line 912, in _wait_for_scheduler_ready',
                         "    data = reader.recv()",
                         '  File "/usr/lib/python3.11/multiprocessing/connection.py", line 249, in recv',
                         "    buf = self._recv_bytes()",
                         '  File "/usr/lib/python3.11/multiprocessing/connection.py", line 413, in _recv_bytes',
                         "    buf = self._recv(4)", "EOFError"])),
]

# Close wordings that belong to another family: the new file must not change their category.
NEAR_MISSES = [
    ("kernel-compile-error", tb(SCHED + ["sgl_kernel/gemm.py:fp8_scaled_mm"], "RuntimeError: Unsupported GPU architecture sm_120 for this kernel")),
    ("other", tb(SCHED + ["sglang/srt/layers/sampler.py:forward"], "ValueError: Tensor must be contiguous")),
    ("gpu-hardware-fault", tb(SCHED + ["torch/cuda/streams.py:synchronize"], "torch.AcceleratorError: CUDA error: uncorrectable NVLink error was detected during the execution")),
    ("illegal-memory-access", tb(SCHED + ["sglang/srt/managers/cache_controller.py:start_loading"], "RuntimeError: cudaMemcpyAsync failed: an illegal memory access was encountered")),
    ("model-load-error", tb(INIT + ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/model_loader/loader.py:load_model", "sglang/srt/models/llama.py:load_weights"],
                            "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!")),
    ("unsupported-config", tb(SCHED + ["sglang/srt/layers/attention/base_attn_backend.py:forward_extend"], "NotImplementedError")),
    ("unsupported-config", tb(SCHED + ["sglang/srt/mem_cache/memory_pool.py:set_kv_buffer"], "NotImplementedError: FP8 KV cache is not supported for this pool")),
    ("fatal-signal", "[2026-05-01 10:00:00] Subprocess scheduler_0 (pid=4242) crashed with exit code -11. Triggering SIGQUIT for cleanup..."),
    ("other", "[2026-05-01 10:00:00] Rank 0 scheduler died during initialization (exit code: -6). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer."),
    ("cuda-oom", tb(ALLOC + ["sglang/srt/mem_cache/common.py:alloc_token_slots"], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES))
