"""Follow service log files like `tail -F`, handing out batches of complete decoded lines.

Survives rotation by rename, copytruncate, deleted/recreated files and directories, partial and
overlong lines and binary garbage. Reads big blocks and splits them with C-level `split`, so the
hot path does no per-line Python work. Waits on inotify in the calling thread (`watch.py`).

Only regular files are followed: a path is opened with O_NOFOLLOW, and a symlink, FIFO or device
in its place is refused with one warning (until something else takes the path), never read.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass

import structlog

from ..records import LogChunk
from .watch import DirectoryWatch

log = structlog.get_logger(__name__)

BLOCK_BYTES = 64 * 1024  # one read; a LogChunk holds the complete lines of one block
TAIL_BYTES = 64  # bytes before our offset, remembered to notice a file truncated and regrown past it
TRUNCATION_MARKER = " [ddtreed: line truncated at {limit} bytes]"
# Pacing for floods: while reads come faster than this (the read before came less than this long
# ago, or the last hold-off found new lines waiting), a read of only timestamped lines ("[2026-…")
# holds the next one back this long: a service logging 1,000 lines/s then costs
# ~1/MIN_READ_INTERVAL_S wake-ups, not one per write. Reads further apart than this (20 lines/s:
# one every 50 ms) are never held back, so a crash after ordinary traffic is read at once; a read
# with an untagged line (a traceback body, a C++ abort), a traceback header or an unfinished line
# is followed at once, flood or not.
# A flood that goes on (the read came right after a hold-off that found new lines waiting) is
# read every FLOOD_HOLD_S instead:
# each wake-up costs the daemon ~0.45 ms of CPU whatever it reads, so at 1,000 lines/s 25
# wake-ups a second instead of 50 is what keeps it under 2 % of a core. The price: a crash that
# starts inside such a flood of calm lines is read up to FLOOD_HOLD_S late (its service's exit
# still ends the hold at once). Pacing that two close reads began (8 ranks' lines of one batch,
# the 20 lines/s of the detection benchmark) holds MIN_READ_INTERVAL_S only: session 5's 40 ms
# cadence (fd42a4b) held those too, and was reverted for it (a854e26).
MIN_READ_INTERVAL_S = 0.020
FLOOD_HOLD_S = 0.040
TRACEBACK_HEADER = "Traceback (most recent call last):"  # a tagged line that starts a crash's output
# A line not starting "[<digit>" (SGLang's timestamp): the first line checked with `match`, the
# others by a search that starts at a literal newline, which `re` finds with a character scan
# instead of trying the pattern at every position (~4 µs per 4 KB chunk instead of ~100 µs:
# this check runs on every calm read of a flood, ~25 times a second at 1,000 lines/s).
_TAGGED_START = re.compile(r"\[\d")
_UNTAGGED_AFTER_NEWLINE = re.compile(r"\n(?!\[\d)")
# The same on a BlockChunk's bytes (no decode for the judgement; `\d` is then an ASCII digit, so
# a line starting with another script's digit counts as untagged: it is never held back for it).
_TAGGED_START_BYTES = re.compile(rb"\[\d")
_UNTAGGED_AFTER_NEWLINE_BYTES = re.compile(rb"\n(?!\[\d)")
TRACEBACK_HEADER_BYTES = TRACEBACK_HEADER.encode()


def has_untagged_line(text: str) -> bool:
    """Does a line of `text` (lines joined by "\\n") not start with "[" and a digit?"""
    return _TAGGED_START.match(text) is None or _UNTAGGED_AFTER_NEWLINE.search(text) is not None


def has_untagged_line_bytes(block: bytes) -> bool:
    """`has_untagged_line` of a block of lines as bytes, with ASCII digits only."""
    return _TAGGED_START_BYTES.match(block) is None or _UNTAGGED_AFTER_NEWLINE_BYTES.search(block) is not None


def _calm(chunk: LogChunk) -> bool:
    """Only timestamped lines and no traceback header (a BlockChunk judged on its bytes)."""
    block = chunk.__dict__.get("block")
    if block is not None:
        return not has_untagged_line_bytes(block) and TRACEBACK_HEADER_BYTES not in block
    text = chunk.text if chunk.text is not None else "\n".join(chunk.lines)
    return not has_untagged_line(text) and TRACEBACK_HEADER not in text


@dataclass
class _Source:
    """Where we are in one followed path."""

    path: str
    fd: int | None = None
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the open file
    offset: int = 0
    partial: bytes = b""  # the unfinished last line, at most max_line_bytes
    discarding: bool = False  # inside an overlong line already emitted truncated
    next_number: int = 1
    tail: bytes = b""  # the TAIL_BYTES that end at `offset`
    missing_warned: bool = False
    mtime_ns: int = -1  # st_mtime_ns at the last read through the path
    refused: tuple[int, int] | None = None  # (st_dev, st_ino) of a non-regular entry not followed


class Follower:
    """Follow `paths`; `read()` returns new complete lines, `wait()` blocks until there may be more."""

    def __init__(self, paths: list[str], max_line_bytes: int = 65536, from_end: bool = False,
                 poll_interval_s: float = 0.25, max_bytes_per_read: int = 1024 * 1024,
                 clock=time.time, min_read_interval_s: float | None = None,
                 flood_hold_s: float | None = None):
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
        self.max_line_bytes = max_line_bytes
        self._marker = TRUNCATION_MARKER.format(limit=max_line_bytes)
        self._poll_interval_s = poll_interval_s
        self._max_bytes_per_read = max_bytes_per_read
        self._clock = clock
        self._sources = [_Source(os.path.abspath(p)) for p in paths]
        self._min_read_interval_s = (MIN_READ_INTERVAL_S if min_read_interval_s is None
                                     else min_read_interval_s)
        # the hold in a flood that goes on: never shorter than the interval
        self._flood_hold_s = max(self._min_read_interval_s, FLOOD_HOLD_S if flood_hold_s is None else flood_hold_s)
        self._next_read_at = 0.0  # monotonic; wait() holds a change back until then
        self._last_read_at = -1e9  # monotonic time of the last read
        self._paced = False  # the coming read follows a hold-off directly: a flood goes on
        self.reads = 0  # reads done, and how many of them a hold-off delayed (for tests/benchmarks)
        self.holds = 0
        self.looks = 0  # reads that looked at every path again (lstat), not only at files written to
        # The last read, judged calm or not only when wait() needs it: a backlog never does.
        self._unjudged: tuple[float, list[LogChunk], bool] | None = None  # (read at, chunks, flood goes on)
        self._backlog = False  # a read stopped at max_bytes_per_read with data left
        self._orphaned = False  # a followed file is open but gone from its path: poll it
        self._watcher = DirectoryWatch({s.path for s in self._sources})
        self._taken = False  # wait() took the queued events just before the coming read
        self._unfinished: set[str] = set()  # paths a read left with data beyond max_bytes_per_read
        self._wake_told = False  # a wait() returned for the wake descriptor already
        self._look_again_at = 0.0  # monotonic; from then on the next read looks at every file again
        for source in self._sources:
            self._open(source, at_end=from_end)
        # Lines already in a file when it is opened come with no event to announce them: the first
        # wait() returns at once, as after a read cut at its budget, instead of after its timeout.
        self._backlog = any(source.fd is not None and os.fstat(source.fd).st_size > source.offset
                            for source in self._sources)

    def read(self) -> list[LogChunk]:
        """All new complete lines of every followed file (bounded per call); never blocks.

        With every directory watched, a read looks only at the files inotify says were written
        to (a `pread` each, no `stat`); every file and directory is looked at again (an `lstat`
        each) when something else happened to one of them, while polling, and at least every
        `poll_interval_s` (for what no event tells: a directory above ours renamed, a writer
        through another link)."""
        watcher = self._watcher
        if not self._taken:
            watcher.take()  # what was written since the last look (wait() took it just now)
        self._taken = self._backlog = False
        now = time.monotonic()
        chunks: list[LogChunk] = []
        if watcher.everything or not watcher.complete or self._orphaned or now >= self._look_again_at:
            self._unfinished = set()
            watcher.everything = False
            watcher.modified.clear()
            watcher.refresh()
            self._orphaned = False
            self._look_again_at = now + self._poll_interval_s
            self.looks += 1
            for source in self._sources:
                self._read_source(source, self._poll, chunks)
        elif watcher.modified or self._unfinished:
            # Files written to, and those the last read left with data beyond its budget.
            due = watcher.modified | self._unfinished if self._unfinished else watcher.modified
            self._unfinished = set()
            for source in self._sources:
                if source.path in due:
                    self._read_source(source, self._poll_written, chunks)
            watcher.modified.clear()
        going_on = self._paced  # right after a hold-off that found new lines: the flood goes on
        flood = going_on or now - self._last_read_at < self._min_read_interval_s
        self._next_read_at, self._last_read_at, self._paced = 0.0, now, False
        self.reads += 1
        self._unjudged = (now, chunks, going_on) if flood and self._maybe_calm(chunks) else None
        return chunks

    def _read_source(self, source: _Source, poll, chunks: list[LogChunk]) -> None:
        try:
            chunks.extend(poll(source))
        except OSError as error:
            # A file vanishing between stat and read is a race, not a failure: retry next time.
            log.warning("log_read_failed", path=source.path, error=str(error))
            self._close(source)
            self._look_again_at = 0.0

    def wait(self, timeout: float) -> bool:
        """Block until a followed file (or its directory) changed, or `timeout`; True on change."""
        deadline = time.monotonic() + max(0.0, timeout)
        watcher = self._watcher
        watcher.wake_quiet = False  # only a poll of this wait tells
        if self._backlog:
            return True
        self._judge()
        held = self._hold_off(deadline)
        while True:
            watching = self._watching()
            if self._written(held) if watching else self._has_unread():
                self._paced = held  # lines came in during the hold-off: still a flood
                self._taken = watching  # the coming read goes by the events taken just now
                return True
            if watcher.woken and not self._wake_told:
                self._wake_told = True  # the wake descriptor (the service exited): look now
                return True
            held = False
            # An event only says "look": the write may be one already read.
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not watching:
                self._watcher.wait(min(remaining, self._poll_interval_s))  # re-watches as it can
            elif not self._watcher.readable(remaining):
                return False

    def wake_on(self, fd: int) -> None:
        """Also poll `fd` (the service's pidfd) in every wait and hold-off: once it is readable
        the wait in progress ends at once (`woken`), and it is polled no more."""
        self._watcher.wake_on(fd)

    @property
    def woken(self) -> bool:
        """The descriptor given to `wake_on` was found readable (the service exited)."""
        return self._watcher.woken

    def wake_quiet(self) -> bool:
        """The last `wait()` polled the `wake_on` descriptor, found it not readable, and nothing
        asked since: the service was running then (its next exit ends the next wait at once).
        False when no poll of this wait took it in (a backlog, lines already there)."""
        watcher = self._watcher
        quiet, watcher.wake_quiet = watcher.wake_quiet, False
        return quiet

    def _watching(self) -> bool:
        """Every directory is watched and no followed file is open under another name: inotify
        says when to look (otherwise the follower polls)."""
        return self._watcher.complete and not self._orphaned

    def _written(self, held: bool = False) -> bool:
        """Did the queued events bring something unread? An `fstat` of each file written to
        (its size against our offset; after a hold-off in a flood a write is taken for new
        lines as it is); after anything but a write, an `lstat` of every path."""
        watcher = self._watcher
        watcher.take(refresh=True)  # re-watches a directory that went away or was replaced
        if watcher.everything:
            return self._has_unread()
        modified = watcher.modified
        if not modified:
            return False
        if held:
            return True
        for source in self._sources:
            if source.path not in modified:
                continue
            if source.fd is None:
                if not self._still_refused(source):  # a refused FIFO written to: nothing to read
                    return True
            elif os.fstat(source.fd).st_size != source.offset:
                return True
        return False

    def close(self) -> None:
        self._watcher.close()
        for source in self._sources:
            self._close(source)

    def __del__(self) -> None:
        # A follower dropped without close() must not keep an inotify instance (128 per user).
        watcher = getattr(self, "_watcher", None)
        if watcher is not None:
            self.close()

    def __enter__(self) -> "Follower":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- pacing -----------------------------------------------------------------------------

    def _maybe_calm(self, chunks: list[LogChunk]) -> bool:
        """The cheap half of "only complete timestamped lines read": lines, none unfinished."""
        if not chunks or self._min_read_interval_s <= 0:
            return False
        for source in self._sources:
            if source.partial or source.discarding:
                return False
        return True

    def _judge(self) -> None:
        """The last read was calm (nothing of a crash in flight): hold the next one back."""
        if self._unjudged is None:
            return
        read_at, chunks, going_on = self._unjudged
        self._unjudged = None
        if all(map(_calm, chunks)):
            self._next_read_at = read_at + (self._flood_hold_s if going_on else self._min_read_interval_s)

    def _hold_off(self, deadline: float) -> bool:
        """After a calm read in a flood, sleep until `_next_read_at` without watching: a flood
        then costs one wake-up per read, and whatever came meanwhile is read in one go."""
        delay = min(self._next_read_at, deadline) - time.monotonic()
        if delay <= 0:
            return False
        self.holds += 1
        self._watcher.pause(delay)  # ends early when the wake descriptor (the service's exit) is readable
        return True

    # --- one source -------------------------------------------------------------------------

    def _open(self, source: _Source, at_end: bool = False) -> None:
        if self._still_refused(source):
            return
        try:
            # O_NOFOLLOW: a planted link is not followed; O_NONBLOCK: a FIFO does not block the open.
            fd = os.open(source.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            self._warn_missing(source)
            return
        except OSError as error:
            if not self._refuse(source, "a symlink (not followed)"):
                log.warning("log_open_failed", path=source.path, error=str(error))
            return
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            os.close(fd)
            self._refuse(source, "not a regular file (FIFO, device or directory)")
            return
        source.refused = None
        source.fd, source.identity = fd, (status.st_dev, status.st_ino)
        source.mtime_ns = -1
        source.offset = status.st_size if at_end else 0
        source.partial, source.discarding = b"", False
        tail = min(TAIL_BYTES, source.offset)
        source.tail = os.pread(fd, tail, source.offset - tail) if tail else b""
        if source.missing_warned:
            log.info("log_file_appeared", path=source.path)
        source.missing_warned = False

    def _refuse(self, source: _Source, reason: str) -> bool:
        """Remember a non-regular entry at the path and warn once; False when it is a regular file."""
        try:
            status = os.lstat(source.path)
        except OSError:
            return False
        if stat.S_ISREG(status.st_mode):
            return False
        identity = (status.st_dev, status.st_ino)
        if source.refused != identity:
            log.warning("log_file_refused", path=source.path, reason=reason,
                        hint="only regular files are followed; replace it with one")
        source.refused = identity
        return True

    def _still_refused(self, source: _Source) -> bool:
        """The refused entry is still there: nothing to open (and nothing to warn about again)."""
        if source.refused is None:
            return False
        try:
            status = os.lstat(source.path)
        except OSError:
            source.refused = None
            return False
        if (status.st_dev, status.st_ino) == source.refused and not stat.S_ISREG(status.st_mode):
            return True
        source.refused = None
        return False

    def _close(self, source: _Source) -> None:
        if source.fd is not None:
            os.close(source.fd)
        source.fd, source.identity = None, None

    def _warn_missing(self, source: _Source) -> None:
        if not source.missing_warned:
            log.warning("log_file_missing", path=source.path)
            source.missing_warned = True

    def _poll(self, source: _Source) -> list[LogChunk]:
        """Look at the path itself (rotation, deletion, truncation), then read what is new."""
        if source.fd is None:
            self._open(source)
            return self._drain(source) if source.fd is not None else []
        chunks: list[LogChunk] = []
        try:
            status = os.lstat(source.path)  # the entry itself: a link replacing the file is a change
        except (FileNotFoundError, NotADirectoryError):
            # Renamed away or deleted: keep reading the old file, the writer may still append.
            self._warn_missing(source)
            self._orphaned = True  # its writes no longer reach our watch: poll until it is back
            self._check_shrunk(source, os.fstat(source.fd).st_size, chunks)
            return chunks + self._drain(source)
        if (status.st_dev, status.st_ino) != source.identity:
            if _empty_file(status):
                # logrotate `create`: a new empty file. A writer that never reopens its log (a
                # service whose stdout is the old file) writes on into the old one: it is read
                # (and polled: its writes no longer reach the watch) until the new one is written.
                self._orphaned = True
                self._check_shrunk(source, os.fstat(source.fd).st_size, chunks)
                return chunks + self._drain(source)
            # Rotation by rename: finish the old file's tail, then follow the new file from 0.
            self._check_shrunk(source, os.fstat(source.fd).st_size, chunks)
            chunks += self._drain(source)
            self._flush_partial(source, chunks)
            self._close(source)
            log.info("log_file_rotated", path=source.path)
            self._open(source)
            return chunks + (self._drain(source) if source.fd is not None else [])
        if status.st_size == source.offset and status.st_mtime_ns == source.mtime_ns:
            return []  # untouched since the last read: spare the truncation check and the read
        source.mtime_ns = status.st_mtime_ns
        self._check_shrunk(source, status.st_size, chunks)
        return chunks + self._drain(source)

    def _poll_written(self, source: _Source) -> list[LogChunk]:
        """A file inotify says was written to, and nothing else: the same entry as at the last
        look, so no `lstat`; the read itself checks for truncation (`_drain`)."""
        if source.fd is None:
            return self._poll(source)
        return self._drain(source)

    def _check_shrunk(self, source: _Source, size: int, chunks: list[LogChunk]) -> None:
        """copytruncate: the file shrank below our offset: start over at 0."""
        if size < source.offset:
            self._truncated(source, size, chunks)

    def _truncated(self, source: _Source, size: int, chunks: list[LogChunk]) -> None:
        """Start the file over at 0; an unfinished last line already read is a line (into
        `chunks`), as at a rename rotation: the old content it ended is gone from the file."""
        log.info("log_file_truncated", path=source.path, offset=source.offset, size=size)
        self._flush_partial(source, chunks)
        source.offset, source.partial, source.discarding, source.tail = 0, b"", False, b""

    def _has_unread(self) -> bool:
        """While polling: is something unread, by an `lstat` of every path?"""
        self._orphaned = False
        for source in self._sources:
            try:
                status = os.lstat(source.path)
            except OSError:
                if source.fd is None:
                    continue
                # Renamed away or deleted but still open: its writes no longer reach our watch.
                self._orphaned = True
                if os.fstat(source.fd).st_size != source.offset:
                    return True
                continue
            identity = (status.st_dev, status.st_ino)
            if source.fd is None and identity == source.refused:
                continue  # a refused FIFO or link: nothing to read, and no reason to wake up
            if identity != source.identity and source.fd is not None and _empty_file(status):
                self._orphaned = True  # still reading the old file (`_poll`): was it written to?
                if os.fstat(source.fd).st_size != source.offset:
                    return True
                continue
            if identity != source.identity or status.st_size != source.offset:
                return True
        return False

    def _drain(self, source: _Source) -> list[LogChunk]:
        """Read from our offset on, at most `max_bytes_per_read`. The first `pread` starts
        TAIL_BYTES early: bytes there that are no longer the ones we read (copytruncate, then
        the file rewritten or regrown past our offset) start the file over at 0."""
        chunks: list[LogChunk] = []
        budget = self._max_bytes_per_read
        check = len(source.tail)
        while budget > 0:
            size = self._block_size(source)
            if check:
                data = os.pread(source.fd, check + size, source.offset - check)
                if data[:check] != source.tail:
                    self._truncated(source, os.fstat(source.fd).st_size, chunks)
                    check = 0
                    continue
                data, check = data[check:], 0
            else:
                data = os.pread(source.fd, size, source.offset)
            if not data:
                break
            source.offset += len(data)
            budget -= len(data)
            source.tail = data[-TAIL_BYTES:] if len(data) >= TAIL_BYTES else (source.tail + data)[-TAIL_BYTES:]
            chunk = self._split(source, data)
            if chunk is not None:
                chunks.append(chunk)
            if len(data) < size:
                return chunks
        if budget <= 0:
            self._backlog = True
            self._unfinished.add(source.path)
        return chunks

    def _block_size(self, source: _Source) -> int:
        """Read so that partial + block never exceeds max_line_bytes when that is >= one block:
        then no complete line can be overlong and the per-line length check is skipped."""
        if self.max_line_bytes >= BLOCK_BYTES:
            return max(1, self.max_line_bytes - len(source.partial))
        return BLOCK_BYTES

    def _split(self, source: _Source, data: bytes) -> LogChunk | None:
        if source.discarding:
            newline = data.find(b"\n")
            if newline < 0:
                return None
            data, source.discarding = data[newline + 1:], False
        block = source.partial + data if source.partial else data
        end = block.rfind(b"\n")
        if end < 0:
            source.partial = block
            return self._cut_partial(source)
        source.partial = block[end + 1:]
        raw = block[:end]
        overflow = self._cut_partial(source) if len(source.partial) > self.max_line_bytes else None
        if overflow is None and self._plain(raw):
            first = source.next_number
            chunk = BlockChunk.of(source.path, first, raw, self._clock())
            source.next_number += chunk.line_count
            return chunk
        text = self._decode(raw)
        lines = text.split("\n")
        if overflow is not None:
            lines.extend(overflow.lines)
            text = text + "\n" + overflow.text
        return self._chunk(source, tuple(lines), text)

    def _cut_partial(self, source: _Source) -> LogChunk | None:
        """An unfinished line past the limit is emitted truncated now; its rest is discarded."""
        if len(source.partial) <= self.max_line_bytes:
            return None
        line = self._decode(source.partial[: self.max_line_bytes]) + self._marker
        source.partial, source.discarding = b"", True
        return self._chunk(source, (line,), line)

    def _flush_partial(self, source: _Source, chunks: list[LogChunk]) -> None:
        """A rotated-away file's last line without a newline is still a line."""
        if source.partial:
            line = self._decode(source.partial)
            source.partial = b""
            chunks.append(self._chunk(source, (line,), line))

    def _plain(self, raw: bytes) -> bool:
        """Are `raw`'s lines what `_decode` makes of them, byte for byte (no NUL to drop, no CRLF,
        no line to cut)? Then a `BlockChunk` decodes and splits them only when they are asked for."""
        return (len(raw) <= self.max_line_bytes and b"\x00" not in raw
                and (b"\r" not in raw or b"\r\n" not in raw))

    def _decode(self, raw: bytes) -> str:
        if len(raw) > self.max_line_bytes:
            pieces = raw.split(b"\n")
            if max(map(len, pieces)) > self.max_line_bytes:
                raw = b"\n".join(self._truncate(piece) for piece in pieces)
        text = raw.decode("utf-8", "replace")
        # NULs come from copytruncate holes and binary garbage; CRLF from Windows-style writers.
        if "\x00" in text:
            text = text.replace("\x00", "")
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        return text

    def _truncate(self, piece: bytes) -> bytes:
        if len(piece) <= self.max_line_bytes:
            return piece
        return piece[: self.max_line_bytes] + self._marker.encode()

    def _chunk(self, source: _Source, lines: tuple[str, ...], text: str) -> LogChunk:
        first = source.next_number
        source.next_number += len(lines)
        return LogChunk(source=source.path, first_number=first, lines=lines,
                        received_at=self._clock(), text=text)


def _empty_file(status: os.stat_result) -> bool:
    """An empty regular file: a new log nobody wrote to yet (the old one is still followed)."""
    return stat.S_ISREG(status.st_mode) and status.st_size == 0


class _Decoded:
    """A BlockChunk's `text`, decoded the first time it is asked for; then the chunk's own
    attribute (one set by `__init__`, in a copy made by `dataclasses.replace`, wins from the start)."""

    def __get__(self, chunk, owner=None):
        if chunk is None:
            return None
        value = chunk.block.decode("utf-8", "replace")
        object.__setattr__(chunk, "text", value)
        return value


class BlockChunk(LogChunk):
    """A chunk read as one block of complete lines, kept as its bytes (`block`, the lines joined by
    `\\n`): `text` and `lines` are decoded (UTF-8, invalid bytes replaced, as `Follower._decode`)
    and split when first asked for. A consumer that can work on the bytes (the assembler's scan,
    `tail`) never pays for the lines it does not look at; for every other one it is a LogChunk.

    Invalid UTF-8 never spans a newline (a newline byte is never inside a multi-byte character),
    so a line decoded from its own bytes is the line of the whole decoded text."""

    block: bytes
    line_count: int

    @classmethod
    def of(cls, source: str, first_number: int, block: bytes, received_at: float) -> "BlockChunk":
        # The newlines counted as the length their deletion takes off: `replace` finds them with
        # `memchr`, `bytes.count` tests every byte (~2.5× slower on a 64 KB block of SGLang output).
        chunk = object.__new__(cls)
        # The frozen dataclass refuses __setattr__; its instance dict takes the fields in one call.
        chunk.__dict__.update(source=source, first_number=first_number, received_at=received_at,
                              block=block, line_count=len(block) - len(block.replace(b"\n", b"")) + 1)
        return chunk

    text = _Decoded()  # type: ignore[assignment]

    def __getattr__(self, name: str):
        # Only for an attribute not set yet: `lines` the first time it is asked for.
        if name != "lines":
            raise AttributeError(name)
        value = tuple(self.text.split("\n"))
        object.__setattr__(self, name, value)
        return value

    def tail(self, count: int) -> LogChunk:
        """The last `count` lines (all of them when fewer), decoded from their own bytes."""
        if "block" not in self.__dict__:  # made by dataclasses.replace: a LogChunk like any other
            lines = self.lines
            return self if len(lines) <= count else LogChunk(
                self.source, self.first_number + len(lines) - count, lines[-count:], self.received_at)
        if self.line_count <= count:
            return self
        cut = len(self.block)
        for _ in range(count):
            cut = self.block.rfind(b"\n", 0, cut)
        lines = tuple(self.block[cut + 1:].decode("utf-8", "replace").split("\n"))
        return LogChunk(self.source, self.first_number + self.line_count - count, lines, self.received_at)
