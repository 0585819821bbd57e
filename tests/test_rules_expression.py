"""The `when` language: whitelist, three-valued logic, unknown names."""

import pytest

from ddtreed.rules import UNKNOWN, ExpressionError, compile_expression


@pytest.mark.parametrize("source, names, expected", [
    ("a == block_size and b == ddtree_budget + 1", {"a": 8, "b": 33, "block_size": 8, "ddtree_budget": 32}, True),
    ("a == block_size and b == ddtree_budget + 1", {"a": 8, "b": 17, "block_size": 8, "ddtree_budget": 32}, False),
    ("a == block_size and b == ddtree_budget + 1", {"a": 8, "b": 33}, UNKNOWN),
    ("a == block_size and b == ddtree_budget + 1", {"a": 9, "b": 33}, UNKNOWN),
    ("a == 1 and block_size == 8", {"a": 2}, False),  # a definite False decides `and`
    ("a == 2 or block_size == 8", {"a": 2}, True),  # a definite True decides `or`
    ("not block_size", {}, UNKNOWN),
    ("cuda_graph_max_bs == None", {}, True),
    ("cuda_graph_max_bs != None", {"cuda_graph_max_bs": 4}, True),
    ('speculative_algorithm in ("DDTREE", "DFLASH")', {"speculative_algorithm": "DFLASH"}, True),
    ("a * (ddtree_budget + 1) == b * block_size", {"a": 16, "b": 66, "ddtree_budget": 32, "block_size": 8}, True),
    ("a // 2 - 1 == 3", {"a": 8}, True),
    ("a < 'x'", {"a": 1}, UNKNOWN),  # a type clash cannot decide
])
def test_evaluates_with_three_values(source, names, expected):
    assert compile_expression(source).evaluate(names) is expected


@pytest.mark.parametrize("source", [
    "__import__('os').system('true')", "a.b", "a[0]", "lambda: 1", "a if b else c", "a ** 2",
    "open('x')", "a == (b := 1)", "[x for x in y]", "a & 1", "a ==",
])
def test_refuses_anything_outside_the_whitelist(source):
    with pytest.raises(ExpressionError):
        compile_expression(source)


def test_reports_the_names_it_uses():
    assert compile_expression("a == block_size + n0").names == {"a", "block_size", "n0"}
