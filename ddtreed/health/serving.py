"""Watching a service that passed verification: health probes, decode lines, hang evidence.

The stage's public API:

- `parse_decode_line(line)` reads SGLang's periodic `Decode batch, …` line (real 0.5.16 format:
  `Decode batch, #running-req: 1, #token: 258, token usage: 0.00, accept len: 4.97, accept rate:
  0.36, cuda graph: True, gen throughput (token/s): 1860.69, #queue-req: 0`; without speculative
  decoding there is no `accept len`/`accept rate`).
- `ServingWatch(settings, prober, clock)`: fed log chunks (`feed`) and ticked (`tick`), it returns
  `ServingEvent`s: `unhealthy` after `failures` consecutive failed health probes (a hung but
  alive server: real 0.5.16 after a killed detokenizer stays up 65 s without answering),
  `eager-fallback` when a service that captured CUDA graphs logs `cuda graph: False` on
  `eager_lines` decode lines in a row (the silent width-mismatch fallback of 0.5.16+), and
  `acceptance-collapse` when the decode lines' accept length stays below a share of the
  baseline for `collapse_lines` lines. `event.crash()` is the Crash the rules diagnose.
  Every decode line of a chunk is read, however many it holds: a backlog's 64 KB chunk (~240
  decode lines) is not sampled down to its newest lines, because a run of five low or eager
  lines in its middle is an event (tests/test_serving_backlog.py; docs/performance.md, session
  11: sampling was measured, and missed the benchmark mix's own collapses). The long lines the
  assembler knows to hold neither a needle nor a decode mark (`scan.CleanLines`) are not read.
- `hang_evidence(pid, …)`: Python stacks of the scheduler processes (py-spy, with fallbacks) and
  GPU state (NVML), captured before a hung service is stopped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import structlog

from ..native import load_fastscan
from ..records import Crash, HealthResult, LogChunk
from .httpclient import MEMBER_DIED

log = structlog.get_logger(__name__)

_DECODE = re.compile(r"Decode batch, (?P<body>.*)")
_FIELD = re.compile(r"(?P<key>#?[a-z][a-z \-]*(?: \(token/s\))?): (?P<value>[^,]+)")
_RANK = re.compile(r"^\[[^\]]*?((?: (?:DP|PP|TP|EP)\d+)+)\]")
# SGLang's decode line as 0.5.16 prints it, with and without speculative decoding, from its body to
# the end of the line (a trailing comma allowed, as older releases and tests/programs/fast_service.py
# end it: no field follows it, so `decode_fields` reads the same two values):
# (accept len or "", cuda graph). It holds one "Decode batch, " and each key
# once, so where a chunk holds as many matches as "Decode batch, "s, each decode line is one match
# and its two values are those `decode_fields` reads (tests/test_serving_feed_fields.py).
_DECODE_MARK = "Decode batch, "
# Its digit runs are possessive (`++`): a digit never follows one where the pattern goes on, so
# giving one back never matches and only costs the backtracking state (~12 % of the findall).
_STRICT_DECODE = re.compile(
    r"Decode batch, #running-req: [0-9]++, #token: [0-9]++, token usage: [0-9]++\.[0-9]++, "
    r"(?:accept len: ([0-9]++\.[0-9]++), accept rate: [0-9]++\.[0-9]++, )?cuda graph: (True|False), "
    r"gen throughput \(token/s\): [0-9]++\.[0-9]++, #queue-req: [0-9]++(?:,[ \t]*)?$", re.MULTILINE)
# The same over a follower's block of bytes (`BlockChunk.block`: no decoding of the chunk), where
# every "Decode batch, " is one match of `_EVERY_DECODE_BYTES`: the strict line's two groups where
# the line is strict, two empty groups where it is not (the strict rest cannot hold another mark).
_EVERY_DECODE_BYTES = re.compile(_STRICT_DECODE.pattern.replace(_DECODE_MARK, _DECODE_MARK + "(?:", 1)
                                 .encode() + b"|)", re.MULTILINE)
_DECODE_MARK_BYTES = _DECODE_MARK.encode()


# `ddtreed._fastscan`: a block's decode lines read in C, exactly as `_EVERY_DECODE_BYTES` reads
# them (tests/test_fastscan.py); None without it or with DDTREED_NO_NATIVE=1 (then `re` reads them).
_NATIVE = load_fastscan()


def decode_reader() -> str:
    """Which code reads a log block's decode lines: "native" (ddtreed._fastscan) or "python" (`re`)."""
    return "native" if _NATIVE is not None else "python"


@dataclass(frozen=True)
class DecodeStats:
    """One `Decode batch` line. Fields SGLang did not print are None."""

    running_req: int | None
    tokens: int | None
    token_usage: float | None
    accept_length: float | None
    accept_rate: float | None
    cuda_graph: bool | None
    gen_throughput: float | None
    queue_req: int | None
    rank: str | None = None  # "TP1", "DP0 TP3"; None on a single GPU


def parse_decode_line(line: str) -> DecodeStats | None:
    """The decode statistics in one log line, or None when it is no decode line."""
    match = _DECODE.search(line)
    if match is None:
        return None
    values: dict[str, str] = {}
    for item in _FIELD.finditer(match.group("body")):
        values[item.group("key").strip()] = item.group("value").strip()
    rank = _RANK.match(line)
    graph = values.get("cuda graph")
    return DecodeStats(
        running_req=_int(values.get("#running-req")), tokens=_int(values.get("#token")),
        token_usage=_float(values.get("token usage")), accept_length=_float(values.get("accept len")),
        accept_rate=_float(values.get("accept rate")),
        cuda_graph=None if graph is None else graph == "True",
        gen_throughput=_float(values.get("gen throughput (token/s)")),
        queue_req=_int(values.get("#queue-req")),
        rank=rank.group(1).strip() if rank else None)


def decode_fields(line: str) -> tuple[float | None, bool | None]:
    """`accept len` and `cuda graph` of a decode line, exactly as `parse_decode_line` reads them
    (a field is `, key: value` up to the next comma), found with two `str.find`s."""
    body = line.find("Decode batch, ")
    if body < 0:
        return None, None
    start = body + len("Decode batch, ")
    accept = _field(line, start, "accept len")
    graph = _field(line, start, "cuda graph")
    return _float(accept), None if graph is None else graph == "True"


def _field(line: str, start: int, key: str) -> str | None:
    """The value of `key` in the decode body from `start`: its last occurrence after ", " (a later
    field wins, as in the full parse's dict), else the first field."""
    at = line.rfind(", " + key + ": ", start)
    if at >= 0:
        at += 2
    elif line.startswith(key + ": ", start):
        at = start
    else:
        return None
    value_at = at + len(key) + 2
    end = line.find(",", value_at)
    value = (line[value_at:] if end < 0 else line[value_at:end]).strip()
    return value or None


_LOW_OF_MAX = 4096  # accept lengths as printed (`4.97`) remembered, per threshold


class _LowOf(dict):
    """An accept length as printed (str or bytes) -> 1 when `float` of it is below `threshold`,
    else 0; computed once per distinct text (SGLang prints two decimals: a few hundred of them)."""

    def __init__(self, threshold: float):
        super().__init__()
        self.threshold = threshold

    def __missing__(self, value: str | bytes) -> int:
        low = self[value] = int(float(value) < self.threshold)
        return low


class _DecodeLines:
    """The text of a chunk's decode line by its ordinal (of `count`, each line one mark), found
    from the chunk's end when asked: the lines wanted are the last few, but for an event. `text`
    is the chunk's text or its bytes (a BlockChunk's block: each line decoded from its own bytes,
    which is that line of the decoded text, ddtreed.logs.follower)."""

    def __init__(self, text: str | bytes, count: int):
        self._text, self._count = text, count
        self._marks: list[int] = []  # where the marks are, from the last one backwards
        self._before = len(text)
        self._bytes = isinstance(text, bytes)

    def text(self, ordinal: int) -> str:
        back = self._count - 1 - ordinal
        data = self._text
        if self._bytes:
            mark, newline = _DECODE_MARK_BYTES, b"\n"
        else:
            mark, newline = _DECODE_MARK, "\n"  # type: ignore[assignment]
        while len(self._marks) <= back:
            self._before = data.rfind(mark, 0, self._before)  # type: ignore[arg-type]
            self._marks.append(self._before)
        at = self._marks[back]
        start, end = data.rfind(newline, 0, at) + 1, data.find(newline, at)  # type: ignore[arg-type]
        line = data[start:] if end < 0 else data[start:end]
        return line.decode("utf-8", "replace") if isinstance(line, bytes) else line


def _findall_outside(pattern: re.Pattern[bytes], data: bytes, spans: Sequence[tuple[int, int]]) -> list:
    """`pattern.findall(data)` where the lines `spans` (ascending (start, end), none holding a
    decode mark) are not read: a match is inside one line, so none is lost."""
    if not spans:
        return pattern.findall(data)
    found: list = []
    pos = 0
    for start, end in spans:
        if pos < start:
            found += pattern.findall(data, pos, start)
        pos = max(pos, end)
    return found + pattern.findall(data, pos)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


# ---- the watch ----------------------------------------------------------------------------------

UNHEALTHY = "unhealthy"
EAGER_FALLBACK = "eager-fallback"
ACCEPTANCE_COLLAPSE = "acceptance-collapse"


@dataclass(frozen=True)
class ServingSettings:
    """How closely a serving service is watched (config: `[probe] serving_*`)."""

    interval_s: float = 10.0  # one health probe this often (0: no serving probes)
    timeout_s: float = 5.0  # per probe; /health_generate of real 0.5.16 answers in ~1 s
    failures: int = 3  # consecutive failed probes make an incident
    eager_lines: int = 5  # consecutive `cuda graph: False` decode lines after a capture
    collapse_lines: int = 5  # consecutive decode lines below collapse_fraction of the baseline
    collapse_fraction: float = 0.5


def settings_from(probe) -> ServingSettings:
    """The watch's settings from the config's [probe] section (`serving_*`, `eager_fallback_lines`)."""
    return ServingSettings(interval_s=probe.serving_interval_s, timeout_s=probe.serving_timeout_s,
                           failures=max(1, probe.serving_failures),
                           eager_lines=max(1, probe.eager_fallback_lines),
                           collapse_fraction=probe.accept_baseline_fraction)


@dataclass(frozen=True)
class ServingEvent:
    kind: str  # UNHEALTHY | EAGER_FALLBACK | ACCEPTANCE_COLLAPSE
    detail: str
    at: float  # time.time() of detection
    evidence: tuple[str, ...] = ()  # probe results or the decode lines themselves
    data: dict[str, Any] = field(default_factory=dict)

    def crash(self) -> Crash:
        """The event as a Crash of kind "serving"; rules/serving.toml diagnoses it."""
        return Crash(kind="serving", exception=None, message=f"serving: {self.kind}: {self.detail}",
                     source="serving-watch", detected_at=self.at, excerpt=self.evidence,
                     context=tuple(f"{key}={value}" for key, value in sorted(self.data.items())))


def still_answering(crash: Crash) -> bool:
    """A crash of a service that still serves requests: a failed output canary, or this watch's
    eager fallback / acceptance collapse (not a hung server: its probes failed)."""
    return crash.kind == "canary" or (crash.kind == "serving" and crash.message.startswith(
        (f"serving: {EAGER_FALLBACK}:", f"serving: {ACCEPTANCE_COLLAPSE}:")))


class ServingWatch:
    """Watches one verified launch; make a new one after every (re)start.

    `captured_graphs`: the startup log showed a CUDA graph captured to its end (the milestone
    tracker's `captured_graphs`), so `cuda graph: False` on decode means a fallback, not a
    configuration without graphs. `baseline`: the learned accept length, if any.
    """

    def __init__(self, settings: ServingSettings, prober, *, captured_graphs: bool,
                 baseline: float | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 on_ok: Callable[[], None] | None = None):
        self.settings, self.prober = settings, prober
        self._on_ok = on_ok  # a passed probe keeps "last healthy" fresh (status board, /metrics)
        self.captured_graphs, self.baseline = captured_graphs, baseline
        self._clock, self._wall = clock, wall
        self._next_probe = clock() + settings.interval_s
        self._failed: list[str] = []
        self._eager: list[str] = []
        self._graph_lines = 0
        self._low: list[str] = []
        self._reported: set[str] = set()
        self._probe: threading.Thread | None = None
        self._result: HealthResult | None = None
        self._last_line: str | None = None
        self.decode_accept: float | None = None  # the latest decode line's accept length
        self._low_of = _LowOf(float("nan"))
        # The assembler's long needle-free lines without a decode mark (`scan.CleanLines`): a
        # block's matches are read around them (`watch_service` shares the service's).
        self.clean_lines: Any = None

    @property
    def last_decode(self) -> DecodeStats | None:
        """Every field of the latest decode line, parsed when asked (the watch itself needs two)."""
        return parse_decode_line(self._last_line) if self._last_line is not None else None

    def feed(self, chunk: LogChunk) -> list[ServingEvent]:
        """The chunk's decode lines, in order, each as `_decode` takes it. When every one of them is
        SGLang's line as printed (`_STRICT_DECODE`), their two fields come from one `findall` over
        the chunk and a run of healthy lines costs no per-line Python (`_feed_fields`); otherwise
        `str.find` finds them and `decode_fields` reads them (`_feed_lines`). Same state, same
        events (tests/test_serving_feed_fields.py)."""
        block = getattr(chunk, "block", None)  # a follower's BlockChunk: read its bytes, undecoded
        if block is not None:
            # not in the long lines the assembler knows
            spans = self.clean_lines.spans(block) if self.clean_lines is not None else ()
            if _NATIVE is not None:  # the same reading in C: (accepts, false lines[, low]), None if not strict
                read = _NATIVE.summary(block, spans, self._low_table()) if self.baseline \
                    else _NATIVE.summary(block, spans)
                if read is None:
                    return self._feed_lines(chunk.text or "\n".join(chunk.lines))
                return self._feed_fields(block, read[0], read[1], read[2] if self.baseline else None) \
                    if read[0] else []
            # one per mark: no count of them first
            fields = _findall_outside(_EVERY_DECODE_BYTES, block, spans)
            if not fields:
                return []
            graphs = [graph for _, graph in fields]  # two comprehensions: ~2/3 of `zip(*fields)`
            if b"" not in graphs:  # every decode line is strict
                return self._feed_fields(block, [accept for accept, _ in fields], graphs.count(b"False"))
            return self._feed_lines(chunk.text or "\n".join(chunk.lines))
        text = chunk.text if chunk.text is not None else "\n".join(chunk.lines)
        count = text.count(_DECODE_MARK)
        if not count:
            return []
        found = _STRICT_DECODE.findall(text)
        if len(found) == count:
            return self._feed_fields(text, [accept for accept, _ in found],
                                     [graph for _, graph in found].count("False"))
        return self._feed_lines(text)

    def _feed_lines(self, text: str) -> list[ServingEvent]:
        """`str.find` over the chunk finds its decode lines; of each only `accept len` and
        `cuda graph` are read (`decode_fields`: what `parse_decode_line` would give for them)."""
        events: list[ServingEvent] = []
        at = text.find(_DECODE_MARK)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            line = text[start:end]
            accept_length, cuda_graph = decode_fields(line)
            events += self._decode(accept_length, cuda_graph, line)
            at = text.find(_DECODE_MARK, end)
        return events

    def _low_table(self) -> _LowOf:
        """The accept lengths as printed -> 1 where low, for the current baseline's threshold."""
        threshold = self.baseline * self.settings.collapse_fraction if self.baseline else float("nan")
        if self._low_of.threshold != threshold:
            self._low_of = _LowOf(threshold)
        elif len(self._low_of) > _LOW_OF_MAX:
            self._low_of.clear()
        return self._low_of

    def _feed_fields(self, text: str | bytes, accepts: Sequence[str | bytes],
                     false_lines: int, low: bytes | None = None) -> list[ServingEvent]:
        """`accepts`: accept len (or empty) of each decode line of `text` (or bytes), in order,
        every one of them a `_STRICT_DECODE` line; `false_lines` of them print `cuda graph: False`,
        the others `True`. Does what `_decode` on each line in turn does.

        A line's effects: `cuda graph: True` counts and ends the run of eager lines; `False`, after
        a capture, extends it (the per-line path then, where an eager fallback is under way); an
        accept length ends the run of low ones or, below the collapse threshold, extends it. So a
        chunk's outcome is the run lengths at its end, and an event where a run first reaches its
        length: both found in the bytes of the lines' flags, without a loop over the lines."""
        if (self.captured_graphs and false_lines) or self.settings.collapse_lines < 1:
            return self._feed_lines(text if isinstance(text, str) else text.decode("utf-8", "replace"))
        lines = _DecodeLines(text, len(accepts))
        events: list[ServingEvent] = []
        true_lines = len(accepts) - false_lines
        self._graph_lines += true_lines
        if true_lines:
            self._eager.clear()
        self._last_line = lines.text(len(accepts) - 1)
        ordinals: Sequence[int] = range(len(accepts))
        values = accepts  # the accept lengths as printed
        if not all(accepts):  # some lines without an accept length: those have no effect on it
            ordinals = [index for index, value in enumerate(accepts) if value]
            values = [accepts[index] for index in ordinals]
        if not values:
            return events
        self.decode_accept = float(values[-1])
        if not self.baseline:
            return events
        if low is None:  # 1 where the line's accept length is low (given: ddtreed._fastscan's, the same)
            low = bytes(map(self._low_table().__getitem__, values))
        wanted = self.settings.collapse_lines
        carried = len(self._low)
        if ACCEPTANCE_COLLAPSE not in self._reported:
            at = (b"\x01" * carried + low).find(b"\x01" * wanted)
            if at >= 0:  # the run reaches `wanted` lines at the line `last` of this chunk
                last = at + wanted - 1 - carried  # >= 0: the carried run is shorter than `wanted`
                run = self._low[at:] + [lines.text(ordinals[index])
                                        for index in range(max(0, at - carried), last + 1)]
                self._reported.add(ACCEPTANCE_COLLAPSE)
                events.append(self._collapse(float(values[last]), run))
        cleared = low.rfind(b"\x00")
        if cleared >= 0:
            self._low.clear()
        tail = range(max(cleared + 1, len(values) - wanted), len(values))
        self._low += [lines.text(ordinals[index]) for index in tail]
        del self._low[:-wanted]
        return events

    def _decode(self, accept_length: float | None, cuda_graph: bool | None, line: str) -> list[ServingEvent]:
        self._last_line = line
        events = []
        if accept_length is not None:
            self.decode_accept = accept_length
        if cuda_graph is True:
            self._graph_lines += 1
            self._eager.clear()
        elif cuda_graph is False and self.captured_graphs:
            self._eager.append(line)
            del self._eager[:-self.settings.eager_lines]  # the evidence: the last ones of the run
            if len(self._eager) >= self.settings.eager_lines and EAGER_FALLBACK not in self._reported:
                self._reported.add(EAGER_FALLBACK)
                events.append(ServingEvent(
                    EAGER_FALLBACK, f"decode ran without its CUDA graph on {len(self._eager)} decode "
                    "lines in a row (cuda graph: False) although graphs were captured at startup",
                    self._wall(), tuple(self._eager[-self.settings.eager_lines:]),
                    {"eager_lines": len(self._eager), "graph_lines_before": self._graph_lines}))
        if self.baseline and accept_length is not None:
            if accept_length < self.baseline * self.settings.collapse_fraction:
                self._low.append(line)
                del self._low[:-self.settings.collapse_lines]  # the evidence: the last ones of the run
                if len(self._low) >= self.settings.collapse_lines and \
                        ACCEPTANCE_COLLAPSE not in self._reported:
                    self._reported.add(ACCEPTANCE_COLLAPSE)
                    events.append(self._collapse(accept_length, self._low))
            else:
                self._low.clear()
        return events

    def _collapse(self, accept_length: float, run: list[str]) -> ServingEvent:
        """The event when `run` (the decode lines below the threshold, `collapse_lines` of them)
        first reaches its length; `accept_length` is its last line's."""
        return ServingEvent(
            ACCEPTANCE_COLLAPSE, f"decode accept length {accept_length:.2f} below "
            f"{self.settings.collapse_fraction:.0%} of the baseline {self.baseline:.2f} on "
            f"{len(run)} decode lines in a row", self._wall(), tuple(run[-self.settings.collapse_lines:]),
            {"accept_length": accept_length, "baseline": self.baseline})

    def tick(self) -> list[ServingEvent]:
        """Start a health probe when one is due, take the answer of one that finished; an event
        once `failures` failed in a row. The probe runs in a thread: a request to a hung server
        must not stop the loop from reading the log (real H200: a killed scheduler's line waited
        5 s behind a blocked probe)."""
        settings = self.settings
        if settings.interval_s <= 0:
            return []
        probe = self._probe
        if probe is None:
            if self._clock() >= self._next_probe:
                self._start_probe()
            return []
        if probe.is_alive():
            return []
        self._probe = None
        self._next_probe = self._clock() + settings.interval_s
        result = self._result
        if result is None or result.ok:
            self._failed.clear()
            if result is not None and self._on_ok is not None:
                self._on_ok()  # on the loop thread: the status board and /metrics see it now
            return []
        self._failed.append(f"{result.detail} after {result.elapsed_s:.1f}s")
        log.warning("serving.probe_failed", detail=result.detail, consecutive=len(self._failed),
                    threshold=settings.failures)
        if len(self._failed) < settings.failures or UNHEALTHY in self._reported:
            return []
        self._reported.add(UNHEALTHY)
        return [ServingEvent(UNHEALTHY, f"{len(self._failed)} health probes failed in a row while "
                             f"serving (every {settings.interval_s:g}s, {settings.timeout_s:g}s each)",
                             self._wall(), tuple(self._failed), {"failures": len(self._failed)})]

    def _start_probe(self) -> None:
        self._result = None
        deadline = self._clock() + self.settings.timeout_s

        def probe() -> None:
            try:
                result = self.prober.health(deadline)
                # A probe cut by a lost member (ServiceRun.death) says nothing of the service's
                # health: a launcher may reap and replace helpers by design, and a real death
                # shows as crash text or an exit, which the loop reads. As verification does,
                # the probe is sent again under the same deadline (each loss cuts one probe).
                while f"interrupted: {MEMBER_DIED}" in result.detail and self._clock() < deadline:
                    log.info("serving.probe_sent_again", detail=result.detail,
                             hint="a member left the session without a crash line: the same probe, the same deadline")
                    result = self.prober.health(deadline)
                self._result = result
            except Exception as error:  # noqa: BLE001 - a probe's failure is a failed probe
                self._result = HealthResult(ok=False, stage="health", detail=f"probe error: {error}")

        self._probe = threading.Thread(target=probe, name="ddtreed-serving-probe", daemon=True)
        self._probe.start()

    @property
    def probe_in_flight(self) -> bool:
        return self._probe is not None and self._probe.is_alive()

    def close(self) -> None:
        """Wait briefly for a probe in flight (its deadline bounds it)."""
        if self._probe is not None:
            self._probe.join(self.settings.timeout_s + 1)


# ---- hang evidence ------------------------------------------------------------------------------

def watch_service(service: Any, probe: Any, prober: Any, *, baseline: float | None, clock: Any,
                  on_ok: Callable[[], None]) -> ServingWatch:
    """The serving watch of one verified launch, attached to its ServiceRun (which feeds it chunks)."""
    watch = ServingWatch(settings_from(probe), prober, captured_graphs=service.milestones.captured_graphs,
                         baseline=baseline, clock=clock.monotonic, wall=clock.time, on_ok=on_ok)
    watch.clean_lines = getattr(getattr(service, "assembler", None), "clean_lines", None)
    service.serving, service.serving_events = watch, []
    return watch


def serving_crash(service: Any, watch: ServingWatch, local: bool) -> Crash | None:
    """The first event the log chunks or the probes raised since the last turn, as an incident's
    crash (hung, eager fallback, collapse), with its evidence; None while the service serves."""
    events, service.serving_events = service.serving_events + watch.tick(), []
    return incident_crash(events[0], service.pid, local) if events else None


def periodic_check(periodic: Any, prober: Callable[[], Any], context: Any, on_result: Callable[[Any], None],
                   on_ok: Callable[[], None]) -> Crash | None:
    """The periodic output canary when due: a failure (silent corruption, collapse) is an incident's
    crash; a pass keeps "last healthy" fresh like a passed probe."""
    result = periodic.run_if_due(prober(), context) if periodic is not None and periodic.due() else None
    if result is None:
        return None
    on_result(result)
    if result.category is not None:
        from .canary import canary_crash  # the canary package only once one has run

        return canary_crash(result)
    if result.passed:
        on_ok()
    return None


def incident_crash(event: ServingEvent, pid: int | None, local: bool) -> Crash:
    """The event as a crash; a hung service's stacks and GPU state are captured first (on this machine)."""
    crash = event.crash()
    log.error("serving.incident", kind=event.kind, detail=event.detail)
    if event.kind == UNHEALTHY and pid is not None and local:
        found = hang_evidence(pid)
        crash = replace(crash, context=crash.context + (EVIDENCE_PREFIX + json.dumps(found, default=str)[:60000],))
    return crash


SCHEDULER_TITLES = ("sglang::scheduler", "sglang::detokenizer", "sglang::data_parallel_controller")


def service_processes(pid: int) -> list[dict[str, Any]]:
    """The service's main process and its descendants: pid, name, status, GPU-relevant facts."""
    import psutil

    try:
        main = psutil.Process(pid)
        procs = [main, *main.children(recursive=True)]
    except psutil.Error:
        return []
    rows = []
    for proc in procs:
        try:
            rows.append({"pid": proc.pid, "name": proc.name(), "cmdline": " ".join(proc.cmdline())[:200],
                         "status": proc.status(), "wchan": _read(f"/proc/{proc.pid}/wchan")})
        except psutil.Error:
            continue
    return rows


def python_stacks(pid: int, *, timeout_s: float = 20.0,
                  run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> dict[str, Any]:
    """Stacks of the scheduler processes under `pid`: py-spy dump, then `--native`, then the
    launcher itself; what each attempt said is kept, so a failure is evidence too."""
    procs = service_processes(pid)
    # a process name (comm) is cut at 15 characters: `sglang::schedul`
    targets = [row["pid"] for row in procs if row["name"].startswith(tuple(t[:15] for t in SCHEDULER_TITLES))
               or row["cmdline"].startswith(SCHEDULER_TITLES)]
    py_spy = shutil.which("py-spy")
    attempts: list[dict[str, Any]] = []
    stacks: dict[str, str] = {}
    if py_spy is None:
        attempts.append({"tool": "py-spy", "error": "py-spy not on PATH"})
    else:
        deadline = time.monotonic() + timeout_s
        for target in targets:
            _dump(py_spy, target, deadline, run, attempts, stacks)
        if not stacks:  # the launcher is a Python process too: its stack names where it waits
            _dump(py_spy, pid, deadline, run, attempts, stacks)
    return {"processes": procs, "schedulers": targets, "stacks": stacks, "attempts": attempts}


def _dump(py_spy: str, target: int, deadline: float, run, attempts: list, stacks: dict) -> None:
    for extra in ((), ("--native",), ("--nonblocking",)):
        left = deadline - time.monotonic()
        if left <= 1:
            return
        argv = [py_spy, "dump", "--pid", str(target), *extra]
        try:
            done = run(argv, capture_output=True, text=True, timeout=min(left, 10.0))
            ok, out, err = done.returncode == 0, done.stdout, done.stderr
        except (OSError, subprocess.TimeoutExpired) as error:
            ok, out, err = False, "", f"{type(error).__name__}: {error}"
        attempts.append({"pid": target, "argv": " ".join(argv[1:]), "ok": ok,
                         "error": "" if ok else (err or out).strip()[-300:]})
        if ok and out.strip():
            stacks[str(target)] = out[-8000:]
            return


def faulthandler_dump(pids: list[int]) -> list[int]:
    """SIGABRT the given processes: with PYTHONFAULTHANDLER=1 in their environment (the
    Supervisor sets it) Python writes every thread's stack to the service log before dying.
    Only for a hung service that is about to be stopped anyway. Returns the pids signalled."""
    signalled = []
    for target in pids:
        try:
            os.kill(target, signal.SIGABRT)
            signalled.append(target)
        except OSError:
            continue
    return signalled


def gpu_state() -> list[dict[str, Any]]:
    """Per GPU: memory used/total and the processes holding it (NVML); [] without NVML."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    rows = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            holders = []
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(proc, "usedGpuMemory", None)
                holders.append({"pid": proc.pid, "used_mib": None if used is None else used // 2**20,
                                "name": _read(f"/proc/{proc.pid}/comm")})
            try:
                util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            except pynvml.NVMLError:
                util = None
            rows.append({"index": index, "used_mib": memory.used // 2**20,
                         "total_mib": memory.total // 2**20, "utilization_pct": util,
                         "processes": holders})
    except pynvml.NVMLError as error:
        rows.append({"error": str(error)})
    finally:
        pynvml.nvmlShutdown()
    return rows


def hang_evidence(pid: int, *, timeout_s: float = 20.0) -> dict[str, Any]:
    """Everything worth keeping about a hung service, captured before it is stopped."""
    started = time.monotonic()
    evidence = python_stacks(pid, timeout_s=timeout_s)
    evidence["gpu"] = gpu_state()
    if not evidence["stacks"] and evidence["schedulers"]:
        evidence["faulthandler_signalled"] = faulthandler_dump(evidence["schedulers"])
    evidence["elapsed_s"] = round(time.monotonic() - started, 3)
    log.info("serving.hang_evidence", stacks=len(evidence["stacks"]),
             schedulers=evidence["schedulers"], attempts=len(evidence["attempts"]),
             elapsed_s=evidence["elapsed_s"])
    return evidence


def port_owner_in_tree(pid: int, port: int) -> bool | None:
    """Does a process of this service tree listen on `port`? None when that cannot be known
    (no permission to read sockets). A ready line or a 200 from a port another process holds
    is not this launch's readiness (real 0.5.16 prints `ready` after failing to bind)."""
    import psutil

    try:
        main = psutil.Process(pid)
        tree = {main.pid, *(child.pid for child in main.children(recursive=True))}
    except psutil.Error:
        return False
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError):
        return None
    return any(conn.pid in tree and conn.status == psutil.CONN_LISTEN and conn.laddr
               and conn.laddr.port == port for conn in connections)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


# ---- one crash is one crash ---------------------------------------------------------------------

_ECHO_MARKERS = ("SIGQUIT received", "Received sigquit from a child process")


def is_echo(crash: Crash) -> bool:
    """SGLang's launcher answering a child's death (`SIGQUIT received… It usually means one child
    failed.`): a consequence of the failure already reported, not a second death."""
    return crash.kind in ("child-death", "killed") and crash.exception is None and \
        any(marker in crash.message for marker in _ECHO_MARKERS)


def without_echoes(crashes: tuple[Crash, ...], already: tuple[Crash, ...] = ()) -> tuple[Crash, ...]:
    """`crashes` minus SGLang's SIGQUIT echoes, when a real failure is among them or `already`
    known for this incident. An echo alone stays (it is then the only evidence of a failure)."""
    real = [crash for crash in (*already, *crashes) if not is_echo(crash)]
    if not real:
        return crashes
    return tuple(crash for crash in crashes if not is_echo(crash))


EVIDENCE_PREFIX = "hang evidence: "


def evidence_of(crash: Crash) -> tuple[str, dict[str, Any]] | None:
    """(one-line summary, evidence) of a crash the watch captured hang evidence for, else None."""
    import json

    for line in crash.context:
        if line.startswith(EVIDENCE_PREFIX):
            try:
                evidence = json.loads(line[len(EVIDENCE_PREFIX):])
            except ValueError:
                evidence = {"raw": line[len(EVIDENCE_PREFIX):][:4000]}
            stacks = evidence.get("stacks") or {}
            gpus = evidence.get("gpu") or []
            held = sum(p.get("used_mib") or 0 for g in gpus for p in g.get("processes", []))
            tried = len(evidence.get("attempts") or [])
            summary = (f"stacks of {len(stacks)} of {len(evidence.get('schedulers') or [])} scheduler "
                       f"process(es) ({tried} py-spy attempt(s)"
                       + (", faulthandler dump requested" if evidence.get("faulthandler_signalled") else "")
                       + f"); GPU: {held} MiB held by the service's processes" if gpus else
                       f"stacks of {len(stacks)} process(es) ({tried} py-spy attempt(s)); no NVML")
            return summary, evidence
    return None
