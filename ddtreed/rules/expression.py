"""The `when` predicate language: a tiny, safe subset of Python with three-valued logic.

Allowed: names, numbers, strings, None, tuples/lists of constants, comparisons (== != < <= > >=
in, not in), `and`/`or`/`not`, and + - * //. A name that is missing or None is UNKNOWN, and
UNKNOWN propagates, so a rule without launch context still matches at category level.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any, Mapping


class ExpressionError(ValueError):
    """A `when` expression uses syntax outside the whitelist."""


class _Unknown:
    """The third truth value: not enough context to decide."""

    def __repr__(self) -> str:
        return "unknown"

    def __bool__(self) -> bool:
        raise TypeError("UNKNOWN has no truth value; test `is UNKNOWN` first")


UNKNOWN = _Unknown()

_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.FloorDiv: operator.floordiv}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


@dataclass(frozen=True)
class Expression:
    """A validated `when` predicate: `.evaluate(names)` gives True, False or UNKNOWN."""

    source: str
    tree: ast.Expression
    names: frozenset[str]

    def evaluate(self, names: Mapping[str, Any]) -> Any:
        try:
            return _truth(_eval(self.tree.body, names))
        except (TypeError, ZeroDivisionError, ValueError):
            # e.g. comparing a string flag with a number: the rule cannot decide, so say so.
            return UNKNOWN


def compile_expression(source: str) -> Expression:
    """Parse and check `source` against the whitelist; raise ExpressionError naming the problem."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"invalid syntax at column {error.offset or 0}: {error.msg}") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        _check_node(node, names)
    return Expression(source=source, tree=tree, names=frozenset(names))


def _check_node(node: ast.AST, names: set[str]) -> None:
    if isinstance(node, ast.Name):
        if not isinstance(node.ctx, ast.Load):
            raise ExpressionError(f"cannot assign to {node.id!r}")
        names.add(node.id)
        return
    if isinstance(node, ast.Constant):
        if node.value is not None and not isinstance(node.value, (int, float, str)):
            raise ExpressionError(f"constant {node.value!r} is not a number, string or None")
        return
    if isinstance(node, ast.BinOp) and type(node.op) not in _ARITHMETIC:
        raise ExpressionError(f"operator {type(node.op).__name__} is not allowed (use + - * //)")
    if isinstance(node, ast.UnaryOp) and type(node.op) not in (*_UNARY, ast.Not):
        raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")
    if isinstance(node, ast.Compare) and any(type(op) not in _COMPARE for op in node.ops):
        raise ExpressionError("only == != < <= > >= in, not in comparisons are allowed")
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Not, ast.BinOp, ast.UnaryOp,
               ast.Compare, ast.Tuple, ast.List, ast.Load, *_ARITHMETIC, *_UNARY, *_COMPARE)
    if not isinstance(node, allowed):
        raise ExpressionError(f"{type(node).__name__} is not allowed in a `when` expression")


def _truth(value: Any) -> Any:
    return UNKNOWN if value is UNKNOWN else bool(value)


def _eval(node: ast.AST, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        value = names.get(node.id)
        return UNKNOWN if value is None else value
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(element, names) for element in node.elts)
    if isinstance(node, ast.BoolOp):
        return _bool_op(node, names)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names)
        if value is UNKNOWN:
            return UNKNOWN
        return (not value) if isinstance(node.op, ast.Not) else _UNARY[type(node.op)](value)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, names), _eval(node.right, names)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        return _compare(node, names)
    raise ExpressionError(f"{type(node).__name__} is not allowed")


def _bool_op(node: ast.BoolOp, names: Mapping[str, Any]) -> Any:
    # Kleene logic: a definite False decides `and`, a definite True decides `or`.
    decisive = isinstance(node.op, ast.Or)
    saw_unknown = False
    for operand in node.values:
        value = _truth(_eval(operand, names))
        if value is UNKNOWN:
            saw_unknown = True
        elif value is decisive:
            return decisive
    return UNKNOWN if saw_unknown else (not decisive)


def _compare(node: ast.Compare, names: Mapping[str, Any]) -> Any:
    left = _eval(node.left, names)
    result: Any = True
    for op, right_node in zip(node.ops, node.comparators):
        right = _eval(right_node, names)
        outcome = _compare_one(op, left, right, right_node)
        if outcome is False:
            return False
        if outcome is UNKNOWN:
            result = UNKNOWN
        left = right
    return result


def _compare_one(op: ast.cmpop, left: Any, right: Any, right_node: ast.AST) -> Any:
    # `x == None` asks "is x unknown/unset?": the one comparison UNKNOWN can answer.
    if isinstance(right_node, ast.Constant) and right_node.value is None:
        if isinstance(op, ast.Eq):
            return left is UNKNOWN or left is None
        if isinstance(op, ast.NotEq):
            return not (left is UNKNOWN or left is None)
    if left is UNKNOWN or right is UNKNOWN:
        return UNKNOWN
    if isinstance(right, tuple) and any(element is UNKNOWN for element in right):
        return UNKNOWN
    return bool(_COMPARE[type(op)](left, right))
