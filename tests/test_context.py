"""Launch-argv parsing into a ServiceContext: forms, aliases, booleans, draft config fallbacks."""

from __future__ import annotations

import json
import shlex

import pytest

from ddtreed.context import parse_argv, split_flags

FOUNDING = (
    "python -m sglang.launch_server --model-path moonshotai/Kimi-K2.6 --tp 8 "
    "--speculative-algorithm DDTREE --speculative-draft-model-path SubSir/Kimi-K2.6-DFlash-tmp-long "
    "--speculative-num-draft-tokens 8 --speculative-ddtree-budget 32 --page-size 1 "
    "--attention-backend triton --port 30000 --trust-remote-code"
)


def parse(command: str, reader=lambda path: None):
    return parse_argv(shlex.split(command), draft_config_reader=reader)


def test_founding_argv():
    context = parse(FOUNDING)
    assert context.speculative_algorithm == "DDTREE"
    assert (context.block_size, context.block_size_source) == (8, "flag")
    assert context.ddtree_budget == 32
    assert context.num_draft_tokens == 8
    assert context.tp_size == 8 and context.dp_size == 1 and context.pp_size == 1
    assert context.port == 30000 and context.page_size == 1
    assert context.attention_backend == "triton"
    assert context.model_path == "moonshotai/Kimi-K2.6"
    assert context.draft_model_path == "SubSir/Kimi-K2.6-DFlash-tmp-long"
    assert context.flags["trust-remote-code"] is True
    assert context.argv[0] == "python"


def test_equals_form_and_underscores_are_the_same_flag():
    context = parse("python -m sglang.launch_server --model_path=m --tp_size=4 --dp-size=2 "
                    "--speculative_algorithm=dflash --mem_fraction_static=0.81 --port=31000")
    assert context.tp_size == 4 and context.dp_size == 2
    assert context.speculative_algorithm == "DFLASH"
    assert context.mem_fraction_static == pytest.approx(0.81)
    assert context.port == 31000
    assert context.flags["mem-fraction-static"] == "0.81"


def test_nextn_is_eagle():
    context = parse("python -m sglang.launch_server --model-path m --speculative-algorithm nextn "
                    "--speculative-num-draft-tokens 4")
    assert context.speculative_algorithm == "EAGLE"
    assert context.num_draft_tokens == 4
    assert context.ddtree_budget is None


def test_boolean_flags_do_not_swallow_the_next_token():
    # `--trust-remote-code` and `--disable-cuda-graph` take no value: the next flag stays a flag.
    flags, positionals = split_flags(shlex.split(
        "python -m sglang.launch_server --trust-remote-code --disable-cuda-graph --enable-metrics "
        "--model-path m --skip-server-warmup"))
    assert flags == {"trust-remote-code": True, "disable-cuda-graph": True, "enable-metrics": True,
                     "model-path": "m", "skip-server-warmup": True}
    assert positionals == []
    assert parse("python -m sglang.launch_server --disable-cuda-graph --port 1").disable_cuda_graph


def test_sglang_serve_with_positional_model():
    context = parse("sglang serve Qwen/Qwen3-8B --tp 2 --cuda-graph-bs 1 2 4 16 --max-running-requests 8")
    assert context.model_path == "Qwen/Qwen3-8B"
    assert context.tp_size == 2
    assert context.cuda_graph_max_bs == 16  # the largest listed batch size
    assert context.flags["cuda-graph-bs"] == "1 2 4 16"
    assert context.max_running_requests == 8


def test_cuda_graph_flags_of_both_generations():
    old = parse("python -m sglang.launch_server --model-path m --cuda-graph-max-bs 32")
    new = parse("python -m sglang.launch_server --model-path m --cuda-graph-max-bs-decode 24 "
                "--cuda-graph-backend-decode disabled")
    assert old.cuda_graph_max_bs == 32 and not old.disable_cuda_graph
    assert new.cuda_graph_max_bs == 24 and new.disable_cuda_graph


def test_dflash_block_size_alias_and_ddtree_block_size():
    alias = parse("python -m sglang.launch_server --speculative-algorithm DFLASH "
                  "--speculative-draft-model-path d --speculative-dflash-block-size 10")
    assert (alias.block_size, alias.block_size_source, alias.num_draft_tokens) == (10, "flag", 10)
    fork = parse("python -m sglang.launch_server --speculative-algorithm DDTREE "
                 "--speculative-draft-model-path d --speculative-ddtree-block-size 12 "
                 "--speculative-ddtree-topk-cap 8 --speculative-ddtree-cuda-graph-buckets 1,2,4")
    assert fork.block_size == 12
    assert fork.ddtree_budget == 11  # default: block size - 1
    assert fork.ddtree_options == {"block-size": "12", "topk-cap": "8",
                                   "cuda-graph-buckets": "1,2,4"}


@pytest.mark.parametrize("config, expected", [
    ({"dflash_config": {"block_size": 10}, "block_size": 4}, (10, "draft-config")),
    ({"block_size": 6}, (6, "draft-config")),
    ({"architectures": ["DFlashDraftModel"]}, (16, "default")),
    (None, (16, "default")),
])
def test_block_size_from_draft_config(tmp_path, config, expected):
    draft = tmp_path / "draft"
    draft.mkdir()
    if config is not None:
        (draft / "config.json").write_text(json.dumps(config))
    # The default reader reads <draft path>/config.json from disk.
    context = parse_argv(["python", "-m", "sglang.launch_server", "--speculative-algorithm",
                          "DDTREE", "--speculative-draft-model-path", str(draft)])
    assert (context.block_size, context.block_size_source) == expected
    assert context.ddtree_budget == expected[0] - 1
    assert context.num_draft_tokens == expected[0]


def test_unreadable_draft_config_falls_back_to_default(tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    context = parse_argv(["sglang", "serve", "m", "--speculative-algorithm", "DFLASH",
                          "--speculative-draft-model-path", str(tmp_path)])
    assert (context.block_size, context.block_size_source) == (16, "default")


def test_no_speculation_has_no_block_size():
    context = parse("python3 -m sglang.launch_server --model-path m --host 0.0.0.0")
    assert context.speculative_algorithm is None
    assert context.block_size is None and context.ddtree_budget is None
    assert context.host == "0.0.0.0" and context.port == 30000


def test_wrapped_launch_and_negative_values():
    # A wrapper before the launcher is skipped; a negative number is a value, not a flag.
    context = parse("numactl --interleave=all python -u -m sglang.launch_server --model-path m "
                    "--chunked-prefill-size -1 --tp 2")
    assert context.flags["chunked-prefill-size"] == "-1"
    assert "interleave" not in context.flags
    assert context.tp_size == 2


def test_speculative_dflash_enable_ddtree_fork_flag():
    context = parse("python -m sglang.launch_server --speculative-dflash-enable-ddtree "
                    "--speculative-num-draft-tokens 8 --speculative-draft-model-path d")
    assert context.speculative_algorithm == "DDTREE"
    assert context.ddtree_budget == 7
