"""Read rule files: TOML `[[rule]]` tables, validated into Rules; errors name file:line: field."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Collection, Iterable

from ..paths import untrusted
from ..records import CATEGORIES, CRASH_KINDS  # CRASH_KINDS: the one list of kinds (records)
from .evidence import EXCEPTION_FAMILIES, FRAME_FAMILIES, MESSAGE_FAMILIES, PHASES
from .expression import ExpressionError, compile_expression
from .model import (
    CONTEXT_NAMES,
    CRASH_NAMES,
    Conditions,
    Rule,
    short_exception,
    template_fields,
)
from .regex import PatternError, RulePattern, rule_pattern

REQUIRED = ("id", "category", "title", "meaning", "match", "diagnosis")
OPTIONAL = ("when", "precise", "remediations", "advice", "sglang_versions", "references", "priority", "secondary",
            "hearsay")
MATCH_KEYS = ("kind", "exception", "message", "message_absent", "wrapper", "inner_exception", "inner_message",
              "prefix", "frames", "frames_absent", "exit_code", "signal", "phase", "frame_family",
              "exception_family", "message_family", "raised_in", "message_family_absent", "context")
_ID = re.compile(r"[a-z0-9][a-z0-9-]*\Z")
_VERSION_CLAUSE = re.compile(r"\s*(>=|<=|==|<|>)\s*\d+(\.\d+)*(\.post\d+)?\s*\Z")


class RuleError(ValueError):
    """One or more rule-file problems, each `file:line: field: problem`."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{problems[0]}{more}")


class NoRulesError(RuleError):
    """Nothing to load at all: no rule file, or files without a single [[rule]]."""


def rule_files(dirs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every `*.toml` in the given directories (or the files themselves), sorted per directory.

    A missing or refused directory is listed itself, so that parse_files reports it.
    """
    files: list[Path] = []
    for entry in dirs:
        path = Path(entry)
        trusted = path.is_dir() and _refusal(path, [path]) is None
        files.extend(sorted(path.glob("*.toml")) if trusted else [path])
    return files


def _refusal(path: Path, roots: Collection[Path]) -> str | None:
    try:
        return untrusted(path, roots)
    except FileNotFoundError:
        return None  # reported by _read as a missing file
    except OSError as error:
        return f"cannot examine: {error.strerror}"


def _roots(files: Iterable[Path]) -> set[Path]:
    """The configured directories behind `files`: rule_files names each file under its directory."""
    return {path.parent for path in files if not path.is_dir()}


def parse_files(files: Iterable[Path], remediation_ids: Collection[str] | None = None,
                dirs: Iterable[str | os.PathLike[str]] = ()) -> list[Rule]:
    """Validated rules from `files` (found in `dirs`); raise RuleError listing every problem found."""
    files = list(files)
    roots = _roots(files)
    problems: list[str] = []
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    patterns: dict[str, RulePattern] = {}  # one per distinct text, shared by the rules naming it
    for path in files:
        for rule in _parse_file(path, roots, problems, remediation_ids, patterns):
            if rule.id in seen:
                problems.append(f"{rule.source}:{rule.line}: id: duplicate rule id {rule.id!r} "
                                f"(first defined at {seen[rule.id]})")
                continue
            seen[rule.id] = f"{rule.source}:{rule.line}"
            rules.append(rule)
    if problems:
        raise RuleError(problems)
    if not rules:  # never "ok: 0 rule(s)": every crash would silently be `unknown`
        where = ", ".join(str(d) for d in dirs) or ", ".join(str(path) for path in files) or "(none given)"
        raise NoRulesError([f"{where}: no rules: no *.toml file there defines a [[rule]]"])
    return rules


def _parse_file(path: Path, roots: Collection[Path], problems: list[str],
                remediation_ids: Collection[str] | None, patterns: dict[str, RulePattern]) -> list[Rule]:
    text = _read(path, roots, problems)
    if text is None:
        return []
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line = re.search(r"line (\d+)", str(error))
        problems.append(f"{path}:{line.group(1) if line else 1}: toml: {error}")
        return []
    locator = _Locator(text)
    for key in raw:
        if key != "rule":
            problems.append(f"{path}:{locator.top_level(key)}: {key}: unknown top-level key (use [[rule]] tables)")
    tables = raw.get("rule", [])
    if not isinstance(tables, list):
        problems.append(f"{path}:1: rule: must be an array of tables ([[rule]])")
        return []
    rules = []
    for index, table in enumerate(tables):
        where = _Where(path, locator, index)
        rule = _build(table, where, problems, remediation_ids, patterns)
        if rule is not None:
            rules.append(rule)
    return rules


def _read(path: Path, roots: Collection[Path], problems: list[str]) -> str | None:
    refusal = _refusal(path, [path] if path.is_dir() else roots)
    if refusal:
        # Rules choose what the daemon patches: anyone able to edit them could steer it.
        kind = "directory" if path.is_dir() else "file"
        problems.append(f"{path}:0: {kind}: {refusal}")
        return None
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.append(f"{path}:0: file: no such rule file or directory")
    except OSError as error:
        problems.append(f"{path}:0: file: cannot read: {error.strerror}")
    except UnicodeDecodeError:
        problems.append(f"{path}:0: file: not UTF-8 text")
    return None


class _Locator:
    """Line numbers for tables and keys, which tomllib does not report: found by scanning."""

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.headers = [n for n, line in enumerate(self.lines, 1) if re.match(r"\s*\[\[\s*rule\s*\]\]", line)]

    def top_level(self, key: str) -> int:
        return self._find(1, self.headers[0] if self.headers else len(self.lines) + 1, key) or 1

    def rule(self, index: int) -> tuple[int, int]:
        start = self.headers[index] if index < len(self.headers) else 1
        end = self.headers[index + 1] if index + 1 < len(self.headers) else len(self.lines) + 1
        return start, end

    def key(self, index: int, key: str, section: str | None = None) -> int:
        start, end = self.rule(index)
        if section:
            header = self._find(start, end, None, rf"\s*\[\s*rule\.{re.escape(section)}\s*\]")
            if header:
                start = header
            else:
                inline = self._find(start, end, section)
                return inline or start
        return (self._find(start, end, key)
                or self._find(start, end, None, rf"\s*\[\s*rule\.{re.escape(key)}\s*\]") or start)

    def _find(self, start: int, end: int, key: str | None, pattern: str | None = None) -> int | None:
        pattern = pattern or rf"\s*[\"']?{re.escape(key or '')}[\"']?\s*="
        for number in range(start, min(end, len(self.lines) + 1)):
            if re.match(pattern, self.lines[number - 1]):
                return number
        return None


class _Where:
    def __init__(self, path: Path, locator: _Locator, index: int):
        self.path, self.locator, self.index = path, locator, index

    @property
    def line(self) -> int:
        return self.locator.rule(self.index)[0]

    def at(self, key: str, problem: str, section: str | None = None) -> str:
        field = f"{section}.{key}" if section else key
        return f"{self.path}:{self.locator.key(self.index, key, section)}: {field}: {problem}"


def _build(table: Any, where: _Where, problems: list[str],
           remediation_ids: Collection[str] | None, patterns: dict[str, RulePattern]) -> Rule | None:
    if not isinstance(table, dict):
        problems.append(f"{where.path}:{where.line}: rule: must be a table")
        return None
    before = len(problems)
    for key in table:
        if key not in REQUIRED and key not in OPTIONAL:
            problems.append(where.at(key, f"unknown key (known: {', '.join(REQUIRED + OPTIONAL)})"))
    for key in REQUIRED:
        if key not in table:
            problems.append(f"{where.path}:{where.line}: {key}: missing (required: {', '.join(REQUIRED)})")
    if len(problems) > before:
        return None
    fields = _Fields(table, where, problems)
    rule_id = fields.text("id")
    if rule_id and not _ID.match(rule_id):
        problems.append(where.at("id", f"{rule_id!r} must be lower-case words joined by '-'"))
    category = fields.text("category")
    if category and category not in CATEGORIES:
        problems.append(where.at("category", f"unknown category {category!r} (known: {', '.join(CATEGORIES)})"))
    conditions, group_names = _conditions(table["match"], where, problems, patterns)
    when = fields.expression("when", group_names)
    precise = fields.flag("precise")
    if precise and when is None:
        problems.append(where.at("precise", "a precise rule needs a `when` predicate"))
    remediations = fields.strings("remediations")
    if remediation_ids is not None:
        for unknown in [r for r in remediations if r not in remediation_ids]:
            problems.append(where.at("remediations", f"unknown remediation id {unknown!r} "
                                     f"(not in the remediation catalog)"))
    versions = fields.text("sglang_versions")
    if versions and not all(_VERSION_CLAUSE.match(c) for c in versions.split(",")):
        problems.append(where.at("sglang_versions", f"{versions!r} is not like '>=0.4.6,<=0.5.23'"))
    diagnosis, advice = fields.template("diagnosis"), fields.template("advice")
    priority = fields.integer("priority")
    secondary = fields.flag("secondary")
    if secondary and remediations:
        problems.append(where.at("secondary", "a secondary rule (a notice that another failure happened) "
                                 "cannot name remediations: the cause is printed elsewhere"))
    hearsay = fields.flag("hearsay")
    if hearsay and remediations:
        problems.append(where.at("hearsay", "a hearsay rule (another program's report of a death) "
                                 "cannot name remediations"))
    if len(problems) > before or conditions is None:
        return None
    return Rule(
        id=rule_id, category=category, title=fields.text("title"), meaning=fields.text("meaning"),
        conditions=conditions, diagnosis=diagnosis, remediations=tuple(remediations), when=when,
        precise=precise, advice=advice, sglang_versions=versions,
        references=tuple(fields.strings("references")), priority=priority, secondary=secondary, hearsay=hearsay,
        source=str(where.path), line=where.line,
    )


class _Fields:
    """Typed access to one rule table; each wrong type becomes a located problem."""

    def __init__(self, table: dict, where: _Where, problems: list[str]):
        self.table, self.where, self.problems = table, where, problems

    def _bad(self, key: str, problem: str) -> None:
        self.problems.append(self.where.at(key, problem))

    def text(self, key: str) -> str:
        value = self.table.get(key, "")
        if not isinstance(value, str):
            self._bad(key, f"must be a string, got {type(value).__name__}")
            return ""
        return value.strip()

    def flag(self, key: str) -> bool:
        value = self.table.get(key, False)
        if not isinstance(value, bool):
            self._bad(key, "must be true or false")
            return False
        return value

    def integer(self, key: str) -> int:
        value = self.table.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            self._bad(key, "must be an integer")
            return 0
        return value

    def strings(self, key: str) -> list[str]:
        value = self.table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self._bad(key, "must be a list of strings")
            return []
        return value

    def template(self, key: str) -> str:
        value = self.text(key)
        try:
            names = template_fields(value)
        except ValueError as error:
            self._bad(key, f"bad template: {error}")
            return ""
        for name in names:
            if not name.isidentifier():
                # No attribute or index access: templates only name values.
                self._bad(key, f"template field {{{name}}} must be a plain name")
        return value

    def expression(self, key: str, group_names: set[str]):
        source = self.text(key)
        if not source:
            return None
        try:
            expression = compile_expression(source)
        except ExpressionError as error:
            self._bad(key, f"bad expression {source!r}: {error}")
            return None
        known = CONTEXT_NAMES | CRASH_NAMES | group_names
        for name in sorted(expression.names):
            if name not in known and not re.fullmatch(r"n\d+", name):
                self._bad(key, f"unknown name {name!r} (context: {', '.join(sorted(CONTEXT_NAMES))}; "
                               f"or a named group of the match regexes)")
        return expression


def _conditions(match: Any, where: _Where, problems: list[str],
                patterns: dict[str, RulePattern]) -> tuple[Conditions | None, set[str]]:
    if not isinstance(match, dict):
        problems.append(where.at("match", "must be a table ([rule.match])"))
        return None, set()
    before = len(problems)
    for key in match:
        if key not in MATCH_KEYS:
            problems.append(where.at(key, f"unknown match key (known: {', '.join(MATCH_KEYS)})", "match"))
    groups: set[str] = set()
    reader = _MatchReader(match, where, problems, groups, patterns)
    kinds = reader.names("kind")
    for kind in kinds:
        if kind not in CRASH_KINDS:
            problems.append(where.at("kind", f"unknown crash kind {kind!r} (known: {', '.join(CRASH_KINDS)})", "match"))
    families = {}
    for key, known in (("phase", PHASES), ("frame_family", tuple(FRAME_FAMILIES)),
                       ("exception_family", tuple(EXCEPTION_FAMILIES)),
                       ("message_family", tuple(MESSAGE_FAMILIES)),
                       ("message_family_absent", tuple(MESSAGE_FAMILIES))):
        names = reader.names(key)
        for name in names:
            if name not in known:
                problems.append(where.at(key, f"unknown {key.replace('_', ' ')} {name!r} "
                                              f"(known: {', '.join(known)})", "match"))
        families[key] = tuple(names)
    conditions = Conditions(
        phases=families["phase"], frame_families=families["frame_family"],
        exception_families=families["exception_family"], message_families=families["message_family"],
        kinds=tuple(kinds),
        exceptions=tuple(short_exception(n) for n in reader.names("exception")),
        messages=tuple(reader.regexes("message")), messages_absent=tuple(reader.regexes("message_absent")),
        wrapper=reader.regex("wrapper"),
        inner_exceptions=tuple(short_exception(n) for n in reader.names("inner_exception")),
        inner_message=reader.regex("inner_message"), prefix=reader.regex("prefix"),
        frames=tuple(reader.regexes("frames")), frames_absent=tuple(reader.regexes("frames_absent")),
        exit_codes=tuple(reader.integers("exit_code")), signals=tuple(reader.integers("signal")),
        raised_in=reader.regex("raised_in"), message_families_absent=families["message_family_absent"],
        context=reader.regex("context"),
    )
    if len(problems) == before and not conditions.weight:
        problems.append(where.at("match", "matches every crash: name at least one condition"))
    clash = groups & CONTEXT_NAMES
    if clash:
        problems.append(where.at("message", f"named group(s) {sorted(clash)} shadow context names", "match"))
    return (conditions if len(problems) == before else None), groups


class _MatchReader:
    def __init__(self, match: dict, where: _Where, problems: list[str], groups: set[str],
                 patterns: dict[str, RulePattern]):
        self.match, self.where, self.problems, self.groups = match, where, problems, groups
        self.patterns = patterns

    def _bad(self, key: str, problem: str) -> None:
        self.problems.append(self.where.at(key, problem, "match"))

    def _list(self, key: str, kind: type) -> list:
        value = self.match.get(key, [])
        value = [value] if isinstance(value, kind) and not isinstance(value, bool) else value
        if not isinstance(value, list) or not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
            self._bad(key, f"must be a {kind.__name__} or a list of them")
            return []
        return value

    def names(self, key: str) -> list[str]:
        return self._list(key, str)

    def integers(self, key: str) -> list[int]:
        return self._list(key, int)

    def regex(self, key: str) -> RulePattern | None:
        value = self.match.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self._bad(key, "must be a regular expression string")
            return None
        return self._compile(key, value)

    def regexes(self, key: str) -> list[RulePattern]:
        compiled = (self._compile(key, pattern) for pattern in self._list(key, str))
        return [pattern for pattern in compiled if pattern is not None]

    def _compile(self, key: str, pattern: str) -> RulePattern | None:
        compiled = self.patterns.get(pattern)
        if compiled is None:
            try:
                compiled = rule_pattern(pattern)  # checked in full, compiled when first used
            except PatternError as error:
                self._bad(key, str(error))
                return None
            self.patterns[pattern] = compiled
        self.groups.update(compiled.groupindex)
        return compiled


def remediation_ids_in(dirs: Iterable[str | os.PathLike[str]]) -> set[str] | None:
    """Remediation ids from `remediations/*.toml` (`id` keys), or None when no catalog exists."""
    files = [f for f in rule_files(dirs) if f.is_file()]
    if not files:
        return None
    ids: set[str] = set()
    roots = _roots(files)
    for path in files:
        if _refusal(path, roots):
            continue  # never read a file the remediation loader refuses (a link to /dev/zero…)
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue  # the remediation loader reports its own files; here we only need ids
        _ids_from(raw, ids)
    return ids


def _ids_from(raw: Any, ids: set[str]) -> None:
    if isinstance(raw, dict):
        if isinstance(raw.get("id"), str):
            ids.add(raw["id"])
        for value in raw.values():
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, dict) and isinstance(item.get("id"), str):
                        ids.add(item["id"])
