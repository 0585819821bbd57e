"""The canary's HTTP calls: a greedy /generate that keeps the token ids, and the service's load.

Both go straight to the service through `health.request` (no proxy, one deadline, capped body).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from ..probes import request
from ..httpclient import Interrupted, count, json_object, number

# Prometheus gauges SGLang exports with --enable-metrics; their sum is the service's load.
_LOAD_GAUGES = re.compile(r"^sglang:num_(?:running|queue)_reqs(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$",
                          re.MULTILINE)


@dataclass(frozen=True)
class Generation:
    """One greedy /generate answer, or why there is none (`error`)."""

    text: str | None = None
    ids: list[int] = field(default_factory=list)  # `output_ids`, when the service returns them
    accept_length: float | None = None  # meta_info.spec_accept_length
    completion_tokens: int | None = None
    elapsed_s: float = 0.0
    error: str | None = None


def generate(base_url: str, prompt: str, max_new_tokens: int, deadline: float,
             interrupted: Interrupted | None = None,
             cache_namespace: str | None = None) -> Generation:
    """POST /generate with temperature 0 and a fixed token count; `deadline` is time.monotonic().

    `interrupted()` true (a stop was requested) or a reason (the service died) ends the request
    within a fraction of a second; its error then says why.
    `cache_namespace` is sent as SGLang's `extra_key`: the radix (prefix) cache keeps each
    namespace apart, so the request shares no cached prefix with any other (a cold prefill, as
    when its golden was recorded) and leaves none for serving traffic. Servers without the field
    ignore it.
    """
    started = time.monotonic()
    # min=max pins the length: a canary compares a fixed number of tokens, never an early stop.
    payload: dict = {"text": prompt, "sampling_params": {
        "max_new_tokens": max_new_tokens, "min_new_tokens": max_new_tokens, "temperature": 0}}
    if cache_namespace:
        payload["extra_key"] = cache_namespace
    status, body, error = request(base_url, "POST", "/generate", payload, deadline,
                                  interrupted=interrupted)
    elapsed = time.monotonic() - started
    if status != 200:
        why = f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}" if status else error
        return Generation(elapsed_s=elapsed, error=f"/generate: {why}")
    answer, why = json_object(body)
    meta = (answer.get("meta_info") or {}) if answer is not None else None
    if answer is not None and not isinstance(meta, dict):
        answer, why = None, f"meta_info is {type(meta).__name__}, not an object"
    if answer is None:
        return Generation(elapsed_s=elapsed, error=f"/generate: {why}")
    ids = answer.get("output_ids")
    text = answer.get("text")
    return Generation(
        text=text if isinstance(text, str) else None,
        ids=list(ids) if isinstance(ids, list) and all(count(i) is not None for i in ids) else [],
        accept_length=number(meta.get("spec_accept_length")),
        completion_tokens=count(meta.get("completion_tokens")), elapsed_s=elapsed)


def service_load(base_url: str, deadline: float, interrupted: Interrupted | None = None) -> int | None:
    """Running plus queued requests from /metrics; None when the service does not export them."""
    status, body, _ = request(base_url, "GET", "/metrics", None, deadline, interrupted=interrupted)
    if status != 200:
        return None
    values = _LOAD_GAUGES.findall(body.decode("utf-8", "replace"))
    if not values:
        return None
    try:
        return int(sum(float(value) for value in values))
    except ValueError:
        return None

