"""Streaming assembly of SGLang output into crash groups, with a fast path for ordinary lines.

Most chunks are decode/prefill progress: a rank-tagged line each. One pass of an automaton over
the chunk (`scan.py`) finds the lines that can announce, continue or explain a crash; only those
lines (and, while a traceback is in progress, every untagged line) get per-line Python work.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

import structlog

from ..records import Crash, LogChunk
from . import grammar, native_lines, scan
from .builder import AFTER, CHAIN, FRAMES, HEADER, MESSAGE, PYSPY, Builder
from .groups import Group

log = structlog.get_logger(__name__)

# Sealed groups waiting for take(): the daemon takes every loop turn, so more only pile up under a
# flood, where later groups repeat the first ones. The earliest are kept (the founding crash is
# in them), later ones dropped and counted: memory and diagnosis time stay bounded.
MAX_READY_GROUPS = 2
CONTEXT_LOOKBACK = 8  # lines before a traceback header searched for warnings that explain it
CONSUMED, FINISH, SKIPPED = "consumed", "finish", "skipped"
MAX_IDLE_EFFECTS = 1024  # distinct idle lines remembered (forgotten all at once when full)
MAX_IDLE_KEY = 1024  # longer lines are not remembered
_UNSET = object()  # an idle line that left the torch rank as it was
MIN_ORPHAN_FRAMES = 2  # frames of a headerless paste cut before its exception line that make it a crash
# An untagged line outside a traceback without any of these (NCCL INFO chatter, tqdm bars) costs
# this one search in `_idle_line` (with no C++ abort waiting for its what() line).
class _IdleGate:
    """`search(line)`: truthy when the line holds an idle needle, else None (as `re.search`). One RE2
    pass over its UTF-8 bytes, ~1 µs; Python's `re` alternation of the ~60 needles took ~5 µs a
    line (a device-assert flood passes every line through it). An ASCII needle is in the text
    exactly when it is in its bytes (UTF-8 never puts an ASCII byte inside a multi-byte character)."""

    @staticmethod
    def search(line: str) -> bool | None:
        return True if scan.find_idle(line.encode("utf-8", "surrogatepass")) >= 0 else None


_IDLE_GATE = _IdleGate()


@dataclass
class _SourceState:
    open: list[Builder] = field(default_factory=list)  # FIFO: untagged body lines go to open[0]
    pyspy: Builder | None = None  # a watchdog timeout taking the py-spy dump after it
    terminate: tuple[str, str | None] | None = None  # C++ abort type awaiting its what() line
    torch_rank: str | None = None  # from torch's `[rank3]:` prefixes
    recent: deque = field(default_factory=lambda: deque(maxlen=4))  # unclaimed notable lines
    overflowed: bool = False  # warned once that headers without bodies piled up
    milestone: str | None = None  # the last start-up milestone line seen (which phase we are in)

    @property
    def busy(self) -> bool:
        return bool(self.open) or self.pyspy is not None or self.terminate is not None


class Assembler:
    """Feed LogChunks; `take()` returns groups of crashes from ranks that failed together."""

    def __init__(self, settle_s: float = 1.0, max_lines: int = 2000, max_pending: int = 64,
                 max_group_s: float = 60.0, eager: bool = False, keep_cut_orphans: bool = False):
        self.settle_s = settle_s
        # keep_cut_orphans (offline diagnosis of a paste): frames pasted without their `Traceback`
        # header and cut before the exception line are still a crash (a cut traceback whose frames
        # say where it died), when there are at least MIN_ORPHAN_FRAMES of them. The daemon drops
        # them: a live service's headerless frames without an error are no crash of its own.
        self.keep_cut_orphans = keep_cut_orphans
        # eager: hand out a group as soon as every traceback in it has its exception line, without
        # waiting settle_s for other ranks; ranks that finish later arrive in a later group.
        self.eager = eager
        self.max_lines = max_lines  # per traceback, so a runaway message cannot grow unbounded
        self.max_pending = max_pending  # open tracebacks per source
        self.max_group_s = max_group_s  # a group that never goes quiet is still emitted
        self._states: dict[str, _SourceState] = {}
        self._group: Group | None = None
        self._ready: list[tuple[Crash, ...]] = []  # sealed when full, at most MAX_READY_GROUPS
        self._dropped = 0  # crashes of groups dropped since the last take()
        self._current: tuple[LogChunk, object] | None = None  # the chunk being fed, its lines by index
        self._comm = native_lines.CommLines()  # failure lines of NCCL/c10d/gloo: a bare death's context
        # Untagged lines outside a traceback whose only effects are the torch rank, the recent
        # notable lines and the communication failure lines: line -> (rank or _UNSET, recent
        # line or None, failure line or None), learned as `_line` takes them (`_effect`).
        self._idle_effects: dict[str | bytes, tuple] = {}
        self.clean_lines = scan.CleanLines()  # long needle-free lines: the automaton skips them (and the serving watch)
        self._noted_rank: object = _UNSET
        self._effect: tuple[str | None, str | None] | None = None

    # --- input --------------------------------------------------------------------------------

    def feed(self, chunk: LogChunk) -> None:
        state = self._states.get(chunk.source)
        if state is None:
            state = self._states[chunk.source] = _SourceState()
        block = getattr(chunk, "block", None)  # a follower's BlockChunk: its lines' bytes, undecoded
        text: str | None = None
        if block is not None and b"\x1b" not in block:
            data = block
        else:
            text = chunk.text if chunk.text is not None else "\n".join(chunk.lines)
            if "\x1b" in text:
                # Coloured output (Python 3.13 tracebacks, rich loggers): parse it as the plain text.
                lines = tuple(grammar.strip_ansi(line) for line in chunk.lines)
                text = "\n".join(lines)
                chunk = replace(chunk, lines=lines, text=text if chunk.text is not None else None)
            data = scan.encode(text)
        first_hit = -2
        clean = self.clean_lines.spans(data)
        if not state.busy:
            first_hit = scan.find_any_outside(data, 0, clean) if clean else scan.find_any(data)
            if first_hit < 0:
                return  # the fast path: one pass of the automaton, no per-line work (none decoded)
        previous = -1
        every_line = _level_open(state) or scan.find_level_traceback(data) >= 0
        starts = None
        if every_line or text is not None or state.busy:
            # A traceback in progress reads most lines (every body line): split them all at once.
            if text is None:
                text = chunk.text  # `data` decoded: its count of newlines is the faster one
            count, access = len(chunk.lines), chunk.lines
            selected = (((index, -1) for index in range(count)) if every_line
                        else scan.candidate_starts(data, state, first_hit, text, clean=clean))
        else:  # the few lines the scan selects, each decoded from its own bytes
            count = chunk.line_count  # type: ignore[attr-defined]
            access = _BlockLines(chunk, data, count)
            starts = access.starts
            resume = [0]  # where the scan goes on after a run of assert lines taken at once
            selected = scan.candidate_starts(data, state, first_hit, resume=resume, clean=clean)
        self._current = (chunk, access)
        seen = self._idle_effects
        try:
            for index, start in selected:
                if starts is not None:
                    starts[index] = start
                if index > previous + 1:
                    self._ordinary(state, chunk.received_at)
                previous = index
                if state.busy:
                    self._line(state, chunk, index)
                    continue
                # Outside a traceback an untagged line's effect depends on its text alone: a line
                # seen before (NCCL chatter, repeated warnings) applies what it did then.
                if start >= 0 and starts is not None:
                    end = data.find(b"\n", start)
                    key: str | bytes = data[start:] if end < 0 else data[start:end]
                else:
                    key = access[index]
                effect = seen.get(key)
                if effect is not None:
                    self._apply_idle(state, chunk, index, effect)
                    continue
                if starts is not None and key[:1] == b"/" and _ASSERT_BYTES in key:
                    run, end = scan.assert_run(data, start)
                    if run:  # a device-side assert flood: its lines add asserts, nothing else
                        self._activity(chunk.received_at).add_assert_run(run, _stripped_lines(data, start, end))
                        previous = index + run - 1
                        resume[0] = end
                        continue
                self._noted_rank, self._effect = _UNSET, None
                self._line(state, chunk, index)
                if self._effect is not None and len(key) <= MAX_IDLE_KEY:
                    if len(seen) >= MAX_IDLE_EFFECTS:
                        seen.clear()
                    seen[key] = (self._noted_rank, *self._effect)
                self._effect = None
        finally:
            self._current = None
        if previous < count - 1:
            self._ordinary(state, chunk.received_at)

    def _apply_idle(self, state: _SourceState, chunk: LogChunk, index: int, effect: tuple) -> None:
        """What `_line` did to an idle source for this line's text before (`_idle_effects`)."""
        rank, recent, comm = effect
        if rank is not _UNSET:
            state.torch_rank = rank
        if recent is not None:
            state.recent.append(recent)
        if comm is not None:
            self._comm.add(chunk.source, chunk.first_number + index, chunk.received_at, comm)

    def take(self, now: float, final: bool = False) -> list[tuple[Crash, ...]]:
        """Groups quiet for settle_s (all of them when `final`), oldest first."""
        self._finish_stale(now, final)
        if self.eager:
            self._finish_complete(now)
        ready = [crashes for crashes in self._ready if crashes]
        self._ready.clear()
        if self._dropped:
            log.warning("crash_groups_dropped", crashes=self._dropped, kept_groups=MAX_READY_GROUPS,
                        reason="a flood of tracebacks: the earliest groups are kept")
            self._dropped = 0
        group = self._group
        if group is None:
            return ready
        if not final and now - group.started < self.max_group_s:
            quiet = now - group.last_activity >= self.settle_s
            # Eager needs a parsed crash: a SIGQUIT line alone may precede the ranks' tracebacks.
            if self._any_open() or not (quiet or (self.eager and group.crashes)):
                return ready
        self._group = None
        crashes = group.emit()
        return ready + [crashes] if crashes else ready

    # --- per line -----------------------------------------------------------------------------

    def _text(self, chunk: LogChunk, index: int) -> str:
        """Line `index` of `chunk` (of a BlockChunk being fed: decoded from its bytes alone)."""
        current = self._current
        return current[1][index] if current is not None and current[0] is chunk else chunk.lines[index]  # type: ignore[index]

    def _before(self, chunk: LogChunk, index: int, count: int) -> tuple[str, ...]:
        """`chunk.lines[max(0, index - count):index]`."""
        current = self._current
        if current is not None and current[0] is chunk and isinstance(current[1], _BlockLines):
            return current[1].before(index, count)
        return chunk.lines[max(0, index - count):index]

    def _line(self, state: _SourceState, chunk: LogChunk, index: int) -> None:
        text = self._text(chunk, index)
        number = chunk.first_number + index
        if text[:1] not in ("[", " ", "\t", ""):
            end = grammar.container_end(text)
            if end:  # `sglang-1  | …` (compose) or `2026-…Z stderr F …` (CRI), stacked: the line is after them
                text = text[end:]
        timestamp, rank, body = grammar.parse_line(text)
        speaker = None
        if timestamp is None and body.startswith("[rank"):
            torch_rank = grammar.TORCH_RANK_PREFIX.match(body)
            if torch_rank:  # torchrun's `[rank3]:` on every line of that rank's output, SGLang's own prefix after it
                state.torch_rank = self._noted_rank = speaker = f"rank{torch_rank.group('rank')}"
                timestamp, rank, body = grammar.parse_line(body[torch_rank.end():])
                rank = rank or state.torch_rank
        if timestamp is not None:
            continued = _level_continuation(state, body)
            if continued is None:
                self._tagged(state, chunk, index, rank, body)
                return
            body = continued  # a logger that puts `[ts] ERROR: ` before every line of a traceback
        elif state.open and _level_open(state):
            continued = _level_continuation(state, body)  # the same lines with their `[ts] ` cut off
            body = body if continued is None else continued
        if state.pyspy is not None and self._feed_pyspy(state, body, number, chunk.received_at):
            return
        while state.open:
            owner = state.open[0]
            if owner.state in (MESSAGE, AFTER) and (
                    speaker is not None and owner.rank is not None and owner.rank.startswith("rank")
                    and owner.rank != speaker or grammar.GLOG_RECORD.match(body.lstrip()) is not None):
                # Another rank's line, or a C++ logger's record: the error line before it is done.
                self._finish(state, owner, chunk.received_at)
                continue
            result = self._feed_builder(owner, body, number, chunk.received_at)
            if result == CONSUMED:
                if owner.lines > self.max_lines:
                    self._finish(state, owner, chunk.received_at)
                return
            if result == SKIPPED:
                break
            self._finish(state, owner, chunk.received_at)
        self._idle_line(state, chunk, number, body)

    def _tagged(self, state: _SourceState, chunk: LogChunk, index: int, rank, body: str) -> None:
        now, number = chunk.received_at, chunk.first_number + index
        self._ordinary(state, now)
        if body.startswith(grammar.REQUEST_LOG_PREFIXES):
            return  # a request logged with its prompt: crash words in it are the user's, not a crash
        if _is_milestone(body):
            state.milestone = body.strip()[:300]
            self._comm.clear()
            return
        header = body.rstrip() if body[-1:] in (" ", "\t") else body  # a paste's trailing blanks
        if header.endswith(grammar.TRACEBACK_HEADER):
            prefix = header[: -len(grammar.TRACEBACK_HEADER)].strip().rstrip(":").strip() or None
            context = tuple(line for line in self._before(chunk, index, CONTEXT_LOOKBACK)
                            if grammar.TRACEBACK_HEADER not in line and grammar.DEVICE_ASSERT not in line
                            and any(word in line for word in grammar.CONTEXT_WORDS))
            context += self._comm.before(chunk.source, number, now)  # a DeepEP timeout before a trap
            self._open(state, Builder("traceback", chunk.source, rank, prefix, number, now,
                                      context=tuple(state.recent) + context + _phase(state)),
                       self._text(chunk, index))
            return
        announced = native_lines.announced_inline(body)
        if announced:  # `Scheduler hit an exception: DistBackendError: …`, no traceback under it
            prefix = body[:body.index(native_lines.ANNOUNCED_NEEDLE) + len(native_lines.ANNOUNCED_NEEDLE) - 2].strip()
            self._open_bare(state, chunk, number, rank, prefix, announced, self._text(chunk, index))
            return
        if grammar.WATCHDOG_TIMEOUT.search(body):
            builder = Builder("watchdog-timeout", chunk.source, rank, None, number, now, state=PYSPY)
            builder.set_exception(None, body.strip())
            builder.state = PYSPY
            builder.touch(number, self._text(chunk, index), now)
            state.pyspy = builder
            self._activity(now)
            return
        for pattern in grammar.CHILD_DEATHS:
            match = pattern.search(body)
            if match:
                self._crash(Crash(kind="child-death", exception=None, message=body.strip(), rank=rank,
                                  exit_code=int(match.group("code")), source=chunk.source,
                                  first_line=number, last_line=number, detected_at=now,
                                  excerpt=(self._text(chunk, index),),
                                  context=self._comm.before(chunk.source, number, now) + _phase(state)), now)
                return
        fatal = grammar.fatal_line(body)
        if fatal:
            self._fatal(state, chunk, number, rank, fatal, self._text(chunk, index))
            return
        if grammar.SIGQUIT.search(body):
            self._activity(now).add_sigquit(body.strip(), chunk.source, number,
                                            self._comm.before(chunk.source, number, now))

    def _ordinary(self, state: _SourceState, now: float) -> None:
        """A prefixed line ends the body in progress: a traceback is one write, so a prefixed
        line inside it means the writer died mid-way. Only a bare header keeps waiting: ranks
        interleave their header lines before the bodies follow."""
        if state.pyspy is not None:
            self._finish_pyspy(state, now)
        if state.open and state.open[0].state != HEADER:
            self._finish(state, state.open[0], now)

    def _fatal(self, state: _SourceState, chunk: LogChunk, number: int, rank, fatal, raw: str) -> None:
        label, message = fatal
        now = chunk.received_at
        crash = Crash(kind="nccl-watchdog" if label == "NCCL watchdog" else "error-line", exception=None,
                      message=message, rank=rank or state.torch_rank, prefix=label, source=chunk.source,
                      first_line=number, last_line=number, detected_at=now, excerpt=(raw,),
                      context=tuple(state.recent) + _phase(state))
        if label in ("NCCL watchdog", "TCPStore"):
            # Often the prelude of a C++ abort whose what() says the same: kept only without one.
            self._activity(now).add_nccl(crash)
        else:
            self._crash(crash, now)

    def _feed_builder(self, builder: Builder, body: str, number: int, now: float) -> str:
        stripped = body.strip()
        state = builder.state
        after_frame, builder.after_frame = builder.after_frame, False
        if state in (HEADER, FRAMES, CHAIN):
            frame = grammar.FRAME.match(body)
            if frame:
                builder.add_frame(frame)
                builder.after_frame = True
            elif state == FRAMES and stripped.endswith(grammar.TRACEBACK_HEADER):
                return FINISH  # a new traceback after one cut before its exception line: its own crash
            elif not stripped or stripped == grammar.TRACEBACK_HEADER:
                builder.state = FRAMES if state == FRAMES else HEADER
            elif grammar.ELISION.match(stripped):
                pass  # `...` or `[... 12 lines omitted ...]` where the reporter cut frames
            elif state == FRAMES and stripped.startswith("```"):
                return FINISH  # a report's code fence closes a paste cut before its exception line
            elif state == FRAMES and body[:1] in (" ", "\t"):
                if after_frame:
                    builder.last_source = stripped[:500]  # the source line under a frame
                # else 3.11+ caret markers
            elif state == FRAMES and (_carets(stripped) or (after_frame and _source_line(stripped))):
                if after_frame:
                    builder.last_source = stripped[:500]  # the same, from a paste that lost its indentation
            elif (state == FRAMES and grammar.fatal_line(stripped)
                  and not grammar.split_exception(stripped, strict=True)):
                return FINISH  # `Fatal Python error: …` after faulthandler's frames: its own crash
            elif state == FRAMES:
                builder.set_exception(*grammar.split_exception(stripped, strict=False))
            elif state == HEADER and grammar.split_exception(stripped, strict=True):
                builder.set_exception(*grammar.split_exception(stripped, strict=True))
            else:
                return SKIPPED if state == HEADER else FINISH
        elif state == MESSAGE:
            if builder.bare and stripped and not builder.continues_bare(stripped, body[:1] in (" ", "\t")):
                return FINISH  # a bare exception line takes only the NPU lines under it
            if not stripped:
                builder.state = AFTER
            elif stripped in grammar.CHAIN_MARKERS:
                builder.chain()
            elif grammar.FRAME.match(body) or stripped == grammar.TRACEBACK_HEADER:
                return FINISH  # the next rank's body follows without a blank line
            elif stripped.startswith("```"):
                return FINISH  # a report's code fence: what follows it is the reporter's, not the error's
            else:
                builder.add_message_line(body.rstrip())
        elif stripped in grammar.CHAIN_MARKERS:
            builder.chain()
        elif builder.bare and stripped and builder.continues_bare(stripped, body[:1] in (" ", "\t")):
            builder.add_message_line(body.rstrip())  # an NPU line or the C++ location after a blank line
            builder.state = MESSAGE
        elif stripped:
            return FINISH
        builder.touch(number, body, now)
        return CONSUMED

    def _idle_line(self, state: _SourceState, chunk: LogChunk, number: int, body: str) -> None:
        """An untagged line with no traceback waiting for it."""
        if state.terminate is None and _IDLE_GATE.search(body) is None:
            self._effect = (None, None)
            return  # nothing in it can open, end or explain a crash
        now, stripped = chunk.received_at, body.strip()
        if not stripped:
            self._effect = (None, None)
            return
        if stripped.endswith(grammar.TRACEBACK_HEADER):
            prefix = stripped[: -len(grammar.TRACEBACK_HEADER)].strip().rstrip(":").strip() or None
            context = tuple(state.recent) + self._comm.before(chunk.source, number, now) + _phase(state)
            self._open(state, Builder("traceback", chunk.source, state.torch_rank, prefix, number, now,
                                      context=context), body)
            return
        frame = grammar.FRAME.match(body)
        if frame:
            builder = Builder("traceback", chunk.source, state.torch_rank, None, number, now, orphan=True,
                              context=_phase(state))
            builder.add_frame(frame)
            builder.after_frame = True
            self._open(state, builder, body)
            return
        if grammar.DEVICE_ASSERT in body:
            self._activity(now).add_assert(stripped)
            return
        self._idle_native(state, chunk, number, body, stripped)

    def _idle_native(self, state, chunk: LogChunk, number: int, body: str, stripped: str) -> None:
        """C++ aborts, NCCL watchdog lines and bare exception lines without a traceback."""
        now = chunk.received_at
        torch_rank = grammar.TORCH_RANK.match(stripped)
        if torch_rank:
            state.torch_rank = self._noted_rank = f"rank{torch_rank.group('rank')}"
        if _is_milestone(stripped):
            state.milestone = stripped[:300]  # a paste without the log prefix
            self._comm.clear()
            return
        if "Kill" in stripped or "oom-kill" in stripped:
            killed = grammar.KILL_LINE.match(stripped)
            if killed:  # SIGKILL (the OOM killer): no output of its own, only these lines say so
                self._crash(Crash(kind="child-death", exception=None, message=grammar.kill_message(stripped),
                                  rank=state.torch_rank, exit_code=grammar.KILL_EXIT_CODE, prefix="killed",
                                  source=chunk.source,
                                  first_line=number, last_line=number, detected_at=now, excerpt=(body,),
                                  context=self._comm.before(chunk.source, number, now) + _phase(state)), now)
                return
        fatal = grammar.fatal_line(stripped)
        argparse_error = grammar.ARGPARSE_ERROR.match(stripped) if ": error: " in stripped else None
        native = state.terminate is not None and grammar.WHAT.match(body)
        if fatal and not native and not grammar.TERMINATE.search(body) and not grammar.NCCL_TIMEOUT.search(body):
            self._fatal(state, chunk, number, None, fatal, body)
            return
        if argparse_error:
            self._fatal(state, chunk, number, None, ("usage error", stripped), body)
            return
        if grammar.SIGQUIT.search(stripped) and "*** SIG" not in stripped:
            # the launcher's notice pasted without SGLang's log prefix (not a signal dump's `*** SIGQUIT received at`)
            before = self._comm.before(chunk.source, number, now)
            self._activity(now).add_sigquit(stripped, chunk.source, number, before)
            return
        terminate = grammar.TERMINATE.search(body)
        what = grammar.WHAT.match(body)
        nccl = grammar.NCCL_TIMEOUT.search(body)
        if terminate:
            state.terminate = (terminate.group("type"), state.torch_rank)
            self._activity(now)
        elif what and state.terminate is not None:
            exception, rank = state.terminate
            message = what.group("message").strip()
            kind = "nccl-watchdog" if "atchdog" in message else "traceback"
            self._crash(Crash(kind=kind, exception=exception, message=message, rank=rank,
                              source=chunk.source, first_line=number, last_line=number,
                              detected_at=now, excerpt=(body,),
                              context=tuple(state.recent) + _phase(state)), now)
            self._group.native_sources.add(chunk.source)
            state.terminate = None
        elif nccl:
            self._activity(now).add_nccl(Crash(
                kind="nccl-watchdog", exception=None, message=nccl.group("message").strip(),
                rank=state.torch_rank, source=chunk.source, first_line=number, last_line=number,
                detected_at=now, excerpt=(body,)))
        elif grammar.split_exception(stripped, strict=True):
            self._open_bare(state, chunk, number, state.torch_rank, None,
                            grammar.split_exception(stripped, strict=True), body)
        else:
            recent = stripped[:500] if any(word in body for word in grammar.CONTEXT_WORDS) else None
            if recent is not None:
                state.recent.append(recent)
            comm = self._comm.note(chunk.source, number, now, stripped)
            if state.terminate is None:  # idle: the same text will do the same again
                self._effect = (recent, comm)

    def _open_bare(self, state: _SourceState, chunk: LogChunk, number: int, rank, prefix, error, raw: str) -> None:
        """An exception line with no traceback: a crash of its own, with the NPU lines under it."""
        builder = Builder("traceback", chunk.source, rank, prefix, number, chunk.received_at, bare=True,
                          context=tuple(state.recent) + _phase(state))
        builder.set_exception(*error)
        self._open(state, builder, raw)

    def _feed_pyspy(self, state: _SourceState, body: str, number: int, now: float) -> bool:
        frame = grammar.PYSPY_FRAME.match(body)
        stripped = body.strip()
        if frame:
            state.pyspy.add_frame(frame, pyspy=True)
        elif not (stripped.startswith(("Pyspy dump", "Thread ", "Process ")) or not stripped):
            self._finish_pyspy(state, now)
            return False
        state.pyspy.touch(number, body, now)
        return True

    # --- bookkeeping --------------------------------------------------------------------------

    def _open(self, state: _SourceState, builder: Builder, text: str) -> None:
        builder.touch(builder.first_line, text, builder.last_activity)
        state.open.append(builder)
        if len(state.open) > self.max_pending:
            if not state.overflowed:
                log.warning("traceback_pending_overflow", source=builder.source, limit=self.max_pending)
                state.overflowed = True
            self._finish(state, state.open[0], builder.last_activity)
        self._activity(builder.last_activity)

    def _finish(self, state: _SourceState, builder: Builder, now: float) -> None:
        # The crash happened when its last line came, not when we noticed it went quiet.
        state.open.remove(builder)
        kept_cut = self.keep_cut_orphans and builder.frame_count >= MIN_ORPHAN_FRAMES
        if builder.complete or not builder.orphan or kept_cut:
            self._crash(builder.to_crash(builder.last_activity), builder.last_activity)

    def _finish_pyspy(self, state: _SourceState, now: float) -> None:
        builder, state.pyspy = state.pyspy, None
        self._crash(builder.to_crash(builder.last_activity), builder.last_activity)

    def _finish_stale(self, now: float, final: bool) -> None:
        for state in self._states.values():
            for builder in list(state.open):
                if final or now - builder.last_activity >= self.settle_s:
                    self._finish(state, builder, now)
            if state.pyspy is not None and (final or now - state.pyspy.last_activity >= self.settle_s):
                self._finish_pyspy(state, now)
            if final:
                state.terminate = None

    def _finish_complete(self, now: float) -> None:
        """Eager mode: a traceback whose exception line arrived is done. SGLang logs a rank's
        traceback in one write, so at the end of a read nothing more of it is coming."""
        for state in self._states.values():
            for builder in list(state.open):
                if builder.kind == "traceback" and builder.state in (MESSAGE, AFTER):
                    self._finish(state, builder, now)

    @property
    def busy(self) -> bool:
        """A traceback is being assembled or a group waits to be taken: a crash is on its way."""
        return self._group is not None or bool(self._ready) or self._any_open()

    def _any_open(self) -> bool:
        return any(state.open or state.pyspy is not None for state in self._states.values())

    def _activity(self, now: float) -> Group:
        if self._group is None:
            self._group = Group(started=now)
        self._group.last_activity = max(self._group.last_activity, now)
        return self._group

    def _crash(self, crash: Crash, now: float) -> None:
        group = self._activity(now)
        if group.full:
            # Bounded memory: a full group is sealed and a new one begun; past MAX_READY_GROUPS
            # sealed groups the newest is dropped (counted), never the founding crash's.
            sealed = group.emit()
            if len(self._ready) < MAX_READY_GROUPS:
                self._ready.append(sealed)
            else:
                self._dropped += len(sealed)
            self._group = None
            group = self._activity(now)
        group.add_crash(crash)


_ASSERT_BYTES = grammar.DEVICE_ASSERT.encode()


def _stripped_lines(data: bytes, start: int, end: int):
    """The lines of `data[start:end]` (line starts both), decoded and stripped, in order, as read."""
    while start < end:
        stop = data.find(b"\n", start, end)
        stop = end if stop < 0 else stop
        yield data[start:stop].decode("utf-8", "replace").strip()
        start = stop + 1


class _BlockLines:
    """A BlockChunk's lines by index, each decoded from its own bytes when asked: the assembler
    reads the lines the scan selects (`starts`, noted as it hands them out) and, at a traceback
    header, the few before it. A line of the whole decoded text is the same (ddtreed.logs.follower).
    Once more than a sixteenth of them were asked for (a traceback flood: every body line is), the
    chunk's lines are split in one go instead."""

    def __init__(self, chunk: LogChunk, data: bytes, count: int):
        self._chunk, self._data = chunk, data
        self.starts: dict[int, int] = {}  # index -> where the line starts, as the scan hands them out
        self._left = max(8, count // 16)  # lines decoded one by one before splitting them all
        self._all: tuple[str, ...] | None = None

    def _split(self) -> tuple[str, ...]:
        self._all = self._chunk.lines
        return self._all

    def __getitem__(self, index: int) -> str:
        if self._all is not None:
            return self._all[index]
        self._left -= 1
        if self._left < 0:
            return self._split()[index]
        start = self.starts[index]
        end = self._data.find(b"\n", start)
        return (self._data[start:] if end < 0 else self._data[start:end]).decode("utf-8", "replace")

    def before(self, index: int, count: int) -> tuple[str, ...]:
        """Lines max(0, index - count) to index - 1, read back from the start of line `index`."""
        self._left -= count
        if self._all is not None or self._left < 0:
            return (self._all or self._split())[max(0, index - count):index]
        found: list[str] = []
        end = self.starts[index] - 1  # the newline that ends the line before
        while len(found) < min(count, index):
            start = self._data.rfind(b"\n", 0, end) + 1
            found.append(self._data[start:end].decode("utf-8", "replace"))
            end = start - 1
        return tuple(reversed(found))


_LEVELS = ("ERROR", "WARNING", "CRITICAL")


def _level_open(state: _SourceState) -> bool:
    return bool(state.open) and state.open[0].prefix in _LEVELS


def _level_continuation(state: _SourceState, body: str) -> str | None:
    """The rest of `ERROR:   File …` when the open traceback began as `ERROR: Traceback …`."""
    if not _level_open(state):
        return None
    level = state.open[0].prefix + ":"
    if not body.startswith(level):
        return None
    rest = body[len(level):]
    return rest.removeprefix(" ")


def _is_milestone(body: str) -> bool:
    return (any(needle in body for needle in grammar.MILESTONE_NEEDLES) and "Traceback" not in body
            and grammar.MILESTONE.match(body.strip()) is not None)


def _phase(state: _SourceState) -> tuple[str, ...]:
    """The last milestone before a crash, as a context line (evidence of the phase it died in)."""
    return (grammar.MILESTONE_MARK + state.milestone,) if state.milestone else ()


def _carets(stripped: str) -> bool:
    return bool(stripped) and not stripped.strip("^~ ")


def _source_line(stripped: str) -> bool:
    """A line right after a frame that cannot be an exception line: the frame's source code."""
    if stripped in grammar.SOURCE_WORDS or stripped.split(" ", 1)[0] in ("raise", "return", "assert", "await"):
        return True
    found = grammar.EXCEPTION.match(stripped)
    if found is None:
        return True
    # A bare dotted name (`self._handle`, a source line cut mid-call): an exception line with no
    # message names a class, and a class's name starts with a capital (`AssertionError`).
    return ":" not in stripped and not stripped.rsplit(".", 1)[-1][:1].isupper()


def unreverse(lines: list[str]) -> list[str]:
    """A paste in newest-line-first order (exception line on top, the `Traceback` header at the
    bottom) put back in the order Python prints it; a paste's quoting and trailing blanks
    (`paste.unquote`) are taken off first. Other text is returned as it was."""
    from .paste import unquote

    lines = unquote(lines)
    header = grammar.TRACEBACK_HEADER
    if not any(line.rstrip().endswith(header) for line in lines):
        return lines
    result = list(lines)
    usual, upside_down = False, 0
    for index, line in enumerate(lines):
        if not line.rstrip().endswith(header):
            continue
        after = next((text for text in lines[index + 1:index + 4] if text.strip()), "")
        if grammar.FRAME.match(_past_prefix(line, grammar.strip_ansi(after))):
            usual = True  # this one is in the usual order
            continue
        start, frames = index, 0
        while start > 0:
            above = _past_prefix(line, grammar.strip_ansi(lines[start - 1]))
            if grammar.FRAME.match(above):
                frames += 1
            elif above.strip() and not above[:1].isspace() and not grammar.ELISION.match(above.strip()):
                if grammar.split_exception(above.strip(), strict=True) is not None and frames:
                    start -= 1
                break
            start -= 1
        if frames and start < index:
            result[start:index + 1] = lines[start:index + 1][::-1]
            upside_down += 1
    if upside_down and not usual:
        # Every traceback in it upside down: the whole text is newest-first (a log viewer's order),
        # so all of it is read oldest-first. Chained tracebacks then keep their order (the one
        # printed last is the crash, not the first cause) and the start-up milestones come before
        # the crash they date.
        return lines[::-1]
    return result


def _past_prefix(header_line: str, line: str) -> str:
    """`line` after what it shares with the start of its traceback's header line: the prefix a
    logger or a launcher puts on every line (`[ts] ERROR: `, `(WorkerDict pid=9238) `, `[rank3]:`)."""
    shared = 0
    for a, b in zip(header_line, line):
        if a != b:
            break
        shared += 1
    return line[shared:]


def assemble_lines(lines, source: str = "<lines>", batch: int = 4096,
                   keep_cut_orphans: bool = False) -> list[tuple[Crash, ...]]:
    """Offline: every crash group in `lines` (strings, trailing newlines allowed), as the daemon
    would assemble them; `keep_cut_orphans` for a pasted report (`Assembler`)."""
    assembler = Assembler(keep_cut_orphans=keep_cut_orphans)
    buffer: list[str] = []
    number = 1
    for line in lines:
        buffer.append(line.rstrip("\r\n"))
        if len(buffer) >= batch:
            assembler.feed(LogChunk(source, number, tuple(buffer), 0.0))
            number += len(buffer)
            buffer = []
    if buffer:
        assembler.feed(LogChunk(source, number, tuple(buffer), 0.0))
    return assembler.take(0.0, final=True)

