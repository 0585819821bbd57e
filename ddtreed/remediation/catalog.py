"""Remediation files: load and validate `remediations/*.toml` into a Catalog.

Errors read `file:line: field: problem`, and name the first problem only (fail fast at start).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..paths import untrusted
from . import flags

KINDS = ("patch", "args", "env")
ACTIONS = ("add", "remove", "set", "scale", "step", "replace-value", "remove-prefix")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_TOP = {"id", "kind", "title", "description", "categories", "diagnostic", "when_algorithm",
        "layouts", "operations", "env"}
_LAYOUT = {"name", "distribution", "target", "versions", "marker", "anchor",
           "insert_after", "insert_before", "replacement"}
_OPERATION = {"action", "flag", "value", "factor", "delta", "minimum", "maximum", "when_absent",
              "from", "to", "prefix"}
_ENV = {"set", "unset"}


class RemediationError(ValueError):
    """A remediation file problem, one line: `file:line: field: problem`."""


@dataclass(frozen=True)
class VersionRange:
    text: str
    bounds: tuple[tuple[str, tuple[int, ...]], ...]

    def contains(self, version: str | None) -> bool | None:
        if not self.bounds:
            return True
        if version is None:
            return None
        parsed = flags.parse_version(version)
        checks = {">=": parsed.__ge__, ">": parsed.__gt__, "<=": parsed.__le__, "<": parsed.__lt__,
                  "==": parsed.__eq__}
        return all(checks[op](bound) for op, bound in self.bounds)


@dataclass(frozen=True)
class Layout:
    name: str
    distribution: str  # whose .dist-info/RECORD vouches for the target
    target: str  # relative to site-packages
    versions: VersionRange
    marker: str  # present in the file exactly when this patch is applied
    anchor: str
    action: str  # insert_after | insert_before | replacement
    text: str
    line: int = 0

    def patched_fragment(self) -> str:
        if self.action == "insert_after":
            return self.anchor + self.text
        if self.action == "insert_before":
            return self.text + self.anchor
        return self.text


@dataclass(frozen=True)
class Operation:
    action: str
    flag: str = ""  # a logical name from flags.FLAGS, or a literal `--flag` (remove only)
    value: str | None = None
    factor: float | None = None
    delta: float | None = None
    minimum: float | None = None
    maximum: float | None = None
    when_absent: str | None = None
    from_value: str | None = None
    to_value: str | None = None
    prefix: str = ""


@dataclass(frozen=True)
class Remediation:
    id: str
    kind: str
    title: str
    description: str = ""
    categories: tuple[str, ...] = ()
    diagnostic: bool = False  # env changes that only make the next crash more telling
    when_algorithm: tuple[str, ...] = ()  # applicable only under these speculative algorithms
    layouts: tuple[Layout, ...] = ()
    operations: tuple[Operation, ...] = ()
    env_set: dict[str, str] = field(default_factory=dict)
    env_unset: tuple[str, ...] = ()
    source: str = ""


@dataclass
class Catalog:
    remediations: dict[str, Remediation]

    def get(self, remediation_id: str) -> Remediation:
        try:
            return self.remediations[remediation_id]
        except KeyError:
            known = ", ".join(sorted(self.remediations)) or "none loaded"
            raise KeyError(f"unknown remediation {remediation_id!r} (known: {known})") from None

    def __iter__(self):
        return iter(sorted(self.remediations.values(), key=lambda item: item.id))

    def __contains__(self, remediation_id: str) -> bool:
        return remediation_id in self.remediations


class _File:
    """One TOML file's text, so errors can point at the line a key is on."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise RemediationError(f"{path}:0: file: not UTF-8 text") from None
        except OSError as error:
            raise RemediationError(f"{path}:0: file: cannot read: {error.strerror}") from None
        self.lines = self.text.splitlines()

    def line_of(self, key: str, table: str | None = None, index: int = 0) -> int:
        start = 0
        if table is not None:
            headers = [n for n, line in enumerate(self.lines) if line.strip() == f"[[{table}]]"]
            if index < len(headers):
                start = headers[index]
        for number in range(start, len(self.lines)):
            if re.match(rf"\s*{re.escape(key)}\s*=", self.lines[number]):
                return number + 1
        return start + 1

    def error(self, line: int, where: str, problem: str) -> RemediationError:
        return RemediationError(f"{self.path}:{line}: {where}: {problem}")


def _string(file: _File, raw: dict, key: str, where: str, line: int, required: bool = True) -> str:
    value = raw.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise file.error(line, where, "required, a non-empty string" if value is None
                         else f"must be a non-empty string, got {value!r}")
    return value


def parse_range(text: str) -> VersionRange:
    if text.strip() in ("", "*"):
        return VersionRange(text, ())
    bounds = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(>=|<=|==|>|<)\s*(\d+(?:\.\d+)*)\s*", part)
        if not match:
            raise ValueError(f"bad version bound {part.strip()!r} (use e.g. '>=0.5.11,<0.5.13' or '*')")
        bounds.append((match.group(1), flags.parse_version(match.group(2))))
    return VersionRange(text, tuple(bounds))


def _entry(file: _File, raw: Any, table: str, index: int, first: str, known: set[str]) -> tuple[str, int]:
    """(`table[index]`, its line) after checking the entry is a table with only known keys."""
    where = f"{table}[{index}]"
    line = file.line_of(first, table, index)
    if not isinstance(raw, dict):
        raise file.error(line, where, "must be a table")
    unknown = sorted(set(raw) - known)
    if unknown:
        raise file.error(file.line_of(unknown[0], table, index), f"{where}.{unknown[0]}",
                         f"unknown key (known: {', '.join(sorted(known))})")
    return where, line


def _layout(file: _File, raw: Any, index: int) -> Layout:
    where, line = _entry(file, raw, "layouts", index, "name", _LAYOUT)

    def text(key: str, required: bool = True) -> str:
        return _string(file, raw, key, f"{where}.{key}", file.line_of(key, "layouts", index), required)

    target = text("target")
    if target.startswith("/") or ".." in Path(target).parts:
        raise file.error(file.line_of("target", "layouts", index), f"{where}.target",
                         "must be a relative path inside site-packages without '..'")
    actions = [key for key in ("insert_after", "insert_before", "replacement") if key in raw]
    if len(actions) != 1:
        raise file.error(line, where, "needs exactly one of insert_after, insert_before, replacement")
    try:
        versions = parse_range(text("versions"))
    except ValueError as error:
        raise file.error(file.line_of("versions", "layouts", index), f"{where}.versions", str(error)) from None
    layout = Layout(name=text("name"), distribution=text("distribution"), target=target,
                    versions=versions, marker=text("marker"), anchor=text("anchor"),
                    action=actions[0], text=text(actions[0]), line=line)
    if layout.marker not in layout.text:
        raise file.error(file.line_of(layout.action, "layouts", index), f"{where}.{layout.action}",
                         f"must contain the marker {layout.marker!r} (it makes the patch idempotent)")
    if layout.marker in layout.anchor:
        raise file.error(file.line_of("anchor", "layouts", index), f"{where}.anchor", "must not contain the marker")
    return layout


def _number(file: _File, raw: dict, key: str, where: str, line: int) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise file.error(line, f"{where}.{key}", f"must be a number, got {value!r}")
    return float(value)


def _operation(file: _File, raw: Any, index: int) -> Operation:
    where, line = _entry(file, raw, "operations", index, "action", _OPERATION)
    action = raw.get("action")
    if action not in ACTIONS:
        raise file.error(line, f"{where}.action", f"must be one of {', '.join(ACTIONS)}, got {action!r}")
    if action == "remove-prefix":
        prefix = _string(file, raw, "prefix", f"{where}.prefix", file.line_of("prefix", "operations", index))
        if not prefix.startswith("--"):
            raise file.error(file.line_of("prefix", "operations", index), f"{where}.prefix", "must start with --")
        return Operation(action=action, prefix=prefix)
    flag_line = file.line_of("flag", "operations", index)
    flag = _string(file, raw, "flag", f"{where}.flag", flag_line)
    if flag.startswith("--") and action != "remove":
        raise file.error(flag_line, f"{where}.flag", "literal --flags are only allowed for 'remove'; "
                         f"use a name from ddtreed/remediation/flags.py ({', '.join(flags.FLAGS)})")
    if not flag.startswith("--") and flag not in flags.FLAGS:
        raise file.error(flag_line, f"{where}.flag", f"unknown flag {flag!r} (known: {', '.join(flags.FLAGS)})")
    numbers = {key: _number(file, raw, key, where, file.line_of(key, "operations", index))
               for key in ("factor", "delta", "minimum", "maximum")}
    for key in ("value", "when_absent", "from", "to"):
        if key in raw and not isinstance(raw[key], str):
            raise file.error(file.line_of(key, "operations", index), f"{where}.{key}",
                             f"must be a string, got {raw[key]!r}")
    needs = {"scale": "factor", "step": "delta", "replace-value": "to"}
    if action in needs and raw.get(needs[action]) is None:
        raise file.error(line, where, f"action {action!r} needs {needs[action]}")
    return Operation(action=action, flag=flag, value=raw.get("value"), when_absent=raw.get("when_absent"),
                     from_value=raw.get("from"), to_value=raw.get("to"), **numbers)


def _load_file(path: Path) -> Remediation:
    file = _File(path)
    try:
        raw = tomllib.loads(file.text)
    except tomllib.TOMLDecodeError as error:
        raise RemediationError(f"{path}: invalid TOML: {error}") from None
    unknown = sorted(set(raw) - _TOP)
    if unknown:
        raise file.error(file.line_of(unknown[0]), unknown[0], f"unknown key (known: {', '.join(sorted(_TOP))})")
    remediation_id = _string(file, raw, "id", "id", file.line_of("id"))
    if not _ID.match(remediation_id):
        raise file.error(file.line_of("id"), "id", "lower-case letters, digits and dashes only")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise file.error(file.line_of("kind"), "kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    sections = {"patch": "layouts", "args": "operations", "env": "env"}
    for other_kind, key in sections.items():
        if key in raw and other_kind != kind:
            raise file.error(file.line_of(key), key, f"not allowed for kind {kind!r}")
    if sections[kind] not in raw:
        raise file.error(file.line_of("kind"), sections[kind], f"required for kind {kind!r}")
    lists = {}
    for key in ("categories", "when_algorithm"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise file.error(file.line_of(key), key, "must be a list of strings")
        lists[key] = tuple(value)
    if not isinstance(raw.get("diagnostic", False), bool):
        raise file.error(file.line_of("diagnostic"), "diagnostic", "must be true or false")
    layouts = tuple(_layout(file, item, n) for n, item in enumerate(_list(file, raw, "layouts")))
    operations = tuple(_operation(file, item, n) for n, item in enumerate(_list(file, raw, "operations")))
    env_set, env_unset = _env(file, raw.get("env")) if kind == "env" else ({}, ())
    return Remediation(
        id=remediation_id, kind=kind, title=_string(file, raw, "title", "title", file.line_of("title")),
        description=_string(file, raw, "description", "description", file.line_of("description"), False),
        categories=lists["categories"], diagnostic=raw.get("diagnostic", False),
        when_algorithm=tuple(item.upper() for item in lists["when_algorithm"]), layouts=layouts,
        operations=operations, env_set=env_set, env_unset=env_unset, source=str(path))


def _list(file: _File, raw: dict, key: str) -> list:
    value = raw.get(key, [])
    if not isinstance(value, list) or (key in raw and not value):
        raise file.error(file.line_of(key), key, "must be a non-empty array of tables")
    return value


def _env(file: _File, raw: Any) -> tuple[dict[str, str], tuple[str, ...]]:
    line = file.line_of("set")
    if not isinstance(raw, dict):
        raise file.error(line, "env", "must be a table with set and/or unset")
    unknown = sorted(set(raw) - _ENV)
    if unknown:
        raise file.error(file.line_of(unknown[0]), f"env.{unknown[0]}", "unknown key (known: set, unset)")
    values = raw.get("set", {})
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        raise file.error(line, "env.set", "must be a table of strings")
    unset = raw.get("unset", [])
    if not isinstance(unset, list) or not all(isinstance(v, str) for v in unset):
        raise file.error(file.line_of("unset"), "env.unset", "must be a list of strings")
    if not values and not unset:
        raise file.error(line, "env", "sets and unsets nothing")
    return dict(values), tuple(unset)


def load_remediations(dirs: Iterable[str | Path]) -> Catalog:
    """Every `*.toml` in `dirs`, validated; a duplicate id is an error naming both files.

    A file or directory that others could edit, or a link out of `dirs`, is refused: remediations
    decide what the daemon patches and runs.
    """
    dirs = [Path(directory) for directory in dirs]
    found: dict[str, Remediation] = {}
    for directory in dirs:
        if not directory.is_dir():
            raise RemediationError(f"{directory}: not a directory of remediation files")
        _check_trusted(directory, [directory], "directory")
        for path in sorted(directory.glob("*.toml")):
            _check_trusted(path, dirs, "file")
            remediation = _load_file(path)
            if remediation.id in found:
                raise RemediationError(f"{path}:{_File(path).line_of('id')}: id: duplicate "
                                       f"{remediation.id!r}, also in {found[remediation.id].source}")
            found[remediation.id] = remediation
    if not found:  # an empty catalog would turn every rule's ladder into nothing to do
        raise RemediationError(f"{', '.join(str(d) for d in dirs) or '(none given)'}: no remediations: "
                               "no *.toml remediation file there")
    return Catalog(found)


def _check_trusted(path: Path, roots: list[Path], kind: str) -> None:
    try:
        refusal = untrusted(path, roots)
    except OSError as error:
        refusal = f"cannot examine: {error.strerror}"
    if refusal:
        raise RemediationError(f"{path}:0: {kind}: {refusal}")
