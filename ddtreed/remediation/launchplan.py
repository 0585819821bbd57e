"""Turn an args/env remediation into the service's next argv/env, version-aware.

Raises NotApplicable with the reason when the step changes nothing, is at its floor, or would
produce a flag the installed SGLang rejects.
"""

from __future__ import annotations

import difflib
from typing import Mapping

from ..records import ServiceContext
from . import argv_edit
from . import flags
from .catalog import Operation, Remediation


class NotApplicable(ValueError):
    """This remediation cannot help this launch; the message says why."""


def _number_text(value: float, integer: bool) -> str:
    if integer:
        return str(int(value))
    return f"{round(value, 4):g}"


def _adjust(op: Operation, current_text: str) -> str:
    # "48" is an integer; "0.7", ".5", "1e-05" are not (real SGLang launches carry all of them)
    integer = current_text.strip().lstrip("+-").isdigit()
    try:
        current = float(current_text)
    except ValueError:
        raise NotApplicable(f"{op.flag} has a non-numeric value {current_text!r}") from None
    new = current * op.factor if op.action == "scale" else current + op.delta
    if integer:
        new = float(int(new))
    if op.minimum is not None:
        new = max(new, op.minimum)
    if op.maximum is not None:
        new = min(new, op.maximum)
    text = _number_text(new, integer)
    if float(text) == current:
        bound = "floor" if (op.action == "scale" and op.factor < 1) or (op.delta or 0) < 0 else "ceiling"
        raise NotApplicable(f"{op.flag} is already at its {bound} ({current_text})")
    return text


def _apply(op: Operation, argv: list[str], version: str | None) -> list[str]:
    if op.action == "remove-prefix":
        return argv_edit.remove_prefix(argv, op.prefix)
    if op.action == "remove":
        names = (op.flag,) if op.flag.startswith("--") else flags.all_names(op.flag)
        return argv_edit.remove(argv, names)
    names = flags.all_names(op.flag)
    spelling, value = argv_edit.value_of(argv, names)
    if op.action in ("scale", "step"):
        if value is None:
            if op.when_absent is None:
                raise NotApplicable(f"{names[0]} is not in the launch argv: nothing to change")
            value = op.when_absent
        value = _adjust(op, value)
    elif op.action == "replace-value":
        if value is None or (op.from_value and value.upper() != op.from_value.upper()):
            raise NotApplicable(f"{names[0]} is {value or 'not set'}, not {op.from_value}")
        if flags.algorithm_available(op.to_value, version) is False:
            raise NotApplicable(f"sglang {version} has no {op.to_value}")
        value = op.to_value
    elif op.action == "add":
        value = None
    else:  # "set"
        value = op.value
    chosen = flags.choose(op.flag, version, argv_edit.present(argv, names))
    return argv_edit.set_flag(argv, chosen, value, replaces=names)


def algorithm_of(context: ServiceContext) -> str | None:
    """The argv is the truth (a ladder edits it); the parsed context field is the fallback."""
    _, value = argv_edit.value_of(context.argv, ("--speculative-algorithm",))
    if value:
        return value.upper()
    return context.speculative_algorithm.upper() if context.speculative_algorithm else None


def plan_argv(remediation: Remediation, context: ServiceContext) -> tuple[str, ...]:
    """The new argv, or NotApplicable."""
    if remediation.when_algorithm and algorithm_of(context) not in remediation.when_algorithm:
        raise NotApplicable(f"only for --speculative-algorithm {'/'.join(remediation.when_algorithm)}, "
                            f"the service runs {algorithm_of(context) or 'none'}")
    if not context.argv:
        raise NotApplicable("no launch argv in the service context")
    argv = list(context.argv)
    try:
        for op in remediation.operations:
            argv = _apply(op, argv, context.sglang_version)
    except flags.FlagUnavailable as error:
        raise NotApplicable(str(error)) from None
    if tuple(argv) == tuple(context.argv):
        raise NotApplicable("the launch argv already has this change")
    problems = flags.rejected(argv, context.sglang_version)
    if problems:
        raise NotApplicable("; ".join(problems))
    return tuple(argv)


def plan_env(remediation: Remediation, env: Mapping[str, str]) -> dict[str, str]:
    new = {key: value for key, value in env.items() if key not in remediation.env_unset}
    new.update(remediation.env_set)
    if new == dict(env):
        raise NotApplicable("the environment already has this change")
    return new


def argv_diff(old, new) -> str:
    return "".join(difflib.unified_diff(
        [line + "\n" for line in argv_edit.render(old)], [line + "\n" for line in argv_edit.render(new)],
        fromfile="a/argv", tofile="b/argv"))


def env_diff(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    return "".join(difflib.unified_diff(
        [f"{k}={v}\n" for k, v in sorted(old.items())], [f"{k}={v}\n" for k, v in sorted(new.items())],
        fromfile="a/env", tofile="b/env"))
