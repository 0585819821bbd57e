# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/source-families-8.toml adds, in the words of the raising code, not
of a corpus report. Where each phrasing comes from:

- the fast tokenizer transformers cannot build: tokenization_utils_fast.py (4.x) /
  tokenization_utils_tokenizers.py (5.x), PreTrainedTokenizerFast.__init__'s ValueError;
- a Triton kernel tile that leaves no pipeline stage: triton_kernels/matmul_ogs_details/
  opt_flags_details/opt_flags_nvidia.py compute_num_stages (`assert num_stages >= 1`);
- Python's list indexing errors in SGLang's bookkeeping (`list index out of range`, `pop from
  empty list`).

Every text goes through `ddtreed diagnose`'s own path. Near misses (a close wording that belongs
elsewhere) get the same category with and without the new file."""

from phrasing_helpers import new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "source-families-8.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)

TOKENIZER = ["sglang/launch_server.py:<module>", "sglang/srt/entrypoints/http_server.py:launch_server",
             "sglang/srt/managers/tokenizer_manager.py:__init__", "sglang/srt/utils/hf_transformers_utils.py:get_tokenizer",
             "transformers/models/auto/tokenization_auto.py:from_pretrained", "transformers/tokenization_utils_fast.py:__init__"]
MOE = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/model_executor/model_runner.py:forward",
       "sglang/srt/layers/moe/fused_moe_triton/triton_kernels_moe.py:triton_kernel_fused_experts",
       "triton_kernels/matmul_ogs.py:matmul_ogs", "triton_kernels/matmul_ogs_details/opt_flags.py:make_opt_flags",
       "triton_kernels/matmul_ogs_details/opt_flags_details/opt_flags_nvidia.py:compute_num_stages"]
OUTPUT = ["sglang/srt/managers/tokenizer_manager.py:handle_loop", "sglang/srt/managers/tokenizer_manager.py:_handle_batch_output"]

PHRASINGS = [
    # the message's first line only (the rest cut): its whole text is read by the missing-package rules
    # older 4.x releases printed it on one line, without the sentence on sentencepiece
    ("model-load-error", traceback_text(TOKENIZER, "ValueError: Couldn't instantiate the backend tokenizer from one of: (1) a `tokenizers` library serialization file, (2) a slow tokenizer instance to convert or (3) an equivalent slow tokenizer class to instantiate and convert.")),
    ("model-load-error", "ValueError: Couldn't instantiate the backend tokenizer from one of: (1) a `tokenizers` library serialization file, (2) a slow tokenizer instance to convert or (3) an equivalent slow tokenizer class to instantiate and convert."),  # a paste cut to its last line
    ("kernel-compile-error", traceback_text(MOE, "AssertionError: num_stages >= 1")),
    ("kernel-compile-error", "On this GPU the MXFP4 path picks a tile that hits `assert num_stages >= 1` while the server starts."),
    # no exception type, no frames: the wording alone (a one-line paste, a report's words)
    ("other", "The tokenizer manager fails with list assignment index out of range when a streamed request is aborted"),
    ("other", "schedule_policy raises pop from empty list once the waiting queue drains"),
    ("other", traceback_text(OUTPUT, "IndexError: pop index out of range")),  # sglang-code-bug says the same
]

NEAR_MISSES = [
    # the whole message, with its sentence on sentencepiece, stays the missing-package rules' reading
    ("missing-dependency", traceback_text(TOKENIZER, "ValueError: Couldn't instantiate the backend tokenizer from one of: \n(1) a `tokenizers` library serialization file, \n(2) a slow tokenizer instance to convert or \n(3) an equivalent slow tokenizer class to instantiate and convert. \nYou need to have sentencepiece or tiktoken installed to convert a slow tokenizer to a fast one.")),
    # a tokenizer whose files cannot be found stays the loader's finding through the shipped rules
    ("model-load-error", traceback_text(TOKENIZER, "OSError: Can't load tokenizer for '/models/llama'. If you were trying to load it from 'https://huggingface.co/models', make sure you don't have a local directory with the same name.")),
    # Triton out of shared memory at launch stays a kernel build failure through the shipped rules
    ("kernel-compile-error", traceback_text(MOE, "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 232448, Hardware limit: 101376. Reducing block sizes or `num_stages` may help.")),
    # a CUDA index assertion on the device stays a device-side assert
    ("illegal-memory-access", traceback_text(["sglang/srt/model_executor/model_runner.py:forward"], "RuntimeError: CUDA error: device-side assert triggered")),
    # a tensor index out of bounds is not a list bug of SGLang's bookkeeping
    ("illegal-memory-access", traceback_text(["sglang/srt/model_executor/model_runner.py:forward"], "RuntimeError: CUDA error: an illegal memory access was encountered")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES, from_sources=True))
