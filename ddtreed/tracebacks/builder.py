"""One crash being assembled line by line (bounded), and its conversion to a `Crash`."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..records import Crash, Frame
from . import grammar, native_lines

MAX_FRAMES = 64  # per segment; the innermost (last) frames are kept
MAX_MESSAGE_LINES = 40
MAX_EXCERPT = 80
MAX_SEGMENTS = 8  # chained exceptions kept (the last ones)

# Builder states, in the order a traceback moves through them.
HEADER = "header"  # `Traceback (most recent call last):` seen, no frame yet
FRAMES = "frames"
MESSAGE = "message"  # exception line seen; continuation lines belong to its message
AFTER = "after"  # message closed by a blank or prefixed line; a chain marker may still follow
CHAIN = "chain"  # chain marker seen; the next traceback continues this crash
PYSPY = "pyspy"  # a watchdog timeout collecting the py-spy dump that follows it


@dataclass
class Segment:
    frames: deque = field(default_factory=lambda: deque(maxlen=MAX_FRAMES))
    exception: str | None = None
    message: list[str] = field(default_factory=list)


@dataclass
class Builder:
    """A traceback (or watchdog timeout) in progress, from one rank of one source."""

    kind: str
    source: str
    rank: str | None
    prefix: str | None
    first_line: int
    last_activity: float
    state: str = HEADER
    orphan: bool = False  # started by a frame line without a header (the header was lost)
    segments: list[Segment] = field(default_factory=lambda: [Segment()])
    excerpt: list[str] = field(default_factory=list)
    last_line: int = 0
    context: tuple[str, ...] = ()
    lines: int = 0
    after_frame: bool = False  # the previous line was a frame: the next may be its source line
    last_source: str = ""  # the source line under the innermost frame (`raise ValueError(…`)
    bare: bool = False  # an exception line with no traceback: only NPU lines continue its message
    after_cann: bool = False  # a CANN line was taken: the indented lines of its TraceBack follow

    def touch(self, number: int, text: str, now: float) -> None:
        self.last_line, self.last_activity = number, now
        self.lines += 1
        if len(self.excerpt) < MAX_EXCERPT:
            self.excerpt.append(text)

    def add_frame(self, match, pyspy: bool = False) -> None:
        function = match.group("function") or "<unknown>"
        self.segments[-1].frames.append(Frame(file=match.group("file"), line=int(match.group("line")),
                                              function=function.strip()))
        self.last_source = ""
        if not pyspy:
            self.state = FRAMES

    def set_exception(self, exception: str | None, message: str) -> None:
        segment = self.segments[-1]
        segment.exception, segment.message = exception, [message]
        self.state = MESSAGE

    def continues_bare(self, stripped: str, indented: bool) -> bool:
        if native_lines.cann_continuation(stripped, self.after_cann, indented):
            self.after_cann = True
            return True
        return False

    def add_message_line(self, text: str) -> None:
        if len(self.segments[-1].message) < MAX_MESSAGE_LINES:
            self.segments[-1].message.append(text)

    def chain(self) -> None:
        self.segments.append(Segment())
        del self.segments[:-MAX_SEGMENTS]
        self.state = CHAIN

    @property
    def frame_count(self) -> int:
        return sum(len(segment.frames) for segment in self.segments)

    @property
    def complete(self) -> bool:
        return self.kind != "traceback" or self.segments[-1].exception is not None

    def to_crash(self, detected_at: float) -> Crash:
        *earlier, last = self.segments
        if last.exception is None and not last.message and earlier:
            *earlier, last = earlier  # a chain marker with nothing after it
        chained = tuple(_segment_crash(s, self) for s in earlier)
        exception = last.exception
        message = "\n".join(last.message) if last.message else _incomplete(self)
        if exception is None and not last.message and self.kind == "traceback":
            # Cut off (a paste, a truncated log) after the innermost frame: its `raise X(…)` or
            # `assert …` line still names the exception.
            raised = grammar.RAISE.match(self.last_source)
            if raised:
                exception = raised.group("type") or "AssertionError"
                message = (raised.group("message") or "").strip() or message
        wrapper, inner_exception, inner_message = grammar.split_wrapper(message.split("\n", 1)[0])
        if wrapper and inner_exception is None and chained and inner_message:
            # `Capture cuda graph failed: <msg>` raised while handling the real error: name its type.
            if chained[-1].message.split("\n", 1)[0].strip() == inner_message.strip():
                inner_exception = chained[-1].exception
        return Crash(
            kind=self.kind, exception=exception, message=message, frames=tuple(last.frames),
            rank=self.rank, prefix=self.prefix, wrapper=wrapper, inner_exception=inner_exception,
            inner_message=inner_message, chained=chained, source=self.source,
            first_line=self.first_line, last_line=self.last_line or self.first_line,
            detected_at=detected_at, excerpt=tuple(self.excerpt), context=self.context,
        )


def _segment_crash(segment: Segment, builder: Builder) -> Crash:
    return Crash(kind="traceback", exception=segment.exception, message="\n".join(segment.message),
                 frames=tuple(segment.frames), rank=builder.rank, source=builder.source)


def _incomplete(builder: Builder) -> str:
    if builder.kind == "traceback":
        return "traceback cut off before its exception line"
    return ""
