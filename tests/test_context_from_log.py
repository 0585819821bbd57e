"""The launch context a log prints about itself: server_args=ServerArgs(…), Namespace(…), version."""

from ddtreed.context.from_log import (
    context_from_log,
    server_args_in,
    split_arguments,
    version_in,
)


def test_server_args_line_gives_the_ddtree_context():
    line = ("[2026-11-20 09:14:02] server_args=ServerArgs(model_path='m', tp_size=8, speculative_algorithm='DDTREE', "
            "speculative_num_draft_tokens=8, speculative_ddtree_budget=32, mem_fraction_static=0.88, "
            "disable_cuda_graph=False, cuda_graph_bs=[1, 2, 4], json_model_override_args='{}', "
            "lora_paths={'a': 'b'}, page_size=1, ...)")
    context = context_from_log(["noise", line])
    assert (context.speculative_algorithm, context.block_size, context.ddtree_budget) == ("DDTREE", 8, 32)
    assert context.tp_size == 8 and context.mem_fraction_static == 0.88 and context.page_size == 1
    assert context.cuda_graph_max_bs == 4 and context.disable_cuda_graph is False


def test_older_namespace_line_and_a_cut_off_line():
    assert server_args_in(["args=Namespace(model_path='x', tp_size=2, speculative_algorithm=None)"]) == {
        "model_path": "x", "tp_size": 2, "speculative_algorithm": None}
    cut = server_args_in(["server_args=ServerArgs(model_path='x', tp_size=4, chunked_prefill_si"])
    assert cut["tp_size"] == 4 and "chunked_prefill_si" not in cut


def test_quotes_and_brackets_do_not_split_values():
    assert split_arguments("a='x, y', b=[1, (2, 3)], c=Foo(d=1, e='f'), g=\"h)\")") == {
        "a": "x, y", "b": [1, (2, 3)], "c": "Foo(d=1, e='f')", "g": "h)"}


def test_versions_the_log_names():
    assert version_in(["INFO sglang version: 0.5.16"]) == "0.5.16"
    assert version_in(["sglang==0.4.6.post1 installed"]) == "0.4.6.post1"
    assert version_in(["sglang: 0.5.3rc0"]) == "0.5.3rc0"
    assert version_in(["nothing here"]) is None


def test_a_log_without_either_has_no_context():
    assert context_from_log(["[2026-01-01 00:00:00] Decode batch, #running-req: 1"]) is None
