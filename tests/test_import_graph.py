"""The module graph of ddtreed/ has no circle: every import (top-level, inside a function, or
under TYPE_CHECKING) points down the pipeline. Parsed with ast, nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ddtreed"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def _targets(node: ast.AST, importer: str, is_package: bool, known: set[str]) -> set[str]:
    base = importer if is_package else importer.rpartition(".")[0]
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            anchor = base
            for _ in range(node.level - 1):
                anchor = anchor.rpartition(".")[0]
            source = f"{anchor}.{node.module}" if node.module else anchor
        else:
            source = node.module or ""
        names = [source] + [f"{source}.{alias.name}" for alias in node.names]
    else:
        return set()
    found = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name.startswith("ddtreed."):
            found.add(name)
            # importing a.b.c runs a.b's __init__ first, unless the importer is inside a.b already
            parent = name.rpartition(".")[0]
            while parent.startswith("ddtreed.") and not importer.startswith(parent + "."):
                found.add(parent)
                parent = parent.rpartition(".")[0]
    # The importer's own packages are being initialised already when it runs (`from . import x`
    # in a submodule loads the sibling x, it does not re-enter the package): not an edge.
    return {name for name in found if name != importer and not importer.startswith(name + ".")}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        graph[name] = set().union(*(_targets(node, name, is_package, set(known)) for node in ast.walk(tree)))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return result


def test_the_import_graph_has_no_cycle():
    assert cycles(import_graph()) == []


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_middle_is_wired_one_way():
    graph = import_graph()
    stages = ("ddtreed.health.verify", "ddtreed.loop.preflight_gate", "ddtreed.remediation.ladder",
              "ddtreed.loop.wiring", "ddtreed.service.service_run", "ddtreed.loop.lifecycle",
              "ddtreed.records", "ddtreed.loop.recovery", "ddtreed.health.serving",
              "ddtreed.ops.notify", "ddtreed.ops.status", "ddtreed.ops.progress")
    for stage in stages:
        assert "ddtreed.loop.daemon" not in graph[stage], stage
    # the vocabulary imports nothing of ours; the records only the vocabulary (ddtreed/vocabulary.py:
    # the dataclass-free part, so `ddtreed status` starts without the records' dataclasses)
    assert graph["ddtreed.vocabulary"] == set()
    assert graph["ddtreed.records"] == {"ddtreed.vocabulary"}


def test_no_module_calls_another_modules_private_method():
    """`x._name(...)` on anything but self/cls is reaching into another module's internals."""
    public_underscored = {"_replace", "_asdict", "_make", "_exit"}  # namedtuple API, os._exit
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                attribute, owner = node.func.attr, node.func.value
                private = attribute.startswith("_") and not attribute.startswith("__") \
                    and attribute not in public_underscored
                if private and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls", "super")):
                    if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                        continue
                    offenders.append(f"{name}:{node.lineno}: .{attribute}()")
    assert offenders == []


def test_the_daemon_holds_the_loop_only():
    """Issue 13's bound: what is not the loop or a transition lives in its stage module."""
    lines = modules()["ddtreed.loop.daemon"].read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"ddtreed daemon module: {lines} lines"


def test_one_meaning_per_module_name():
    """No two modules of ddtreed/ share a file name (the demo's separate engine package aside)."""
    seen: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name not in ("__init__.py", "__main__.py") and "ddtreed_demo_engine" not in name:
            seen.setdefault(path.name, []).append(name)
    assert {base: names for base, names in seen.items() if len(names) > 1} == {}
