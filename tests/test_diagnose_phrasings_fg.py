# ruff: noqa: E501  (the phrasings are verbatim one-line messages)
"""The families ddtreed/data/rules/reports-fg.toml adds, in the wordings their sources print
(CPython's call errors, aiter's chip table, the router's 503 body, SGLang's request validation),
written for each family, not copied from one report: every text is diagnosed through `ddtreed
diagnose`'s own path and must get its category. Near misses (a close wording that belongs elsewhere) must get the same category with and without
the new file: the new rules only reach what they are for."""

from pathlib import Path

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from phrasing_helpers import traceback_text

RULE_DIR = Path(shipped("rules"))
NEW_FILE = "reports-fg.toml"
RULES = load_rules([RULE_DIR])
WITHOUT = load_rules(sorted(path for path in RULE_DIR.glob("*.toml") if path.name != NEW_FILE))


def tb(frames, last, before=""):
    """A traceback as SGLang's scheduler prints it, under its `Scheduler hit an exception` banner."""
    return traceback_text(frames, last, before, line=412, body="    run()",
                          banner="[2026-06-02 08:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):")


SCHED = ["sglang/srt/managers/scheduler.py:run_scheduler_process", "sglang/srt/managers/scheduler.py:event_loop_normal"]
LAUNCH = ["sglang/launch_server.py:<module>", "sglang/srt/server_args.py:prepare_server_args",
          "sglang/srt/server_args.py:from_cli_args"]
TOKENIZER = ["sglang/srt/managers/tokenizer_manager.py:generate_request",
             "sglang/srt/managers/tokenizer_manager.py:_tokenize_one_request",
             "sglang/srt/managers/tokenizer_manager.py:_validate_one_request"]

PHRASINGS = [
    # call-signature-other-wordings: a keyword twice, an arity range, positional-only by name
    ("other", traceback_text(["verl/workers/rollout/sglang_rollout/sglang_rollout.py:__init__", "sglang/srt/entrypoints/engine.py:__init__"],
                             "TypeError: sglang.srt.server_args.ServerArgs() got multiple values for keyword argument 'tp_size'")),
    ("other", tb(SCHED + ["sglang/srt/managers/scheduler.py:process_input_requests"],
                 "TypeError: Scheduler.handle_generate_request() takes from 2 to 3 positional arguments but 4 were given")),
    ("other", "TypeError: get_tokenizer() got some positional-only arguments passed as keyword arguments: 'tokenizer_name'"),
    # call-signature-other-wordings-in-argument-checks: the same raised in server_args.py
    ("other", traceback_text(LAUNCH + ["sglang/srt/server_args.py:__init__"],
                             "TypeError: ServerArgs.__init__() got multiple values for argument 'model_path'")),
    ("other", traceback_text(LAUNCH + ["sglang/srt/server_args.py:__post_init__"],
                             "TypeError: ServerArgs._handle_gpu_memory_settings() takes from 2 to 3 positional arguments but 4 were given")),
    # kernel-library-unknown-gpu-arch: aiter's chip table, in the argument checks and pasted alone
    ("kernel-compile-error", traceback_text(LAUNCH + ["sglang/srt/server_args.py:_handle_amd_specifics",
                                                      "aiter/jit/utils/chip_info.py:get_gfx_custom_op_core"],
                                            "KeyError: \"Unknown GPU architecture: gfx1201. Supported architectures: ['native', 'gfx90a', 'gfx942', 'gfx950']\"")),
    ("kernel-compile-error", "KeyError: \"Unknown GPU architecture: gfx1151. Supported architectures: ['native', 'gfx90a', 'gfx908', 'gfx942']\""),
    # router-has-no-available-worker: the router's 503 body through a client, and as curl prints it
    ("other", "openai.InternalServerError: Error code: 503 - No available workers (all circuits open or unhealthy)"),
    ("other", "$ curl -s http://127.0.0.1:30000/generate -d '{\"text\": \"hi\"}'\nNo available workers (all circuits open or unhealthy)"),
    # request-exceeds-context-length: total budget, prompt alone, the auto-truncate hint
    ("other", "openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': \"Requested token count exceeds the model's maximum context length of 32768 tokens. You requested a total of 33024 tokens: 1024 tokens from the input messages and 32000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.\", 'type': 'BadRequestError', 'param': None, 'code': 400}"),
    ("other", traceback_text(TOKENIZER, "ValueError: The input (140000 tokens) is longer than the model's context length (131072 tokens).")),
    ("other", "ValueError: Input length (9000 tokens) exceeds the maximum allowed length (8192 tokens). Use a shorter input or enable --allow-auto-truncate."),
]

# Close wordings that belong to another family: the new file must not change their category.
NEAR_MISSES = [
    # an unsupported *model* architecture is the checkpoint's problem, not a GPU's
    ("model-load-error", traceback_text(["sglang/srt/model_loader/loader.py:load_model", "sglang/srt/model_loader/utils.py:get_model_architecture"],
                                        "ValueError: Unsupported architectures: ChatGLMForConditionalGeneration. Supported list: ['ChatGLMForCausalLM', 'LlamaForCausalLM']")),
    # a request longer than the KV pool is the pool's size, not the context length
    ("kv-pool-too-small", "ValueError: Request length is longer than the KV cache pool size or the max context length. Please reduce the input length."),
    # a --context-length beyond the model's is a refused option at launch, not a refused request
    ("unsupported-config", traceback_text(LAUNCH + ["sglang/srt/server_args.py:__post_init__", "sglang/srt/configs/model_config.py:__init__"],
                                          "ValueError: User-specified context_length (200000) is greater than the derived context_length (131072). This may lead to incorrect model outputs or CUDA errors.")),
    # Python's familiar call wording keeps its rule
    ("other", tb(SCHED, "TypeError: Scheduler.__init__() got an unexpected keyword argument 'moe_dp_size'")),
]


def category(rules, text):
    diagnoses = diagnose_lines(text.splitlines(), "<phrasing>", rules, None)
    assert diagnoses, "nothing diagnosed"
    return diagnoses[0].match.category, diagnoses[0].match.diagnosis


@pytest.mark.parametrize("expected,text", PHRASINGS, ids=[f"{c}-{n}" for n, (c, _) in enumerate(PHRASINGS)])
def test_phrasing_gets_its_category(expected, text):
    got, diagnosis = category(RULES, text)
    assert got == expected, diagnosis


@pytest.mark.parametrize("expected,text", NEAR_MISSES, ids=[f"{c}-{n}" for n, (c, _) in enumerate(NEAR_MISSES)])
def test_near_miss_keeps_its_category(expected, text):
    assert category(RULES, text)[0] == expected
    assert category(WITHOUT, text)[0] == expected


def test_each_new_rule_is_reached_by_two_phrasings():
    new_rules = {rule.id for rule in RULES.rules} - {rule.id for rule in WITHOUT.rules}
    reached: dict[str, int] = {}
    for _, text in PHRASINGS:
        rule_id = diagnose_lines(text.splitlines(), "<phrasing>", RULES, None)[0].match.rule_id
        reached[rule_id] = reached.get(rule_id, 0) + 1
    assert {rule_id for rule_id in new_rules if reached.get(rule_id, 0) < 2} == set()

