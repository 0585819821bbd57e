"""The launch context an SGLang log carries itself: its `server_args=ServerArgs(…)` (or an older
`Namespace(…)`) line and the version it names, so `ddtreed diagnose LOG` is precise without --config."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Any, Iterable

from ..records import ServiceContext
from .argv import parse_argv

_ARGS_LINE = re.compile(r"(?:server_args|args)\s*=\s*(?:ServerArgs|Namespace)\(")
_VERSION = re.compile(
    r"(?:\bsglang(?:[ _-]?version)?\s*(?:==|:|=|\s)\s*|\bSGLang (?:version|v)\s*:?\s*)"
    r"['\"]?v?(?P<version>\d+\.\d+\.\d+(?:\.post\d+|rc\d+|\.dev\d+)?)", re.IGNORECASE)
MAX_ARGS_CHARS = 200_000


def split_arguments(text: str) -> dict[str, Any]:
    """`a=1, b='x', c=[1, 2], d=Foo(e=3)` → {"a": 1, "b": "x", "c": [1, 2], "d": "Foo(e=3)"}.

    Bracket- and quote-aware; a value Python cannot read as a literal is kept as its text. Stops
    at the closing parenthesis of the call, or where the text ends (a cut-off line)."""
    values: dict[str, Any] = {}
    depth, quote, start, index = 0, "", 0, 0
    pieces: list[str] = []
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break  # the call's own closing parenthesis
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(text[start:index])
            start = index + 1
        index += 1
    pieces.append(text[start:index])
    for piece in pieces:
        name, equals, raw = piece.strip().partition("=")
        if not equals or not name.strip().isidentifier():
            continue
        raw = raw.strip()
        try:
            values[name.strip()] = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            values[name.strip()] = raw
    return values


def server_args_in(lines: Iterable[str]) -> dict[str, Any] | None:
    """The arguments of the first `server_args=ServerArgs(…)` / `Namespace(…)` line."""
    for line in lines:
        if "ServerArgs(" not in line and "Namespace(" not in line:
            continue
        found = _ARGS_LINE.search(line)
        if found:
            return split_arguments(line[found.end():found.end() + MAX_ARGS_CHARS])
    return None


def version_in(lines: Iterable[str]) -> str | None:
    for line in lines:
        if "glang" not in line and "GLang" not in line:
            continue
        found = _VERSION.search(line)
        if found:
            return found.group("version")
    return None


def _argv(arguments: dict[str, Any]) -> list[str]:
    argv = ["python3", "-m", "sglang.launch_server"]
    for name, value in arguments.items():
        if value is None or value is False or value == "..." or value is Ellipsis:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            if value:
                argv += [flag, *(str(item) for item in value)]
        elif isinstance(value, dict):
            continue  # JSON-ish settings: nothing the rules reason with
        else:
            argv += [flag, str(value)]
    return argv


def context_from_log(lines: list[str]) -> ServiceContext | None:
    """A ServiceContext from what the log prints about its own launch; None when it says nothing."""
    arguments = server_args_in(lines)
    version = version_in(lines)
    if arguments is None and version is None:
        return None
    context = parse_argv(_argv(arguments or {}), draft_config_reader=lambda path: None)
    if arguments is not None and "speculative_algorithm" not in arguments:
        context = replace(context, speculative_algorithm=None)
    return replace(context, sglang_version=version)
