"""Which lines of a chunk can matter, found with one pass of an RE2 automaton over its bytes.

A chunk is ~64 KB of progress lines with, now and then, a line that can open, end or explain a
crash. Searching each needle with `str.find` costs one pass per needle (~40 of them); one
alternation of every needle, run by RE2's DFA, costs one pass for all of them.

`candidate_lines(data, state)` yields, in ascending order, the index of every line the assembler
must look at, asking `state.busy` again before each step (the lines already handed out may have
opened a traceback):

- a line that holds a *tagged needle* (`grammar.TAGGED_NEEDLES`), tagged or not;
- while the source is busy (a traceback, a py-spy dump or a C++ abort's `what()` in progress):
  every untagged line (one that does not start like `[2026-…`): it may be a body line;
- while it is not busy: the untagged lines that hold an *idle needle* (`IDLE_NEEDLES`). An
  untagged line without any needle then has no effect at all: `_idle_line` returns at its gate,
  and a line that turns out tagged behind a container or actor prefix acts only on a tagged
  needle; and the `_ordinary` calls for the lines skipped are no-ops on a source that is not busy.

So the lines skipped are exactly those the assembler would have looked at without any effect.
A long line that comes back verbatim and holds no needle (`CleanLines`) is not read again by
the automaton: a needle holds no newline, so it lies inside one line, and that line has none.
Without RE2 (a declared dependency) Python's `re` runs the same patterns, slower.

With the optional C part (`ddtreed._fastscan`, unless DDTREED_NO_NATIVE=1) the three needle
finders (`find_any`, `find_tagged`, `find_idle`) are its `first`: a table of which two bytes can
start a needle, then a compare with the needles of that first byte; the same offsets as the RE2
pass (tests/test_fastscan_needles.py), for less CPU per block.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any, Iterator, Protocol

from ..native import load_fastscan
from . import grammar

try:
    import re2 as _re2
except ImportError:  # pragma: no cover - google-re2 is a declared dependency
    _re2 = None

# What an untagged line outside a traceback must hold to have any effect (`Assembler._idle_line`
# and `_idle_native`): a torch rank prefix, a frame, a device assert, a header, a fatal line,
# argparse's error, a C++ abort, a milestone, the launcher's SIGQUIT notice, or a context word
# (which every bare `…Error: ` / `…Exception: ` line holds too).
IDLE_NEEDLES = ("[rank", 'File "', grammar.DEVICE_ASSERT, grammar.TRACEBACK_HEADER, *grammar.FATAL_NEEDLES,
                ": error: ", "terminate called after throwing", *grammar.CONTEXT_WORDS,
                *grammar.MILESTONE_NEEDLES, *grammar.COMM_NEEDLES, *grammar.KILL_NEEDLES,
                *grammar.SIGQUIT_NEEDLES)


def _alternation(needles) -> bytes:
    # Longest first: the same lines are found in any order, this only keeps the pattern stable.
    return b"|".join(re.escape(needle).encode() for needle in sorted(set(needles), key=lambda n: (-len(n), n)))


def _compile(pattern: bytes):
    """Latin-1: every byte is one character, so an ASCII needle matches the same bytes whatever
    surrounds it (the text is UTF-8, possibly with surrogates passed through)."""
    if _re2 is None:  # pragma: no cover
        return re.compile(pattern, re.DOTALL)
    options = _re2.Options()
    options.encoding = _re2.Options.Encoding.LATIN1
    options.dot_nl = True
    return _re2.compile(pattern, options)


def first_at(pattern, data: bytes, pos: int = 0, end: int | None = None) -> int:
    """Where `pattern` first matches in `data[pos:end]`, -1 when nowhere (`pattern.search(...).start()`)."""
    match = pattern.search(data, pos) if end is None else pattern.search(data, pos, end)
    return -1 if match is None else match.start()


def _finder(pattern):
    """`first_at` for one pattern. With RE2 it calls the compiled pattern's `Match` itself (one C
    call, ~1 µs): the module's `search` wraps it in a generator and a match object (~3 µs), which
    was most of a dense chunk's cost (one search per selected line). Offsets past the end are
    taken as the end, as `search` takes them."""
    regexp = getattr(pattern, "_regexp", None)
    anchor = getattr(getattr(_re2, "_Anchor", None), "UNANCHORED", None)
    if regexp is None or anchor is None or not hasattr(regexp, "Match"):  # pragma: no cover - re, another re2
        return lambda data, pos=0, end=None: first_at(pattern, data, pos, end)
    match = regexp.Match

    def first(data: bytes, pos: int = 0, end: int | None = None) -> int:
        size = len(data)
        end = size if end is None or end > size else end
        return -1 if pos > end else match(anchor, data, pos, end)[0][0]

    return first


_NATIVE = load_fastscan()


def _needle_finder(needles, pattern):
    """`_finder(pattern)` for the alternation of `needles`: `_fastscan.first` over them where the C
    part is loaded (the same answers), else RE2's `Match`."""
    if _NATIVE is None:
        return _finder(pattern)
    return partial(_NATIVE.first, _NATIVE.needles(tuple(sorted({needle.encode() for needle in needles}))))


ANY_NEEDLE = _compile(_alternation(grammar.TAGGED_NEEDLES + IDLE_NEEDLES))
TAGGED_NEEDLE = _compile(_alternation(grammar.TAGGED_NEEDLES))
# A logger that puts `ERROR: ` before every line of a traceback: the whole chunk is read line by
# line (the assembler's `every_line`).
LEVEL_TRACEBACK = _compile(rb"ERROR: (?:   )?Traceback")
# The newline before an untagged line (one that does not start with `[` and a digit); an empty
# or `[` last line has no character after it and is checked apart.
NEWLINE_BEFORE_UNTAGGED = _compile(rb"\n(?:[^\[]|\[[^0-9])")
IDLE_NEEDLE = _compile(_alternation(IDLE_NEEDLES))
find_any = _needle_finder(grammar.TAGGED_NEEDLES + IDLE_NEEDLES, ANY_NEEDLE)
find_tagged = _needle_finder(grammar.TAGGED_NEEDLES, TAGGED_NEEDLE)
find_idle = _needle_finder(IDLE_NEEDLES, IDLE_NEEDLE)
find_level_traceback, _find_newline_before_untagged = _finder(LEVEL_TRACEBACK), _finder(NEWLINE_BEFORE_UNTAGGED)
# A run of device-side assert lines as CUDA prints them, one per GPU thread and thousands in a row,
# each starting with the kernel source's path (`/pytorch/aten/src/ATen/native/cuda/…cu:92: …`).
ASSERT_RUN = _compile(rb"(?:/[^\n]*Assertion `[^\n]*(?:\n|\z))+")
_HEADER_BYTES = grammar.TRACEBACK_HEADER.encode()


def assert_run(data: bytes, start: int) -> tuple[int, int]:
    """(lines, end) of the run of lines from the line start `start` each of which starts with `/`,
    holds `Assertion `, and no traceback header; `end` is where the line after the run starts (or
    `len(data)`). (0, start) when the line at `start` is not one. Such a line, untagged and read
    while its source is idle, only adds an assert (`Assembler._idle_line`), whatever else it holds."""
    end = _match_end(ASSERT_RUN, data, start)
    if end <= start:
        return 0, start
    header = data.find(_HEADER_BYTES, start, end)
    if header >= 0:  # the run stops before the line holding a header (that line may open a traceback)
        end = data.rfind(b"\n", start, header) + 1
        if end <= start:
            return 0, start
    lines = newlines(data, start, end)
    if end == len(data) and data[end - 1:end] != b"\n":
        lines += 1  # the chunk's last line, with no newline after it
    return lines, end


def _match_end(pattern, data: bytes, start: int) -> int:
    """Where `pattern`, anchored at `start`, ends its match; -1 when it does not match there."""
    regexp = getattr(pattern, "_regexp", None)
    anchor = getattr(getattr(_re2, "_Anchor", None), "ANCHOR_START", None)
    if regexp is None or anchor is None or not hasattr(regexp, "Match"):  # pragma: no cover - re, another re2
        match = pattern.match(data, start)
        return -1 if match is None else match.end()
    return regexp.Match(anchor, data, start, len(data))[0][1]


LONG_LINE = 4096  # a line at least this long, found needle-free, is remembered by its bytes
CLEAN_BYTES = 256 * 1024  # the long lines remembered, in all (forgotten all at once past it)
# SGLang's decode line (ddtreed.health.serving's mark): a line holding it is never remembered, so
# the serving watch, which reads every decode line, can skip the remembered lines too.
DECODE_MARK = b"Decode batch, "
_SEEN = object()  # a long line seen once, not checked yet


class CleanLines:
    """Long lines (`LONG_LINE` bytes or more) that hold no needle, remembered by their bytes, so
    the automaton does not read them again where they come back verbatim (SGLang's 8 KB
    `server_args=` line, a long warning printed by every rank, a repeated NCCL dump).

    `spans(data)` is the (start, end) of each line of `data` known to be one of them (and to hold
    no `DECODE_MARK`); asked again for the same `data` (the serving watch after the assembler),
    it answers without probing again. Finding the
    long lines costs no per-line step: one probe every `LONG_LINE` bytes (every line that long
    holds one), each a `rfind` and a `find` of the newline around it. A long line is checked (one
    automaton pass over it, `find_any`) the second time it is seen, then known: a line seen
    once, or never again (a tqdm bar's new count), costs its probe and its copy only. A line is
    known only by comparing all its bytes (`startswith` at its start, its length), never a hash."""

    def __init__(self, max_bytes: int = CLEAN_BYTES):
        self.max_bytes = max_bytes
        # (length, first and last 64 bytes) -> the line, and True (no needle, no decode mark),
        # False (one of them: read as any other line) or _SEEN (seen once, not checked yet)
        self._lines: dict[tuple[int, bytes, bytes], tuple[bytes, Any]] = {}
        self._bytes = 0
        self._last: tuple[bytes, list[tuple[int, int]]] | None = None  # the latest data, its spans

    def spans(self, data: bytes) -> list[tuple[int, int]]:
        last = self._last
        if last is not None and last[0] is data:
            return last[1]
        size = len(data)
        found: list[tuple[int, int]] = []
        probe = LONG_LINE - 1
        while probe < size:
            start = data.rfind(b"\n", 0, probe) + 1
            end = data.find(b"\n", probe)
            end = size if end < 0 else end
            if end - start < LONG_LINE:
                probe += LONG_LINE
                continue
            if self._clean(data, start, end):
                found.append((start, end))
            probe = end + LONG_LINE  # the next line this long holds a byte of this new grid
        self._last = (data, found)
        return found

    def _clean(self, data: bytes, start: int, end: int) -> bool:
        key = (end - start, data[start:start + 64], data[end - 64:end])
        known = self._lines.get(key)
        if known is not None and data.startswith(known[0], start):  # the same length: the same line
            state = known[1]
            if state is not _SEEN:
                return state
            # seen twice: worth one pass to know it (a needle line is known as one too: the scan
            # reads it each time, as any other, but it is not checked again)
            clean = find_any(data, start, end) < 0 and data.find(DECODE_MARK, start, end) < 0
            self._lines[key] = (known[0], clean)
            return clean
        if self._bytes + end - start > self.max_bytes:
            self._lines.clear()
            self._bytes = 0
        if known is not None:
            self._bytes -= len(known[0])
        self._lines[key] = (data[start:end], _SEEN)
        self._bytes += end - start
        return False


def find_any_outside(data: bytes, pos: int, spans: list[tuple[int, int]]) -> int:
    """`find_any(data, pos)` where no needle can be in the lines `spans` (ascending (start, end)
    of lines: a needle holds no newline, so it is inside one line): those are not read."""
    for start, end in spans:
        if end <= pos:
            continue
        if pos < start:
            hit = find_any(data, pos, start)
            if hit >= 0:
                return hit
        pos = end
    return find_any(data, pos)


class _Source(Protocol):
    @property
    def busy(self) -> bool: ...


def untagged_at(data: bytes, start: int) -> bool:
    """Does the line starting at byte `start` not start like `[2026-…` (a `[` and a digit)?

    A digit as Python's str sees it, as the line selection always did: `str.isdigit()` for the
    chunk's first line, `\\d` (a decimal digit, `str.isdecimal()`) for the others."""
    if not data.startswith(b"[", start):
        return True
    second = data[start + 1:start + 2]
    if second.isdigit():
        return False
    if not second or second[0] < 0x80:
        return True
    char = data[start + 1:start + 5].decode("utf-8", "replace")[:1]  # a non-ASCII character
    return not (char.isdigit() if start == 0 else char.isdecimal())


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def candidate_lines(text: str, data: bytes, state: _Source, first_hit: int = -2) -> Iterator[int]:
    """Indices of the lines of `text` (the chunk's lines joined by `\\n`; `data` is it encoded)
    that can matter, ascending; `state.busy` is read before each step. `first_hit`: where
    ANY_NEEDLE first matches in `data`, when the caller searched already (-1: nowhere)."""
    return (index for index, _start in candidate_starts(data, state, first_hit, text))


def candidate_starts(data: bytes, state: _Source, first_hit: int = -2,
                     text: str | None = None, resume: list[int] | None = None,
                     clean: list[tuple[int, int]] | None = None) -> Iterator[tuple[int, int]]:
    """(index, byte offset in `data` where the line starts) of the lines of `data` that can matter,
    as `candidate_lines`; `text`, when given, is `data` decoded (its count of newlines is used).
    `resume`: a line start the caller may set past the line just handed out (`resume[0]`): the
    lines before it were taken care of, the scan goes on from there. `clean`: lines known to hold
    no needle (`CleanLines.spans`), which the needle search does not read."""
    # Byte offsets are str offsets in ASCII text, where str.count is the faster count.
    ascii = text is not None and text.isascii()
    end = len(data)
    last = data.rfind(b"\n") + 1  # where the last line starts
    needle = first_hit  # next ANY_NEEDLE match at or after `pos`; -1 none left, -2 not searched
    untagged = -2  # next untagged line start after `pos`; the same codes
    pos = counted = index = 0  # pos: a line start; index: the index of the line at `counted`
    while pos <= end:
        start = -1
        busy = state.busy
        if busy and untagged_at(data, pos):
            start = pos
        else:
            if busy and (untagged == -2 or 0 <= untagged <= pos):
                untagged = _next_untagged(data, pos, last)
            while True:  # the first line from pos holding a tagged needle, or an idle one if untagged
                if needle == -2 or 0 <= needle < pos:
                    needle = find_any_outside(data, pos, clean) if clean else find_any(data, pos)
                if needle < 0 or (busy and 0 <= untagged <= needle):
                    break
                line_start = data.rfind(b"\n", pos, needle) + 1 or pos
                line_end = data.find(b"\n", needle)
                line_end = end if line_end < 0 else line_end
                if (not busy and untagged_at(data, line_start)) or find_tagged(data, needle, line_end) >= 0:
                    start = line_start
                    break
                pos = line_end + 1  # a tagged line with idle needles only: nothing for it
            if busy and untagged >= 0 and (start < 0 or untagged < start):
                start = untagged
        if start < 0:
            return
        index += text.count("\n", counted, start) if ascii and text else newlines(data, counted, start)
        counted = start
        yield index, start
        if resume is not None and resume[0] > start:
            pos = resume[0]
            continue
        line_end = data.find(b"\n", start)
        if line_end < 0:
            return
        pos = line_end + 1


def newlines(data: bytes, start: int, end: int) -> int:
    """`data.count(b"\\n", start, end)`. Over more than a few lines, the length that deleting them
    takes off: `replace` finds each newline with `memchr`, `count` tests every byte (2 – 3.5× slower
    on 64 KB of SGLang output)."""
    if end - start < 512:
        return data.count(b"\n", start, end)
    piece = data[start:end] if start or end < len(data) else data
    return len(piece) - len(piece.replace(b"\n", b""))


def _next_untagged(data: bytes, pos: int, last: int) -> int:
    """The start of the first untagged line after the line start `pos`; -1 when none."""
    while True:
        found = _find_newline_before_untagged(data, pos)
        if found < 0:
            # an empty or `[` last line has no character after it for the pattern to see
            return last if last > pos and untagged_at(data, last) else -1
        start = found + 1
        if untagged_at(data, start):
            return start
        pos = start  # `[` and a non-ASCII digit: a tagged line after all
