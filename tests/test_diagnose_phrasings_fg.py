# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/reports-fg.toml adds, in the wordings their sources print
(CPython's call errors, aiter's chip table, FlashInfer's dispatch checks), written for each family, not copied from one report:
every text is diagnosed through `ddtreed diagnose`'s own path and must get its category. Near
misses (a close wording that belongs elsewhere) must get the same category with and without the
new file: the new rules only reach what they are for."""

from phrasing_helpers import new_rule_file_tests, traceback_text, with_and_without

NEW_FILE = "reports-fg.toml"
RULES, WITHOUT = with_and_without(NEW_FILE)


def tb(frames, last, before=""):
    """A traceback as SGLang's scheduler prints it, under its `Scheduler hit an exception` banner."""
    return traceback_text(frames, last, before, line=412, body="    run()",
                          banner="[2026-06-02 08:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):")


SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:event_loop_normal"]
LAUNCH = ["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:prepare_server_args",
          "sglang/srt/server_args.py:from_cli_args"]

PHRASINGS = [
    # call-signature-other-wordings: an arity range, positional-only by name, a builtin without keywords
    ("other", tb(SCHED + ["sglang/srt/managers/scheduler.py:process_input_requests"],
                 "TypeError: Scheduler.handle_generate_request() takes from 2 to 3 positional arguments but 4 were given")),
    ("other", "TypeError: get_tokenizer() got some positional-only arguments passed as keyword arguments: 'tokenizer_name'"),
    ("other", "the worker then fails with: dict.get() takes no keyword arguments"),
    # kernel-library-unknown-gpu-arch: aiter's chip table, in the argument checks and pasted alone
    ("kernel-compile-error", traceback_text(LAUNCH + ["sglang/srt/server_args.py:_handle_amd_specifics",
                                                      "aiter/jit/utils/chip_info.py:get_gfx_custom_op_core"],
                                            "KeyError: \"Unknown GPU architecture: gfx1201. Supported architectures: ['native', 'gfx90a', 'gfx942', 'gfx950']\"")),
    ("kernel-compile-error", "KeyError: \"Unknown GPU architecture: gfx1151. Supported architectures: ['native', 'gfx90a', 'gfx908', 'gfx942']\""),
    # attention-kernel-dispatch-refuses-head-shape: FlashInfer's head_dim and group_size dispatch
    ("unsupported-config", tb(SCHED + ["sglang/srt/layers/attention/flashinfer_backend.py:init_forward_metadata", "flashinfer/decode.py:plan"],
                              "RuntimeError: Error in function 'BatchDecodeWithPagedKVCachePlan' at /usr/local/lib/python3.12/dist-packages/flashinfer/data/csrc/batch_decode.cu:46: Unsupported head_dim: 48")),
    ("unsupported-config", "RuntimeError: Error in function 'operator()' at /flashinfer/csrc/batch_prefill.cu:112: Unsupported group_size: 12"),
]

# Close wordings that belong to another family: the new file must not change their category.
NEAR_MISSES = [
    # an unsupported *model* architecture is the checkpoint's problem, not a GPU's
    ("model-load-error", traceback_text(["sglang/srt/model_loader/loader.py:load_model", "sglang/srt/model_loader/utils.py:get_model_architecture"],
                                        "ValueError: Unsupported architectures: ChatGLMForConditionalGeneration. Supported list: ['ChatGLMForCausalLM', 'LlamaForCausalLM']")),
    # FlashInfer refusing the GPU (not the model's shape) stays a kernel-build problem
    ("kernel-compile-error", tb(SCHED + ["sglang/srt/layers/attention/flashinfer_backend.py:forward_decode", "flashinfer/decode.py:run"],
                                "RuntimeError: FlashInfer requires GPUs with sm75 or higher")),
    # Python's familiar call wording keeps its rule
    ("other", tb(SCHED, "TypeError: Scheduler.__init__() got an unexpected keyword argument 'moe_dp_size'")),
]


globals().update(new_rule_file_tests(RULES, WITHOUT, PHRASINGS, NEAR_MISSES))

