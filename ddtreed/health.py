"""Is the service up? Startup milestones from its log, and HTTP probes under a deadline budget."""

from __future__ import annotations

import time
from typing import Any, Callable

import structlog

from . import httpclient
from .httpclient import count, json_object, number
from .records import HealthResult, LogChunk, Milestone

log = structlog.get_logger(__name__)

# (substring, milestone name, progress text) in startup order. SGLang prints these in every
# version; each rank prints them, so a milestone is reported once per (name, graph kind).
_MARKERS = (
    ("Load weight begin", "weights-loading", "loading weights"),
    ("Load weight end", "weights-loaded", "weights loaded; allocating the KV cache"),
    ("KV Cache is allocated", "kv-cache", "KV cache allocated; building the memory pool"),
    ("Memory pool end", "memory-pool", "memory pool ready; capturing CUDA graphs next"),
    ("Capture cuda graph begin", "graph-capture", "capturing CUDA graphs"),
    ("verify CUDA graph begin", "graph-capture", "capturing CUDA graphs"),
    ("Capture cuda graph end", "graphs-captured", "CUDA graphs captured; warming up"),
    ("verify CUDA graph end", "graphs-captured", "CUDA graphs captured; warming up"),
    ("max_total_num_tokens=", "max-total-tokens", "scheduler up; warming up"),
    ("The server is fired up and ready to roll!", "ready", "ready"),
)
_NEEDLES = ("Load weight", "KV Cache is allocated", "Memory pool end", "CUDA graph",
            "cuda graph", "max_total_num_tokens=", "ready to roll")


class MilestoneTracker:
    """Startup progress of one launch, fed with log chunks; make a new one per start."""

    def __init__(self) -> None:
        self.milestones: list[Milestone] = []
        self._seen: set[tuple[str, str]] = set()
        self._progress = "starting"

    @property
    def ready(self) -> bool:
        return ("ready", "") in self._seen

    def progress_text(self) -> str:
        return self._progress

    def feed(self, chunk: LogChunk) -> list[Milestone]:
        """New milestones in this chunk; most chunks hold none and cost one substring scan."""
        joined = "\n".join(chunk.lines)
        if not any(needle in joined for needle in _NEEDLES):
            return []
        found = []
        for line in chunk.lines:
            milestone = self._match(line, chunk.received_at)
            if milestone is not None:
                found.append(milestone)
        return found

    def _match(self, line: str, at: float) -> Milestone | None:
        for marker, name, progress in _MARKERS:
            if marker not in line:
                continue
            kind = _graph_kind(line) if name.startswith("graph") else ""
            if (name, kind) in self._seen:
                return None
            self._seen.add((name, kind))
            self._progress = f"{progress} ({kind} verify)" if kind in ("target", "draft") and \
                name == "graph-capture" else progress
            milestone = Milestone(name=name, text=_message(line), at=at)
            self.milestones.append(milestone)
            log.info("startup.milestone", milestone=name, kind=kind or None, text=milestone.text)
            return milestone
        return None


def _graph_kind(line: str) -> str:
    for kind in ("target", "draft"):
        if f"Capture {kind} verify" in line:
            return kind
    return "decode"


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
                 interrupted: Callable[[], bool] | None = None):
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
            interrupted: Callable[[], bool] | None = None) -> tuple[int | None, bytes, str]:
    """(HTTP status or None, body, error text): straight to the service, by `deadline` as a whole."""
    answer = httpclient.request(base_url, method, path, payload, deadline, clock, interrupted=interrupted)
    return answer.status, answer.body, answer.error


def _snippet(body: bytes, limit: int = 200) -> str:
    return body[:limit].decode("utf-8", "replace")
