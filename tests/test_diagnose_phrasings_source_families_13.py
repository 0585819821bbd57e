# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-13.toml adds, in the words of the raising code, not
of a corpus report, and the two reading changes beside it. Where each phrasing comes from:

- TORCH_CHECK without a message (c10/util/Exception.h: `Expected <cond> to be true, but got false.
  (Could this error message be improved? …)`), with conditions of the shapes kernels' host code checks
  (sizes against a batch, a count against int32's limit, a contiguity);
- SGLang's grammar abort (managers/scheduler_output_processor_mixin.py: `Grammar accept_token failed
  for req {rid} with token {id}: {e}`) around xgrammar's refusal (`Tokens not accepted: …`);
- SGLang's LoRA wrapper lookup (lora/layers.py `get_lora_layer`: `No corresponding LoRA layer
  supported for {type(layer)}.`);
- FlashInfer's ragged-prefill argument check (flashinfer/prefill.py: `q.shape[0] (…) does not match
  qo_indptr[-1] (…)`), read as a shape-mismatch wording;
- an exception named straight after CJK prose (a reporter's sentence `…时出现RuntimeError: …`).

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file."""

from phrasing_helpers import first_category, new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "source-families-13.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

SERVING = ["sglang/srt/managers/scheduler.py:run_batch", "sglang/srt/model_executor/model_runner.py:forward",
           "sglang/srt/layers/attention/nsa_backend.py:forward_extend"]
LORA = ["sglang/srt/lora/lora_manager.py:init_lora_modules", "sglang/srt/lora/lora_manager.py:set_lora_module",
        "sglang/srt/lora/layers.py:get_lora_layer"]
PREFILL = ["sglang/srt/layers/attention/flashinfer_backend.py:forward_extend", "flashinfer/prefill.py:run"]

PHRASINGS = [
    # TORCH_CHECK with no message of its own
    ("other", traceback_text(SERVING, "RuntimeError: Expected page_table.size(0) == num_seqs to be true, but got false.  (Could this error message be improved?  If so, please report an enhancement request to PyTorch.)")),
    ("other", "RuntimeError: Expected output.numel() <= std::numeric_limits<int32_t>::max() to be true, but got false."),
    ("other", traceback_text(SERVING, "RuntimeError: Expected indices.is_contiguous() to be true, but got false.")),
    # the grammar matcher refusing a generated token
    ("other", "[2026-11-30 10:00:00 TP0] Grammar accept_token failed for req 5f2e9c1ab with token 1187: Tokens not accepted: 1187\nAccepted tokens: [90, 1, 2]\nKey string: {\"type\": \"object\"}"),
    ("other", "Grammar accept_token failed for req b71c with token [4411, 29]: Tokens not accepted: [4411, 29]"),
    # a module type SGLang's LoRA cannot wrap
    ("unsupported-config", traceback_text(LORA, "Exception: No corresponding LoRA layer supported for <class 'sglang.srt.layers.moe.fused_moe_triton.layer.FusedMoE'>.")),
    ("unsupported-config", "Exception: No corresponding LoRA layer supported for <class 'sglang.srt.layers.layernorm.RMSNorm'>."),
    # FlashInfer's ragged-prefill check, raised in eager code: a shape mismatch outside any graph
    ("other", traceback_text(PREFILL, "ValueError: q.shape[0] (4097) does not match qo_indptr[-1] (4096).")),
    # an exception named straight after CJK prose
    ("unsupported-config", "启动服务时出现Exception: No corresponding LoRA layer supported for <class 'sglang.srt.layers.radix_attention.RadixAttention'>."),
]

NEAR_MISSES = [
    # a TORCH_CHECK on the GPU's architecture is a capability question, not the caller's inputs: the
    # new rule leaves it to the plain-error reading it had
    ("other", "RuntimeError: Expected is_sm80 to be true, but got false."),
    # a TORCH_CHECK inside graph replay keeps the graph rules' reading
    ("cuda-graph-shape-mismatch", traceback_text(["sglang/srt/model_executor/cuda_graph_runner.py:replay"], "RuntimeError: Expected q.size(0) == num_tokens to be true, but got false.")),
    # a request refused by the grammar compiler at admission is not a refused token
    ("other", "ValueError: Invalid grammar: expected ',' or '}' after an object member"),
    # an ordinary shape wording without a stack keeps the no-stack reading
    ("cuda-graph-shape-mismatch", "RuntimeError: The size of tensor a (8) must match the size of tensor b (33) at non-singleton dimension 0"),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))


def test_an_exception_named_right_after_cjk_prose_is_read_as_the_error():
    text = "推理的时候报错RuntimeError: CUDA error: an illegal memory access was encountered"
    assert first_category(RULES, text)[0] == "illegal-memory-access"
    from ddtreed.tracebacks.paste import paste_crashes

    named = [(crash.exception, crash.message) for crash in paste_crashes(["推理的时候报错RuntimeError: boom"])]
    assert ("RuntimeError", "boom") in named
    # an ASCII word character still joins the name: `xRuntimeError` names no RuntimeError
    assert not [crash for crash in paste_crashes(["xRuntimeError: boom"]) if crash.exception == "RuntimeError"]
