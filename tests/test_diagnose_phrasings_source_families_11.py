# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-11.toml adds, in the words of the raising code, not
of a corpus report, and the two reading changes beside it. Where each phrasing comes from:

- a layer's weight loader copying a checkpoint tensor into its shard: SGLang's layers/linear.py
  (`weight_loader`, `weight_loader_v2`: `param_data.copy_(loaded_weight)`), layers/vocab_parallel_embedding.py
  (`weight_loader`), layers/moe/fused_moe_triton/layer.py (`_load_w13`, `_load_w2`: `expert_data.copy_(…)`),
  with torch's broadcast wordings (`The size of tensor a (…) must match the size of tensor b (…) at
  non-singleton dimension …`, `Expected size … but got size … for tensor number …`);
- Rust's default panic hook (std::panicking): `thread '<name>' panicked at <file>:<line>:<col>:` and the
  payload on the next line (Rust 1.73+), `thread '<name>' panicked at '<payload>', <file>:<line>:<col>`
  before, as the router (sglang_router_rs, tokio) and the tokenizers crate print them;
- SGLang's capture banner (`Capture cuda graph failed: <inner>`) around the custom all-reduce kernel's
  own check (sgl-kernel's csrc/allreduce/custom_all_reduce.cuh CHECK_CUDA_SUCCESS, the JIT kernel's
  include/sgl_kernel/distributed/custom_all_reduce.cuh `Runtime check failed at …: CUDA error: …`);
- a paste that elides the installation's prefix (`File ".../sglang/srt/…"`), and transformers reading a
  processor's own config (image_processing_base.py `get_image_processor_dict`).

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file."""

from phrasing_helpers import first_category, new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "source-families-11.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

LOAD = ["sglang/srt/model_executor/model_runner.py:load_model", "sglang/srt/model_loader/loader.py:load_model",
        "sglang/srt/models/qwen3_moe.py:load_weights"]
PANIC = "thread 'tokio-runtime-worker' panicked at src/routers/http/router.rs:412:38:\ncalled `Option::unwrap()` on a `None` value\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"

PHRASINGS = [
    # a checkpoint tensor that does not fit the shard its layer copies it into
    ("model-load-error", traceback_text(LOAD + ["sglang/srt/layers/moe/fused_moe_triton/layer.py:weight_loader",
                                                "sglang/srt/layers/moe/fused_moe_triton/layer.py:_weight_loader_impl",
                                                "sglang/srt/layers/moe/fused_moe_triton/layer.py:_load_w2"],
                                        "RuntimeError: The size of tensor a (768) must match the size of tensor b (1536) at non-singleton dimension 1")),
    ("model-load-error", traceback_text(LOAD[:2] + ["sglang/srt/models/llama.py:load_weights", "sglang/srt/layers/linear.py:weight_loader_v2"],
                                        "RuntimeError: The size of tensor a (4096) must match the size of tensor b (5120) at non-singleton dimension 0")),
    ("model-load-error", traceback_text(LOAD[:2] + ["sglang/srt/models/llama.py:load_weights", "sglang/srt/layers/vocab_parallel_embedding.py:weight_loader"],
                                        "RuntimeError: Expected size 32000 but got size 32064 for tensor number 1 in the list.")),
    # a Rust component's panic, either format of the hook
    ("other", "2026-03-02 08:11:09  INFO sglang_router_rs::server: src/server.rs:412: Starting router on 0.0.0.0:30000\n" + PANIC),
    ("other", "thread 'main' panicked at 'called `Result::unwrap()` on an `Err` value: Io(Kind(UnexpectedEof))', src/tokenizer/serialization.rs:142:58"),
    # the custom all-reduce failing under capture, behind SGLang's banner
    ("cuda-graph-capture-failed", "Exception: Capture cuda graph failed: CUDA error: invalid argument at /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:368"),
    ("cuda-graph-capture-failed", traceback_text(["sglang/srt/model_executor/model_runner.py:init_device_graphs",
                                                  "sglang/srt/model_executor/cuda_graph_runner.py:__init__"],
                                                 "Exception: Capture cuda graph failed: Runtime check failed at /usr/local/lib/python3.12/dist-packages/sglang/jit_kernel/include/sgl_kernel/distributed/custom_all_reduce.cuh:52: CUDA error: operation not permitted when stream is capturing")),
]

NEAR_MISSES = [
    # a size mismatch in the model's forward stays a code path's (no weight loader on the stack)
    ("other", traceback_text(["sglang/srt/model_executor/model_runner.py:forward_extend", "sglang/srt/models/llama.py:forward"],
                             "RuntimeError: The size of tensor a (4096) must match the size of tensor b (5120) at non-singleton dimension 1")),
    # a weight loader's KeyError on a name stays the checkpoint-name reading (model-load-error by its own rule)
    ("model-load-error", traceback_text(LOAD, "KeyError: 'model.layers.0.mlp.experts.w2_weight_scale_inv'")),
    # a panic whose payload says the port is taken is a port question
    ("port-in-use", "thread 'main' panicked at src/main.rs:88:10:\nfailed to bind: Os { code: 98, kind: AddrInUse, message: \"Address already in use\" }"),
    # the custom all-reduce's error outside capture stays the kernel's own rule (communication)
    ("nccl-error", "RuntimeError: CUDA error: invalid argument at /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:350"),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))


def test_a_paste_that_elides_the_installation_prefix_keeps_its_sglang_frames():
    from ddtreed.records import Frame

    assert Frame(".../sglang/srt/layers/sampler.py", 476, "forward").module == "sglang/srt/layers/sampler.py"
    assert Frame("\u2026/sglang/srt/entrypoints/engine.py", 204, "generate").module == "sglang/srt/entrypoints/engine.py"
    assert Frame("/usr/lib/python3/dist-packages/sglang/srt/x.py", 1, "f").module == "sglang/srt/x.py"  # unchanged
    assert Frame("./run.py", 3, "main").module == "./run.py"  # a relative path is no elision
    text = traceback_text([], "RuntimeError: probability tensor contains either inf, nan or element < 0").replace(
        "Traceback (most recent call last):",
        'Traceback (most recent call last):\n  File ".../sglang/srt/managers/scheduler.py", line 1, in run_batch\n'
        '    ...\n  File ".../sglang/srt/layers/sampler.py", line 476, in forward\n    ...')
    assert first_category(RULES, text)[0] == "other"


def test_the_panic_line_is_a_fatal_line_of_its_own():
    from ddtreed.tracebacks.grammar import fatal_line

    assert fatal_line("thread 'main' panicked at src/main.rs:2:5:") == ("Rust panic", "thread 'main' panicked at src/main.rs:2:5:")
    assert fatal_line("  the prompt said: thread 'main' panicked at nothing") is None  # not at the line's start
