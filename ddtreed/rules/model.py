"""A compiled rule and how it tests one crash: parsed fields first, then the `when` predicate."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..records import Crash, Explanation, RuleMatch, ServiceContext
from .evidence import MILESTONE_MARK, CrashEvidence, gather
from .expression import UNKNOWN, Expression
from .regex import RulePattern

CONTEXT_NAMES = frozenset(ServiceContext().variables())


def short_exception(name: str | None) -> str | None:
    """`torch.AcceleratorError` → `AcceleratorError`, `c10::DistBackendError` → `DistBackendError`."""
    if not name:
        return None
    return re.split(r"\.|::", name)[-1]


@dataclass(frozen=True)
class ErrorText:
    """One exception in a crash's chain: the inner error of a wrapper, the final one, or a cause."""

    exception: str | None
    short: str | None
    message: str
    role: str  # "inner", "final", "cause"


@dataclass(frozen=True)
class CrashView:
    """The fields of a crash that rules look at, computed once per crash."""

    crash: Crash
    errors: tuple[ErrorText, ...]
    frames: tuple[str, ...]  # "module:function" over the crash and its causes
    evidence: CrashEvidence | None = None
    # error message -> the message patterns that may match it (the prefilter's potential matches,
    # a superset of those that do): `_error` skips the others unsearched. None: search them all.
    potential: Mapping[str, frozenset[str]] | None = None

    @classmethod
    def of(cls, crash: Crash) -> "CrashView":
        errors: list[ErrorText] = []
        frames: list[str] = []
        _collect(crash, "final", errors, frames)
        return cls(crash=crash, errors=tuple(errors), frames=tuple(frames),
                   evidence=gather(crash, errors, frames))

    @property
    def exception_keys(self) -> set[str | None]:
        return {error.short for error in self.errors}


def _collect(crash: Crash, role: str, errors: list[ErrorText], frames: list[str]) -> None:
    if crash.inner_message or crash.inner_exception:
        errors.append(ErrorText(crash.inner_exception, short_exception(crash.inner_exception),
                                crash.inner_message or "", "inner"))
    errors.append(ErrorText(crash.exception, short_exception(crash.exception), crash.message, role))
    frames.extend(f"{frame.module}:{frame.function}" for frame in crash.frames)
    for cause in crash.chained:
        _collect(cause, "cause", errors, frames)


@dataclass(frozen=True)
class Conditions:
    """The `[rule.match]` table, compiled. Every present condition must hold."""

    kinds: tuple[str, ...] = ()
    exceptions: tuple[str, ...] = ()  # short names
    messages: tuple[RulePattern, ...] = ()  # any of them, on the same error as `exceptions`
    messages_absent: tuple[RulePattern, ...] = ()  # none may match any error of the chain
    wrapper: RulePattern | None = None
    inner_exceptions: tuple[str, ...] = ()
    inner_message: RulePattern | None = None
    prefix: RulePattern | None = None
    frames: tuple[RulePattern, ...] = ()  # each must match some frame
    frames_absent: tuple[RulePattern, ...] = ()  # none may match any frame
    exit_codes: tuple[int, ...] = ()
    signals: tuple[int, ...] = ()
    phases: tuple[str, ...] = ()  # any of them: the phase the service was in
    frame_families: tuple[str, ...] = ()  # each key: any of its families present
    exception_families: tuple[str, ...] = ()
    message_families: tuple[str, ...] = ()
    raised_in: RulePattern | None = None  # the innermost frame: the code that raised
    message_families_absent: tuple[str, ...] = ()  # none of these families in the chain's messages
    context: RulePattern | None = None  # some line printed just before the crash (not a milestone)

    @property
    def weight(self) -> int:
        """How many conditions: the more specific rule wins a priority tie."""
        counted = (self.kinds, self.exceptions, self.messages, self.wrapper, self.inner_exceptions,
                   self.inner_message, self.prefix, self.exit_codes, self.signals, self.phases,
                   self.frame_families, self.exception_families, self.message_families, self.raised_in,
                   self.context)
        return (sum(1 for value in counted if value) + len(self.frames) + len(self.frames_absent)
                + len(self.messages_absent) + len(self.message_families_absent))

    @property
    def family_only(self) -> bool:
        """Matches by families and phase alone: outranked by any rule naming a wording."""
        return not (self.exceptions or self.messages or self.wrapper or self.inner_exceptions
                    or self.inner_message or self.prefix or self.frames or self.raised_in or self.context)

    def test(self, view: CrashView) -> tuple[bool, list[str], dict[str, Any]]:
        """(held, reasons, params captured by named groups)."""
        reasons: list[str] = []
        params: dict[str, Any] = {}
        crash = view.crash
        for check in (self._kind, self._families, self._error, self._error_absent, self._wrapper, self._inner,
                      self._prefix, self._context, self._frames, self._exit):
            held, reason = check(crash, view, params)
            reasons.append(reason)
            if not held:
                return False, [r for r in reasons if r], params
        return True, [r for r in reasons if r], params

    def _kind(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        if not self.kinds:
            return True, ""
        held = crash.kind in self.kinds
        return held, f"kind {crash.kind!r} {'in' if held else 'not in'} {list(self.kinds)}"

    def _families(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        evidence = view.evidence
        if evidence is None or not (self.phases or self.frame_families or self.exception_families
                                    or self.message_families or self.message_families_absent):
            return True, ""
        against = sorted(evidence.message_families & set(self.message_families_absent))
        if against:
            # The message names another failure (memory, a missing package, a port): not this rule's.
            return False, f"message family {', '.join(against)} is excluded"
        shown = []
        for wanted, kind in ((self.phases, "phase"), (self.frame_families, "frames"),
                             (self.exception_families, "exception"), (self.message_families, "message")):
            if not wanted:
                continue
            have = evidence.families(kind)
            hit = sorted(have & set(wanted))
            if not hit:
                return False, f"{kind} family {sorted(have) or '(none)'} not in {list(wanted)}"
            shown.append(f"{kind} {', '.join(hit)}")
        return True, "evidence: " + "; ".join(shown) if shown else ""

    def _error(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        if not self.exceptions and not self.messages:
            return True, ""
        for error in view.errors:
            if self.exceptions and error.short not in self.exceptions:
                continue
            if not self.messages:
                return True, f"{error.role} error {error.exception} is one of {list(self.exceptions)}"
            potential = view.potential.get(error.message) if view.potential is not None else None
            for pattern in self.messages:
                if potential is not None and pattern.pattern not in potential:
                    continue  # its atoms are not in the message: it cannot match (prefilter)
                found = pattern.search(error.message)
                if found:
                    params.update(_groups(found))
                    return True, f"{error.role} error {error.exception or '(no type)'} matches /{pattern.pattern}/"
        names = [e.exception or "(no type)" for e in view.errors]
        wanted = f"exception in {list(self.exceptions)}" if self.exceptions else ""
        if self.messages:
            shown = " or ".join(f"/{p.pattern}/" for p in self.messages)
            wanted = (wanted + " with " if wanted else "") + f"message {shown}"
        return False, f"no error in the chain {names} has {wanted}"

    def _error_absent(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        # A wording that says the rule's reading is wrong (an architecture, not an option).
        for pattern in self.messages_absent:
            for error in view.errors:
                if pattern.search(error.message):
                    return False, f"{error.role} error {error.exception or '(no type)'} matches excluded /{pattern.pattern}/"
        return True, ""

    def _wrapper(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        if self.wrapper is None:
            return True, ""
        found = self.wrapper.search(crash.wrapper or "")
        if found:
            params.update(_groups(found))
            return True, f"wrapper {crash.wrapper!r} matches"
        return False, f"wrapper {crash.wrapper!r} does not match /{self.wrapper.pattern}/"

    def _inner(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        if not self.inner_exceptions and self.inner_message is None:
            return True, ""
        if self.inner_exceptions and short_exception(crash.inner_exception) not in self.inner_exceptions:
            return False, f"inner exception {crash.inner_exception!r} not in {list(self.inner_exceptions)}"
        if self.inner_message is not None:
            found = self.inner_message.search(crash.inner_message or "")
            if not found:
                return False, f"inner message does not match /{self.inner_message.pattern}/"
            params.update(_groups(found))
        return True, "inner error matches"

    def _prefix(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        if self.prefix is None:
            return True, ""
        held = bool(self.prefix.search(crash.prefix or ""))
        return held, f"prefix {crash.prefix!r} {'matches' if held else 'does not match'}"

    def _context(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        if self.context is None:
            return True, ""
        # The lines a process printed right before its traceback (an error print of native code,
        # a linker's complaint): what a traceback cut before its own error line still has.
        for line in crash.context:
            if line.startswith(MILESTONE_MARK):
                continue
            found = self.context.search(line[:2000])
            if found:
                params.update(_groups(found))
                return True, f"context line matches /{self.context.pattern}/"
        return False, f"no context line matches /{self.context.pattern}/"

    def _frames(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        if self.raised_in is not None:
            # Where the error was raised, not merely a caller on the stack: a check in
            # server_args.py raises there; a config read it calls raises in transformers.
            innermost = f"{crash.frames[-1].module}:{crash.frames[-1].function}" if crash.frames else ""
            found = self.raised_in.search(innermost) if innermost else None
            if not found:
                return False, f"raised in {innermost or '(no frame)'}, not /{self.raised_in.pattern}/"
            params.update(_groups(found))
        for pattern in self.frames:
            # Innermost first: the frame nearest the error names it best.
            found = next((hit for hit in map(pattern.search, reversed(view.frames)) if hit), None)
            if not found:
                return False, f"no frame matches /{pattern.pattern}/"
            params.update(_groups(found))
        for pattern in self.frames_absent:
            hit = next((frame for frame in view.frames if pattern.search(frame)), None)
            if hit:
                return False, f"frame {hit} matches excluded /{pattern.pattern}/"
        if self.frames or self.frames_absent or self.raised_in is not None:
            return True, "frame patterns hold"
        return True, ""

    def _exit(self, crash: Crash, view: CrashView, params: dict) -> tuple[bool, str]:
        if not self.exit_codes and not self.signals:
            return True, ""
        code = crash.exit_code
        signal = -code if code is not None and code < 0 else (
            code - 128 if code is not None and code > 128 else None)
        held = (code in self.exit_codes) or (signal is not None and signal in self.signals)
        return held, f"exit code {code} {'matches' if held else 'does not match'}"


CRASH_NAMES = frozenset({"exit_code", "signal", "phase", "captured_graph", "graph_tokens_per_req"})


def crash_values(crash: Crash) -> dict[str, Any]:
    """Values from the crash record itself that templates and `when` may name."""
    values: dict[str, Any] = {}
    if crash.exit_code is not None:
        values["exit_code"] = crash.exit_code
        if crash.exit_code < 0:
            values["signal"] = -crash.exit_code
    return values


def _groups(found: re.Match[str]) -> dict[str, Any]:
    return {name: _number(value) for name, value in found.groupdict().items() if value is not None}


_INTEGER = re.compile(r"-?\d+")  # compiled with the module, not by the first crash's captures
_DECIMAL = re.compile(r"-?\d+\.\d*")


def _number(text: str) -> Any:
    if _INTEGER.fullmatch(text):
        return int(text)
    if _DECIMAL.fullmatch(text):
        return float(text)
    return text


@dataclass(frozen=True)
class Rule:
    """One `[[rule]]`: what to recognise, what it means, what to do."""

    id: str
    category: str
    title: str
    meaning: str
    conditions: Conditions
    diagnosis: str
    remediations: tuple[str, ...] = ()
    when: Expression | None = None
    precise: bool = False
    advice: str = ""
    sglang_versions: str = ""
    references: tuple[str, ...] = ()
    priority: int = 0
    # A notice that another failure happened (the launcher finding a scheduler dead, the warm-up
    # request refused, a client giving up): the cause is printed elsewhere, so any other crash of
    # the group, or an error the text quotes, decides before it.
    secondary: bool = False
    # Reads another program's report that a process died or was dropped (a native signal
    # handler's, the kernel's, the router's, a reporter's word for it): in the Python traceback of
    # a service still running such words are an echo (a prompt, a handled error's text), so the
    # rule does not make that traceback a crash (`RuleSet.decides_live`). Offline it decides as any.
    hearsay: bool = False
    source: str = ""
    line: int = 0

    def evaluate(self, view: CrashView, params: Mapping[str, Any],
                 context: ServiceContext | None) -> tuple[RuleMatch | None, Explanation]:
        held, reasons, captured = self.conditions.test(view)
        if not held:
            return None, Explanation(self.id, False, tuple(reasons))
        evidence = view.evidence.variables() if view.evidence is not None else {}
        values = {**crash_values(view.crash), **evidence, **params, **captured}
        names = {**(context.variables() if context else {}), **values}
        precise = False
        if self.when is not None:
            verdict = self.when.evaluate(names)
            shown = ", ".join(f"{n}={_shown(names.get(n))}" for n in sorted(self.when.names))
            if verdict is False:
                return None, Explanation(self.id, False, (*reasons, f"when `{self.when.source}` is false ({shown})"))
            if verdict is UNKNOWN and self.precise:
                return None, Explanation(self.id, False, (*reasons, f"when `{self.when.source}` is unknown ({shown}): needs the launch context"))
            precise = verdict is True
            reasons.append(f"when `{self.when.source}` is {'true' if precise else 'unknown'} ({shown})")
        match = RuleMatch(
            rule_id=self.id, category=self.category, title=self.title,
            diagnosis=render(self.diagnosis, names), remediations=self.remediations,
            params=values, advice=render(self.advice, names), references=self.references,
            precise=precise,
        )
        return match, Explanation(self.id, True, tuple(reasons))


def _shown(value: Any) -> str:
    return "unknown" if value is None else repr(value)


class _Template(string.Formatter):
    def get_value(self, key: Any, args: Any, kwargs: Mapping[str, Any]) -> Any:
        value = kwargs.get(key) if isinstance(key, str) else None
        return "unknown" if value is None else value

    def format_field(self, value: Any, format_spec: str) -> str:
        try:
            return format(value, format_spec)
        except (TypeError, ValueError):
            return str(value)


_FORMATTER = _Template()


def render(template: str, names: Mapping[str, Any]) -> str:
    """Fill `{name}` fields; a name without a value reads `unknown`."""
    return _FORMATTER.vformat(template, (), names) if template else ""


def template_fields(template: str) -> list[str]:
    """The field names of a template; raises ValueError on bad braces."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


@dataclass
class RuleIndex:
    """Rules bucketed by exception short name, so a crash only meets its candidates."""

    by_exception: dict[str | None, list[Rule]] = field(default_factory=dict)
    any_exception: list[Rule] = field(default_factory=list)

    def add(self, rule: Rule) -> None:
        if rule.conditions.exceptions:
            for name in rule.conditions.exceptions:
                self.by_exception.setdefault(name, []).append(rule)
        else:
            self.any_exception.append(rule)

    def candidates(self, view: CrashView) -> set[str]:
        ids = {rule.id for rule in self.any_exception}
        for key in view.exception_keys:
            ids.update(rule.id for rule in self.by_exception.get(key, ()))
        return ids
