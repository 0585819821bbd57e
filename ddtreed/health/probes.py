"""Is the service up? Startup milestones from its log, and HTTP probes under a deadline budget."""

from __future__ import annotations

import re
import time
from typing import Any, Callable

import structlog

from . import httpclient
from .httpclient import count, json_object, number
from ..records import HealthResult, LogChunk, Milestone

log = structlog.get_logger(__name__)

# (substring, milestone name, progress text) in startup order. SGLang prints these in every
# version; each rank prints them, so a milestone is reported once per (name, graph kind).
# Graph capture lines: 0.5.16 `Capture target prefill|decode|verify CUDA graph begin. …` (and
# `Capture draft … CUDA graph …`), older releases `Capture cuda graph begin. …`.
_MARKERS = (
    ("Load weight begin", "weights-loading", "loading weights"),
    ("Load weight end", "weights-loaded", "weights loaded; allocating the KV cache"),
    ("KV Cache is allocated", "kv-cache", "KV cache allocated; building the memory pool"),
    ("Memory pool end", "memory-pool", "memory pool ready; capturing CUDA graphs or warming up"),
    ("max_total_num_tokens=", "max-total-tokens", "scheduler up; warming up"),
    ("The server is fired up and ready to roll!", "ready", "ready"),
)
_CAPTURE = re.compile(r"Capture (?:(?P<role>target|draft) )?(?:(?P<phase>\w+) )?cuda graph "
                      r"(?P<edge>begin|end)\b", re.IGNORECASE)
_WIDTH = re.compile(r"num_tokens_per_(?:req|bs)=(\d+)")
# uvicorn could not bind: SGLang goes on and its warm-up request reaches whatever holds the port,
# so the `ready` line that follows is not this process' readiness (real 0.5.16, portinuse.log).
_BIND_FAILED = re.compile(r"\[Errno (?:98|13)\] error while attempting to bind on address")
_NEEDLES = ("Load weight", "KV Cache is allocated", "Memory pool end", "CUDA graph",
            "cuda graph", "max_total_num_tokens=", "ready to roll", "error while attempting to bind")
# The lines `_match` can act on: each holds one of these (`_CAPTURE` ignores case). A chunk's other
# lines are never looked at (a startup of NCCL and tqdm chatter, a decode line now and then).
_LINE_NEEDLES = re.compile(r"(?i:cuda graph)|Load weight|KV Cache is allocated|Memory pool end|"
                           r"max_total_num_tokens=|ready to roll|error while attempting to bind")


class MilestoneTracker:
    """Startup progress of one launch, fed with log chunks; make a new one per start.

    `ready` is only ever this process' own readiness: after a bind failure (`[Errno 98] error
    while attempting to bind on address …`) the later ready line is ignored and `bind_error`
    holds the message instead.
    """

    def __init__(self) -> None:
        self.milestones: list[Milestone] = []
        self._seen: set[tuple[str, str]] = set()
        self._progress = "starting"
        self.bind_error: str | None = None
        self.false_ready: str | None = None  # the ready line printed after a bind failure
        self.captured: list[str] = []  # graph kinds captured to the end, e.g. "target verify"
        self.widths: dict[str, int] = {}  # graph kind -> num_tokens_per_req from its begin line

    @property
    def ready(self) -> bool:
        return ("ready", "") in self._seen

    @property
    def captured_graphs(self) -> bool:
        """A CUDA graph was captured to its end: decode should then say `cuda graph: True`."""
        return bool(self.captured)

    def progress_text(self) -> str:
        return self._progress

    def feed(self, chunk: LogChunk) -> list[Milestone]:
        """New milestones in this chunk; most chunks hold none and cost one substring scan. Once the
        service is ready there are none to find: every decode line holds the `cuda graph` needle,
        and matching them line by line was ~60 % of the pump's time while serving
        (benchmarks/pipeline_throughput.py). The serving watch reads decode lines itself."""
        if self.ready:
            return []
        joined = chunk.text if chunk.text is not None else "\n".join(chunk.lines)
        if not any(needle in joined for needle in _NEEDLES):
            return []
        found = []
        hit = _LINE_NEEDLES.search(joined)
        while hit is not None:  # each line holding a needle, in order, once
            start = joined.rfind("\n", 0, hit.start()) + 1
            end = joined.find("\n", hit.end())
            end = len(joined) if end < 0 else end
            milestone = self._match(joined[start:end], chunk.received_at)
            if milestone is not None:
                found.append(milestone)
            hit = _LINE_NEEDLES.search(joined, end + 1)
        return found

    def _match(self, line: str, at: float) -> Milestone | None:
        if _BIND_FAILED.search(line):
            if self.bind_error is None:
                self.bind_error = _message(line)
                self._progress = "HTTP server failed to bind its port: " + self.bind_error
                log.error("startup.bind_failed", text=self.bind_error,
                          hint="another process holds the port; a later ready line is not ours")
            return None
        capture = _CAPTURE.search(line)
        if capture is not None:
            return self._capture(capture, line, at)
        for marker, name, progress in _MARKERS:
            if marker not in line:
                continue
            if name == "ready" and self.bind_error is not None:
                if self.false_ready is None:
                    self.false_ready = _message(line)
                    log.error("startup.false_ready", text=self.false_ready, bind_error=self.bind_error,
                              hint="the warm-up request reached another server on this port")
                return None
            return self._record(name, "", progress, line, at)
        return None

    def _capture(self, capture: re.Match, line: str, at: float) -> Milestone | None:
        kind = _graph_kind(capture)
        if capture.group("edge").lower() == "begin":
            width = _WIDTH.search(line)
            if width is not None:
                self.widths.setdefault(kind, int(width.group(1)))
            return self._record("graph-capture", kind, f"capturing CUDA graphs ({kind})", line, at)
        if kind not in self.captured:
            self.captured.append(kind)
        return self._record("graphs-captured", kind, f"CUDA graphs captured ({kind}); warming up",
                            line, at)

    def _record(self, name: str, kind: str, progress: str, line: str, at: float) -> Milestone | None:
        if (name, kind) in self._seen:
            return None
        self._seen.add((name, kind))
        self._progress = progress
        milestone = Milestone(name=name, text=_message(line), at=at)
        self.milestones.append(milestone)
        log.info("startup.milestone", milestone=name, kind=kind or None, text=milestone.text)
        return milestone


def _graph_kind(capture: re.Match) -> str:
    """"target verify", "target prefill", "draft verify", …; the old single line is "decode"."""
    role, phase = capture.group("role"), capture.group("phase")
    if role is None and phase is None:
        return "decode"
    return " ".join(part for part in (role or "target", phase or "decode"))


def _message(line: str) -> str:
    """The text after SGLang's `[date time TPn] ` prefix."""
    if line.startswith("[") and "] " in line:
        return line.split("] ", 1)[1]
    return line


class Prober:
    """HTTP probes of one service. A `deadline` is an absolute time on `clock`: a shared budget.

    Every request goes straight to the service (proxy variables are ignored), under the whole
    deadline, with the answer capped; `interrupted()` (e.g. "a stop was requested") ends a probe
    within a fraction of a second. Malformed answers are failed probes, never exceptions.
    """

    def __init__(self, base_url: str, clock: Callable[[], float] = time.monotonic,
                 interrupted: httpclient.Interrupted | None = None):
        self.base_url = base_url.rstrip("/")
        self._clock = clock
        self.interrupted = interrupted

    def deadline_in(self, seconds: float) -> float:
        return self._clock() + seconds

    def health(self, deadline: float) -> HealthResult:
        """GET /health_generate (a real 1-token generation), else /health on servers without it."""
        started = self._clock()
        status, body, error = self._request("GET", "/health_generate", None, deadline)
        path = "/health_generate"
        if status == 404:
            path = "/health"
            status, _body, error = self._request("GET", path, None, deadline)
        ok = status == 200
        detail = f"{path}: HTTP {status}" if status is not None else f"{path}: {error}"
        return HealthResult(ok=ok, stage="health", detail=detail, elapsed_s=self._clock() - started)

    def generate(self, prompt: str, max_new_tokens: int, deadline: float) -> HealthResult:
        """POST /generate greedily; ok when tokens came back. Reads the acceptance length."""
        started = self._clock()
        payload = {"text": prompt,
                   "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
        status, body, error = self._request("POST", "/generate", payload, deadline)
        elapsed = self._clock() - started
        if status != 200:
            detail = f"/generate: HTTP {status}: {_snippet(body)}" if status else f"/generate: {error}"
            return HealthResult(ok=False, stage="generate", detail=detail, elapsed_s=elapsed)
        answer, why = json_object(body)
        meta = (answer.get("meta_info") or {}) if answer is not None else None
        if answer is not None and not isinstance(meta, dict):
            answer, why = None, f"meta_info is {type(meta).__name__}, not an object"
        if answer is None:
            return HealthResult(ok=False, stage="generate", elapsed_s=elapsed,
                                detail=f"/generate: {why}: {_snippet(body, 120)}")
        text = answer.get("text") if isinstance(answer.get("text"), str) else None
        tokens = count(meta.get("completion_tokens"))
        accept = number(meta.get("spec_accept_length"))
        ok = text is not None and tokens is not None and tokens > 0
        detail = f"/generate: {tokens} tokens" + (f", accept length {accept:.2f}" if accept is not None else "")
        return HealthResult(ok=ok, stage="generate", detail=detail if ok else
                            f"/generate: no output tokens in {_snippet(body)}",
                            accept_length=accept, output_text=text, completion_tokens=tokens,
                            elapsed_s=elapsed)

    def server_info(self, deadline: float) -> dict[str, Any] | None:
        """GET /server_info (older servers: /get_server_info); None when neither answers."""
        for path in ("/server_info", "/get_server_info"):
            status, body, error = self._request("GET", path, None, deadline)
            if status == 200:
                info, why = json_object(body)
                if info is None:
                    log.warning("probe.bad_server_info", path=path, problem=why, body=_snippet(body))
                return info
            if status != 404:
                log.debug("probe.server_info_failed", path=path, status=status, error=error)
                return None
        return None

    def _request(self, method: str, path: str, payload: Any,
                 deadline: float) -> tuple[int | None, bytes, str]:
        return request(self.base_url, method, path, payload, deadline, self._clock,
                       interrupted=self.interrupted)


def request(base_url: str, method: str, path: str, payload: Any, deadline: float,
            clock: Callable[[], float] = time.monotonic,
            interrupted: httpclient.Interrupted | None = None) -> tuple[int | None, bytes, str]:
    """(HTTP status or None, body, error text): straight to the service, by `deadline` as a whole."""
    answer = httpclient.request(base_url, method, path, payload, deadline, clock, interrupted=interrupted)
    return answer.status, answer.body, answer.error


def _snippet(body: bytes, limit: int = 200) -> str:
    return body[:limit].decode("utf-8", "replace")
