"""Crashes from a pasted report that holds no assembled traceback: the offline `diagnose` of an
issue text, where the error is quoted in prose, in backticks, or as a lone line.

Only for offline diagnosis, and only when the text is not an ordinary SGLang log (a healthy log
mentions errors too: `Ignore import error …` is not a crash). Each exception-shaped mention
becomes a candidate crash; the rules and the engine's ranking choose among them. When nothing is
exception-shaped, the text itself is the last candidate, so message families can still speak.
"""

from __future__ import annotations

import html
import re

from ..records import Crash, Frame
from . import grammar

# `torch.OutOfMemoryError: CUDA out of memory …` anywhere in a line (inside backticks, after prose);
# also the exceptions whose names say neither Error nor Exception (dynamo's `Unsupported`). Only an
# ASCII word character before the name joins it: CJK prose runs straight into it (`出现Exception: …`).
_MENTION = re.compile(
    r"(?<![A-Za-z0-9_.])(?P<type>(?:[A-Za-z_]\w*\.){0,4}(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)|Exception)"
    r"|c10::\w+|AssertionError|(?:[A-Za-z_]\w*\.){1,4}Unsupported|(?:[A-Za-z_]\w*\.){0,4}(?:BackendCompilerFailed|OutOfResources))(?:\((?P<args>[^()\n]{0,200})\))?(?::[ \t]*(?P<message>[^\n`]{0,1500}))?")
_TAGGED = re.compile(r"\s*\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")
MAX_CANDIDATES = 8
MAX_TEXT = 16_384


_ARGPARSE_ANYWHERE = re.compile(r"(?P<message>[\w./-]{1,80}: error: (?:unrecognized arguments|argument -|the following "
                                r"arguments are required|invalid choice|ambiguous option|expected one argument)[^`\n]*)")


_USAGE = re.compile(r"usage: \S+ \[-h\]")


def _frames(lines: list[str]) -> tuple[Frame, ...]:
    """Every `File "…", line N, in f` of the text: in a paste they belong to the quoted error."""
    found = []
    for line in lines:
        if "File " in line:
            match = grammar.FRAME.match(_uncontained(grammar.strip_ansi(line)))
            if match:
                found.append(Frame(file=match.group("file"), line=int(match.group("line")),
                                   function=(match.group("function") or "<unknown>").strip()))
    return tuple(found[-64:])


def _uncontained(line: str) -> str:
    """The line a container runtime's prefix (`sglang-1  | `, CRI's `… stderr F `) carries, and
    behind torchrun's `[rank3]:` (the assembler reads the rank from it; a paste's mentions need not)."""
    end = grammar.container_end(line) if line[:1] not in ("[", " ", "\t", "") else 0
    if end:
        line = line[end:]
    if line.startswith("[rank"):
        torch_rank = grammar.TORCH_RANK_PREFIX.match(line)
        if torch_rank:
            line = line[torch_rank.end():]
    return line


_QUOTE = re.compile(r"> ?")
UNQUOTE_HEAD = 400  # lines: a quoted or HTML-escaped paste shows it from its start


def unquote(lines: list[str]) -> list[str]:
    """A pasted report's lines as its program printed them: without the `> ` of a Markdown quote when
    most lines carry one (a reply that quotes the error), with HTML's character references (`&quot;`)
    read. A log without either is returned as it was; its first lines tell (a 100,000-line log costs
    no pass of its own)."""
    lines = unwrap(undouble(lines))
    head = "\n".join(lines[:UNQUOTE_HEAD])
    escaped = "&quot;" in head or "&#39;" in head or "&lt;" in head or "&gt;" in head
    if not escaped and not (head.startswith(">") or "\n>" in head):
        return lines
    if escaped:
        lines = [html.unescape(line) for line in lines]  # copied from a page's HTML source
    quoted = sum(1 for line in lines if line.startswith(">"))
    if quoted and quoted * 2 >= sum(1 for line in lines if line.strip()):
        lines = [line[_QUOTE.match(line).end():].rstrip() if line.startswith(">") else line for line in lines]
        # A quoted paste's doubled breaks show only now (`>` alone was a line of text, not a blank).
        lines = unwrap(undouble(lines))
    return lines


DOUBLED_HEAD = 2000  # lines that tell whether a paste doubled its line breaks
MIN_DOUBLED = 4  # non-blank lines, each with one blank line after it


def undouble(lines: list[str]) -> list[str]:
    """A paste whose every line break was doubled (copied from a rendered page: a blank line after
    every line) with one blank line taken after each line; other text as it was."""
    head = lines[:DOUBLED_HEAD]
    texts = [index for index, line in enumerate(head[:-1]) if line.strip()]
    if len(texts) < MIN_DOUBLED:
        return lines
    if any(head[index + 1].strip() for index in texts):
        return _undouble_runs(lines)  # two lines in a row: the breaks are the text's own, maybe not all
    result: list[str] = []
    skip = False
    for line in lines:
        if skip and not line.strip():
            skip = False
            continue
        result.append(line)
        skip = bool(line.strip())
    return result


MIN_DOUBLED_RUN = 6  # lines in a row, each with one blank line after it, inside text of single breaks


def _doubled_run_end(lines: list[str], start: int) -> int:
    """The index of the last text line of the run of text lines, each one blank line apart, that
    starts at `start` (`start` itself when the next line is not a blank followed by text)."""
    end = start
    while end + 2 < len(lines) and not lines[end + 1].strip() and lines[end + 2].strip():
        end += 2
    return end


def _undouble_runs(lines: list[str]) -> list[str]:
    """A doubled copy pasted into text of its own (a Markdown fence, an issue template around it):
    each run of at least MIN_DOUBLED_RUN lines one blank line apart loses those blanks; the rest
    as it was. The first lines tell whether any such run is there."""
    head = lines[:DOUBLED_HEAD]
    index = 0
    while index < len(head):
        if head[index].strip():
            end = _doubled_run_end(head, index)
            if (end - index) // 2 + 1 >= MIN_DOUBLED_RUN:
                break
            index = end + 1
        else:
            index += 1
    else:
        return lines
    result: list[str] = list(lines[:index])
    while index < len(lines):
        if not lines[index].strip():
            result.append(lines[index])
            index += 1
            continue
        end = _doubled_run_end(lines, index)
        if (end - index) // 2 + 1 >= MIN_DOUBLED_RUN:
            result.extend(lines[index:end + 1:2])
        else:
            result.extend(lines[index:end + 1])
        index = end + 1
    return result


UNWRAP_HEAD = 2000  # lines whose lengths tell whether a text was hard-wrapped
MIN_WRAP_WIDTH = 60
MIN_WRAPPED = 2
# A line that starts something of its own (a log prefix, an indented frame or source line, a
# traceback header, a container's prefix) is never the continuation of a broken line.
_LINE_START = re.compile(r'\s|\[\d{4}-|\[rank\d|\(\w+ pid=|Traceback \(|File "|\d{4}-\d\d-\d\d[ T]|[\w.-]{1,40} {0,8}\| ')


def _continues(line: str, after: str) -> bool:
    """`after` carries on `line`, broken at the wrap column: it starts nothing of its own (nor the
    way `line` starts: the next of a run of like lines), and the break is not in a terminal's
    padding."""
    return (bool(after) and not line.endswith("  ") and after[:8] != line[:8]
            and _LINE_START.match(after) is None)


def wrap_width(lines: list[str]) -> int | None:
    """The column a terminal or an editor broke this text's long lines at, or None when it was not
    hard-wrapped. Wrapping leaves no line longer than the width and several exactly as long (each
    broken line but its last piece) whose next line starts nothing of its own, while the lines a
    little shorter are only the pieces that happen to end there. A text that was not wrapped has
    one longest line, or a few repeats of one log line, each followed by the next log line."""
    head = lines[:UNWRAP_HEAD]
    width = max((len(line) for line in head), default=0)
    if width < MIN_WRAP_WIDTH:
        return None
    broken = {line for line, after in zip(head, head[1:]) if len(line) == width and _continues(line, after)}
    if len(broken) < MIN_WRAPPED:
        return None
    near = sum(1 for line in head if width - 20 < len(line) < width)
    return width if len(broken) >= near else None


def unwrap(lines: list[str]) -> list[str]:
    """A hard-wrapped paste (a long exception message, frame or log line broken at a fixed column,
    its continuation not indented) with each broken line joined back; other text as it was."""
    width = wrap_width(lines)
    if width is None:
        return lines
    joined: list[str] = []
    pending = ""
    for index, line in enumerate(lines):
        pending += line
        if not (len(line) == width and index + 1 < len(lines) and _continues(line, lines[index + 1])):
            joined.append(pending)
            pending = ""
    if pending:
        joined.append(pending)
    return joined


def looks_like_log(lines: list[str]) -> bool:
    """An SGLang log as the service wrote it (most lines carry its `[2026-…]` prefix, or it prints
    its server_args and milestones), not a report someone wrote around an error."""
    body = [line for line in lines if line.strip()]
    if not body:
        return True
    tagged = sum(1 for line in body if _TAGGED.match(_uncontained(line)))
    if tagged >= 20 or any("server_args=ServerArgs(" in line for line in body[:400]):
        return True
    return tagged >= 0.6 * len(body)


# A line that announces a crash and names its error inline, its traceback not printed or not
# pasted: `Scheduler hit an exception: torch.OutOfMemoryError: …`, torch's C++ watchdog
# `… Process group watchdog thread terminated with exception: CUDA error: …`.
_ANNOUNCED = re.compile(r"(?:hit an exception|terminated with exception|raised an exception|[Ee]xception in [\w.]+):"
                        r"\s*(?P<rest>\S.*)$")


def announced_crashes(lines: list[str], source: str = "<log>") -> tuple[Crash, ...]:
    """The errors a log names on its crash-announcing lines (no traceback under them), first
    first: for a log whose assembled crashes only say that a process died."""
    found: list[Crash] = []
    for number, raw in enumerate(lines, 1):
        if "xception" not in raw:
            continue
        line = _uncontained(grammar.strip_ansi(raw)).strip()
        announced = _ANNOUNCED.search(line)
        if not announced or announced.group("rest").startswith(grammar.TRACEBACK_HEADER):
            continue
        rest = announced.group("rest")
        mention = _MENTION.match(rest)
        exception, message = (mention.group("type"), (mention.group("message") or "").strip()) if mention else (None, rest)
        found.append(Crash(kind="traceback", exception=exception, message=message[:1500], source=source,
                           first_line=number, last_line=number, excerpt=(raw,)))
        if len(found) >= MAX_CANDIDATES:
            break
    return tuple(found)


def _as_said(line: str) -> str:
    if "Kill" in line or "oom-kill" in line:
        stripped = _uncontained(line).strip()
        if grammar.KILL_LINE.match(stripped):
            return grammar.kill_message(stripped)
    return line


_FENCE = re.compile(r"\s*(?:```|~~~)[\w+.-]*\s*$")
_FOLD_TAG = re.compile(r"<summary\b[^>]*>.*?</summary>|</?(?:details|summary)\b[^>]*>")


def _unmarked(lines: list[str]) -> list[str]:
    """A report's lines without its Markdown scaffolding: code fences and a folded `<details>`
    block's tags and summary (the fold's label: `Full log`) are how it was pasted, not what failed."""
    result = []
    for line in lines:
        if "```" in line or "~~~" in line:
            if _FENCE.match(line):
                continue
        if "<details" in line or "details>" in line or "summary>" in line:
            line = _FOLD_TAG.sub("", line)
            if not line.strip():
                continue
        result.append(line)
    return result


def paste_crashes(lines: list[str], source: str = "<paste>", force: bool = False) -> tuple[Crash, ...]:
    """Candidate crashes named in a report's text (first mentions first); () for a log, unless
    `force` (the log did fail, but with nothing a rule knows)."""
    lines = unquote(lines)
    if not force and looks_like_log(lines):
        return ()
    frames = _frames(lines)
    candidates: list[Crash] = []
    seen: set[tuple[str, str]] = set()
    for number, raw in enumerate(lines, 1):
        line = _uncontained(grammar.strip_ansi(raw)).strip()
        if not line:
            continue
        if _USAGE.match(line):
            candidates.append(Crash(kind="error-line", exception=None, message=line[:300], prefix="usage error",
                                    source=source, first_line=number, last_line=number, excerpt=(raw,)))
        usage = _ARGPARSE_ANYWHERE.search(line) if ": error: " in line else None
        if usage:
            candidates.append(Crash(kind="error-line", exception=None, message=usage.group("message"),
                                    prefix="usage error", source=source, first_line=number, last_line=number,
                                    excerpt=(raw,)))
        fatal = grammar.fatal_line(line)
        if fatal:
            key = (fatal[0], fatal[1][:200])
            if key not in seen:
                seen.add(key)
                candidates.append(Crash(kind="error-line", exception=None, message=fatal[1], prefix=fatal[0],
                                        source=source, first_line=number, last_line=number, excerpt=(raw,)))
        for found in _MENTION.finditer(line):
            exception = found.group("type")
            if exception.endswith("Warning"):
                continue
            message = (found.group("message") or found.group("args") or "").strip().rstrip("`'\".,;)")
            key = (exception, message[:200])
            if key in seen or (not message and exception in ("Exception", "Error")):
                continue
            seen.add(key)
            candidates.append(Crash(kind="traceback", exception=exception, message=message, source=source,
                                    frames=frames, first_line=number, last_line=number, excerpt=(raw,)))
        if len(candidates) >= MAX_CANDIDATES:
            break
    # The kernel's `Out of memory: Killed process …` is host memory: in the text's own words it
    # would read as a GPU OOM, so a kill line speaks as what it is (`grammar.kill_message`).
    text = "\n".join(_as_said(grammar.strip_ansi(line)) for line in _unmarked(lines)).strip("\n")[:MAX_TEXT]
    # The text as a whole, last: a report that only describes the failure in words.
    candidates.append(Crash(kind="error-line", exception=None, message=text, prefix="report text",
                            source=source, first_line=1, last_line=len(lines),
                            excerpt=tuple(lines[:20])))
    return tuple(candidates)
