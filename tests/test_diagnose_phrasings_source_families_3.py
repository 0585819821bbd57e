# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-3.toml adds, in the words of the software that
prints them, not of a corpus report. Where each phrasing comes from:

- CPython's generated dataclass `__init__` over SGLang's `ServerArgs` (srt/server_args.py), reached
  through `sglang.Engine(**kwargs)` (srt/entrypoints/engine.py) from a framework's rollout code (verl,
  slime), and the Engine's methods a framework calls with a newer keyword;
- glog's failure signal handler (src/signalhandler.cc: `*** Aborted at …`, `*** SIGSEGV (@0x0)
  received by PID …`), folly's (`*** Signal 11 (SIGSEGV) (0x0) received by PID …`), UCX's error
  handler (src/ucs/debug/debug.c: `Caught signal 11 (Segmentation fault: …)`), the Linux kernel's
  segfault report as journalctl prints it, and a reporter's own word for the crash;
- sgl-router's retry loop (src/router.rs: `Request to {} failed (attempt {}/{})`, `Removing failed
  worker: {}`, `All retry attempts failed`), in the router's tracing format.

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file. None of the phrasings is a corpus
report's text (checked against the development part; the held-out part is never read)."""

from phrasing_helpers import (new_rule_file_tests,
                              traceback_text, with_and_without)

NEW_FILE = "source-families-3.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

VERL = ["verl/workers/fsdp_workers.py:init_model", "verl/workers/rollout/sglang_rollout/sglang_rollout.py:__init__",
        "verl/workers/rollout/sglang_rollout/sglang_rollout.py:_init_inference_engine", "sglang/srt/entrypoints/engine.py:__init__"]
SLIME = ["slime/backends/megatron_utils/update_weight_utils.py:update_weights", "slime/backends/sglang_utils/sglang_engine.py:update_weights_from_tensor"]
SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:__init__"]
FWD = ["sglang/srt/managers/scheduler.py:event_loop_overlap", "sglang/srt/managers/scheduler.py:run_batch",
       "sglang/srt/managers/tp_worker.py:forward_batch_generation", "sglang/srt/model_executor/model_runner.py:forward"]


def ray(message):
    """A Ray actor's error as the driver prints it, the remote traceback's last line inline."""
    return ("ray.exceptions.RayTaskError(TypeError): ray::RolloutActor.update_weights() (pid=2817, ip=10.0.0.5)\n"
            f"  File \"/usr/local/lib/python3.12/dist-packages/slime/backends/sglang_utils/sglang_engine.py\", line 214, in update_weights_from_tensor\n    self.llm.update_weights_from_tensor(**kwargs)\n{message}")


PHRASINGS = [
    # integration-passes-option-sglang-lacks: a framework's ServerArgs / Engine keyword the installed SGLang lacks
    ("missing-dependency", traceback_text(VERL, "TypeError: ServerArgs.__init__() got an unexpected keyword argument 'enable_memory_saver'")),
    ("missing-dependency", traceback_text(VERL + ["<string>:__init__"], "TypeError: ServerArgs.__init__() got an unexpected keyword argument 'mm_attention_backend'")),
    ("missing-dependency", ray("TypeError: Engine.update_weights_from_tensor() got an unexpected keyword argument 'flush_cache'")),
    ("missing-dependency", traceback_text(SLIME, "TypeError: Engine.init_weights_update_group() got an unexpected keyword argument 'group_name'")),
    # native-crash-reported-by-signal-handler: glog, folly, UCX, the kernel, the reporter's word
    ("fatal-signal", "*** Aborted at 1784273406 (unix time) try \"date -d @1784273406\" if you are using GNU date ***\nPC: @     0x7f2c3bfff640 mooncake::TransferEngine::submitTransfer()\n*** SIGSEGV (@0x0) received by PID 2817 (TID 0x7f2c3bfff640) from PID 0; stack trace: ***\n    @     0x7f2c3bfff640 (unknown)"),
    ("fatal-signal", "*** Signal 11 (SIGSEGV) (0x18) received by PID 2817 (pthread TID 0x7f2c3bfff640) (linux TID 2901) (code: address not mapped to object), stack trace: ***"),
    ("fatal-signal", "[gpu-node-3:2817:0:2901] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x18)\n==== backtrace (tid:   2901) ====\n 0  /usr/lib/libucs.so.0(ucs_handle_error+0x2e4) [0x7f2c3bfff640]"),
    ("fatal-signal", "[gpu-node-3:2817:0:2901] Caught signal 7 (Bus error: nonexistent physical address)\n==== backtrace (tid:   2901) ===="),
    ("fatal-signal", "Jul 15 03:12:44 gpu-node-3 kernel: python3[2817]: segfault at 10 ip 00007f2c3bfff640 sp 00007ffd1c2a3b80 error 4 in libmooncake_store.so[7f2c3b000000+1a00000]"),
    ("fatal-signal", "The prefill server segfaults while the hierarchical cache initialises with the Mooncake storage backend"),
    ("fatal-signal", "decode worker: seg fault right after the NIXL agent is created"),
    # router-gave-up-on-worker: sgl-router's retry loop gives up on a worker
    ("other", "2026-07-15T03:12:44.412873Z  WARN sglang_router_rs::router: Request to http://10.0.0.5:30000 failed (attempt 3/3)\n2026-07-15T03:12:44.412901Z  WARN sglang_router_rs::router: Removing failed worker: http://10.0.0.5:30000"),
    ("other", "2026-07-15T03:12:50.118204Z ERROR sglang_router_rs::server: generate request answered 500: All retry attempts failed"),
]

NEAR_MISSES = [
    # a framework reading an attribute its SGLang lacks, or SGLang's own code with a wrong keyword, stays a code bug
    ("other", traceback_text(SCHED, "AttributeError: 'ServerArgs' object has no attribute 'enable_dp_lm_head'")),
    ("other", traceback_text(FWD, "TypeError: FlashInferAttnBackend.init_forward_metadata() got an unexpected keyword argument 'spec_info'")),
    # the operator's own unknown flag or Engine keyword (no framework's frames) is a refused launch, not a version pairing
    ("unsupported-config", traceback_text(["batch_infer.py:main", "sglang/srt/entrypoints/engine.py:__init__"], "TypeError: ServerArgs.__init__() got an unexpected keyword argument 'max_total_token'")),
    ("unsupported-config", "sglang serve: error: unrecognized arguments: --mm-attention-backend fa3"),
    # faulthandler's and the shell's words keep their older rules (same category)
    ("fatal-signal", "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f2c3bfff640 (most recent call first):"),
    ("fatal-signal", "./run.sh: line 22: 103525 Segmentation fault      (core dumped) python -m sglang.launch_server --model-path /models/qwen"),
    # a Mooncake transfer that failed without a crash stays a communication failure
    ("nccl-error", "[2026-07-15 03:12:44 TP0] Prefill transfer failed for request rank=0 req.rid='a1' req.bootstrap_room=42 with exception KVTransferError(bootstrap_room=42): Failed to send kv chunk of 42 to 10.0.0.7:15004"),
    # a worker's own out-of-memory crash is the cause, whatever the router logs after it
    ("cuda-oom", traceback_text(FWD, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.12 GiB is free.")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
