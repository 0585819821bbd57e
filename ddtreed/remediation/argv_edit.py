"""Edit a launch argv flag by flag: `--name value`, `--name=value` and bare `--switch` forms."""

from __future__ import annotations

from dataclasses import dataclass

from ..context.argv import is_boolean_flag, normalize_flag


@dataclass(frozen=True)
class Occurrence:
    index: int  # position of the flag token
    name: str
    value: str | None  # None for a bare switch
    width: int  # tokens it spans (1 or 2)


def _takes_next(argv: list[str], index: int) -> bool:
    """A following token is this flag's value unless it is itself a `--flag` or the flag is a
    switch: the same rule as the context parser (ddtreed.context.argv), so both read one argv alike."""
    if is_boolean_flag(normalize_flag(argv[index])):
        return False
    return index + 1 < len(argv) and not argv[index + 1].startswith("--")


def occurrences(argv: list[str] | tuple[str, ...], names: tuple[str, ...]) -> list[Occurrence]:
    found = []
    argv = list(argv)
    for index, token in enumerate(argv):
        if not token.startswith("--"):
            continue
        name, equals, inline = token.partition("=")
        if name not in names:
            continue
        if equals:
            found.append(Occurrence(index, name, inline, 1))
        elif _takes_next(argv, index):
            found.append(Occurrence(index, name, argv[index + 1], 2))
        else:
            found.append(Occurrence(index, name, None, 1))
    return found


def value_of(argv, names: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(spelling, value) of the last occurrence (argparse: the last one wins); (None, None) if absent."""
    found = occurrences(argv, names)
    if not found:
        return None, None
    return found[-1].name, found[-1].value


def present(argv, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(occurrence.name for occurrence in occurrences(argv, names)))


def remove(argv, names: tuple[str, ...]) -> list[str]:
    argv = list(argv)
    for occurrence in reversed(occurrences(argv, names)):
        del argv[occurrence.index:occurrence.index + occurrence.width]
    return argv


def remove_prefix(argv, prefix: str) -> list[str]:
    names = tuple(dict.fromkeys(
        token.split("=", 1)[0] for token in argv if token.startswith(prefix)))
    return remove(argv, names)


def set_flag(argv, name: str, value: str | None, replaces: tuple[str, ...] = ()) -> list[str]:
    """Put `name [value]` where the first of `replaces`/`name` stood (else at the end), once."""
    argv = list(argv)
    all_names = tuple(dict.fromkeys((name,) + tuple(replaces)))
    found = occurrences(argv, all_names)
    position = found[0].index if found else len(argv)
    for occurrence in reversed(found):
        del argv[occurrence.index:occurrence.index + occurrence.width]
    tokens = [name] if value is None else [name, value]
    argv[position:position] = tokens
    return argv


def render(argv) -> list[str]:
    """One line per flag with its value: the text a unified diff of two argvs is made from."""
    lines: list[str] = []
    argv = list(argv)
    index = 0
    while index < len(argv):
        token = argv[index]
        if token.startswith("--") and "=" not in token and _takes_next(argv, index):
            lines.append(f"{token} {argv[index + 1]}")
            index += 2
        else:
            lines.append(token)
            index += 1
    return lines
