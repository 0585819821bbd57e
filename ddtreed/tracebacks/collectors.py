"""Offline: the lines a log collector printed, as the program behind it wrote them.

A crash read back through a collector carries the collector's prefix on every line: `journalctl`'s
`Dec 01 12:00:00 host python3[1234]: `, `kubectl logs --prefix`'s `[pod/name/container] `,
`docker logs -t`'s timestamp, Slurm's `srun --label` task number (`3: `), Open MPI's
`--tag-output` (`[1,3]<stderr>:`). Those prefixes are written by tools that *read* logs, never by
the process itself, so the daemon, which follows the output of the service it launched, never sees
them: only `ddtreed diagnose` (a pasted report, a collected log) strips them, here, before the
assembler reads the lines. The CRI file format (`<time> stderr F `) is taken off here too, its
partial (`P`) records joined back into their lines. The prefixes a service's own output can carry
when its launch command is a wrapper (docker compose's `sglang-1  | `, and CRI's) are also the
assembler's, line by line, live; Ray's actor prefix and torchrun's `[rank3]:` (which says the rank)
are only the assembler's. Colour codes go too (a collector keeps a program's colours).

Each format is recognised where it starts a line (a blank line's prefix may have lost its trailing
space: a Markdown quote taken off leaves the line stripped); the loose ones (a number or a word then `: `)
only when most of the text's lines carry them, so prose (`Error: …`) is never taken for a prefix.
"""

from __future__ import annotations

import re

from . import grammar

# Formats specific enough to strip wherever they start a line.
_SPECIFIC = re.compile(
    # journalctl: short (`Dec 01 12:00:00`), short-precise (`.123456`), short-iso, short-iso-precise;
    # then the host and the identifier, with its pid or not (`kernel: `).
    r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,9})?"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)) [\w.-]+ [\w.@/:-]+?(?:\[\d+\])?:(?: |$)"
    r"|\[pod/[\w.-]+/[\w.-]+\](?: |$)"  # kubectl logs --prefix
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)(?: (?!stdout |stderr )|$)"  # docker logs -t
    r"|\[\d+,\d+\]<(?:stdout|stderr)>: ?"  # mpirun --tag-output
)
# Loose formats: Slurm's `srun --label` (`  3: `).
_LOOSE = re.compile(r" {0,4}\d{1,5}:(?: |$)")
MOST = 0.6  # of the non-blank lines: a loose prefix is a prefix only when it starts this many
HEAD = 400  # lines sampled to decide (a 100,000-line log costs no pass of its own when it has none)


# The CRI log format (a node's /var/log/pods files, `crictl logs`): `<time> stderr F <line>`; a `P`
# record is a partial line that the next record of the stream continues.
_CRI = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)? (?P<stream>stdout|stderr) (?P<tag>[FP])(?: |$)")


def _stripped(line: str) -> str:
    found = _SPECIFIC.match(line)
    return line[found.end():] if found else line


def _cri_joined(lines: list[str]) -> list[str]:
    """CRI records as the lines they carry: the prefix off, each partial record joined to the rest
    of its line (the next record of the same stream)."""
    result: list[str] = []
    pending: dict[str, str] = {}
    for line in lines:
        found = _CRI.match(line)
        if found is None:
            result.append(line)
            continue
        stream, text = found["stream"], line[found.end():]
        if found["tag"] == "P":
            pending[stream] = pending.get(stream, "") + text
            continue
        result.append(pending.pop(stream, "") + text)
    result.extend(pending.values())
    return result


def uncollected(lines: list[str]) -> list[str]:
    """`lines` without a collector's per-line prefix and colour codes; lines without them as they
    were (the same list when no line has either)."""
    head = lines[:HEAD]
    coloured = any("\x1b" in line for line in lines)
    specific = any(_SPECIFIC.match(line) for line in head)
    cri = any(_CRI.match(line) for line in head)
    body = [line for line in head if line.strip()]
    loose = bool(body) and sum(1 for line in body if _LOOSE.match(line)) >= MOST * len(body)
    if not (coloured or specific or loose or cri):
        return lines
    if cri:
        lines = _cri_joined(lines)
    result = []
    for line in lines:
        if coloured:
            line = grammar.strip_ansi(line)
        if specific:
            line = _stripped(line)
        if loose:
            found = _LOOSE.match(line)
            if found:
                line = line[found.end():]
        result.append(line)
    return result
