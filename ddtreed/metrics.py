"""A Prometheus text-format endpoint (`GET /metrics`), off unless `metrics.listen` is set.

It renders from a snapshot callable that returns `(DaemonStatus | None, counts)`, where `counts`
is what `incidents.Store.counts()` returns (a plain dict; `{}` when there is no database yet), so
a scrape never touches the daemon loop's objects and never blocks it.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from .status import STATES, DaemonStatus

log = structlog.get_logger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Snapshot = Callable[[], tuple[DaemonStatus | None, Mapping[str, Any]]]
Sample = tuple[Mapping[str, str], float]

# A service counts as up once a probe passed after its current start, and while ddtreed is not
# handling a crash (a crashed service can still answer /health for a moment).
_UP_STATES = ("running", "verifying")


def render(status: DaemonStatus | None, counts: Mapping[str, Any], now: float | None = None) -> str:
    """The exposition text for one scrape."""
    now = time.time() if now is None else now
    families = _daemon_families(status, now) + _incident_families(counts)
    return "".join(_family_text(*family) for family in families)


def _daemon_families(status: DaemonStatus | None, now: float) -> list[tuple]:
    state = status.state if status else None
    healthy_at = status.last_healthy_at if status else None
    started_at = (status.service_started_at or 0.0) if status else 0.0
    up = state in _UP_STATES and healthy_at is not None and healthy_at >= started_at
    return [
        ("ddtreed_service_up", "gauge",
         "1 when the supervised service passed a probe since its current start and is serving.",
         [({}, 1.0 if up else 0.0)]),
        ("ddtreed_state", "gauge", "The daemon's state, one-hot over all states.",
         [({"state": name}, 1.0 if name == state else 0.0) for name in STATES]),
        ("ddtreed_service_restarts_total", "counter",
         "Service restarts since this daemon started.",
         [({}, float(status.restarts))] if status else []),
        ("ddtreed_last_accept_length", "gauge",
         "Speculative acceptance length (tokens per verify step) at the last generate probe.",
         _optional(status.last_accept_length if status else None)),
        ("ddtreed_seconds_since_last_healthy_probe", "gauge",
         "Seconds since the last passing health or generate probe.",
         _optional(max(0.0, now - healthy_at) if healthy_at is not None else None)),
        ("ddtreed_canary_passed", "gauge", "1 when the last canary run passed, 0 when it failed.",
         _optional(_canary_passed(status))),
        ("ddtreed_degraded", "gauge",
         "1 while the service runs in a degraded configuration (a fallback remediation).",
         [({}, 1.0 if status and status.degraded else 0.0)]),
    ]


def _incident_families(counts: Mapping[str, Any]) -> list[tuple]:
    rows = list(counts.get("incidents") or ())
    by_category: dict[str, float] = {}
    by_status: dict[tuple[str, str], float] = {}
    for row in rows:
        category, status, count = str(row["category"]), str(row["status"]), float(row["count"])
        by_category[category] = by_category.get(category, 0.0) + count
        by_status[(category, status)] = by_status.get((category, status), 0.0) + count
    applications = counts.get("applications") or {}
    return [
        ("ddtreed_incidents_total", "counter", "Incidents recorded, by category.",
         [({"category": c}, n) for c, n in sorted(by_category.items())]),
        # Current status is a gauge: an incident moves from open to resolved, so a per-status
        # counter would go down, which Prometheus reads as a counter reset.
        ("ddtreed_incidents", "gauge", "Incidents by category and current status.",
         [({"category": c, "status": s}, n) for (c, s), n in sorted(by_status.items())]),
        ("ddtreed_remediations_total", "counter", "Remediations applied, and of those reverted.",
         # Every application row was applied once, whatever its status is now.
         [({"action": "applied"}, float(sum(applications.values()))),
          ({"action": "reverted"}, float(applications.get("reverted", 0)))]),
        ("ddtreed_frozen_signatures", "gauge",
         "Crash signatures on which auto-remediation has stopped (escalated).",
         _optional(counts.get("frozen_signatures"))),
    ]


def _optional(value: float | None) -> list[Sample]:
    # An unknown value is left out rather than exported as 0, which would read as a measurement.
    return [] if value is None else [({}, float(value))]


def _canary_passed(status: DaemonStatus | None) -> float | None:
    if not status or not status.canary or status.canary.get("passed") is None:
        return None
    return 1.0 if status.canary["passed"] else 0.0


def _family_text(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> str:
    lines = [f"# HELP {name} {_escape_help(help_text)}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]
    return "\n".join(lines) + "\n"


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape_label(value)}"' for key, value in labels.items()) + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def parse_listen(text: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `:port` (all addresses) as (host, port); ValueError otherwise."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ValueError(f"metrics.listen must be HOST:PORT, e.g. 127.0.0.1:9477, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port_text)


class MetricsServer:
    """`GET /metrics` served from a daemon thread; `close()` stops it."""

    def __init__(self, listen: str, snapshot: Snapshot):
        host, port = parse_listen(listen)
        server_class = _V6Server if ":" in host else _Server
        self._server = server_class((host, port), _handler(snapshot))
        self._thread = threading.Thread(target=self._server.serve_forever, name="ddtreed-metrics",
                                        kwargs={"poll_interval": 0.5}, daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port): with port 0 in `listen`, the port the kernel chose."""
        return self._server.server_address[0], self._server.server_address[1]

    def start(self) -> "MetricsServer":
        self._thread.start()
        log.info("metrics_listening", host=self.address[0], port=self.address[1])
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics(listen: str | None, snapshot: Snapshot) -> MetricsServer | None:
    """The running endpoint, or None when `listen` (config.metrics.listen) is unset."""
    return MetricsServer(listen, snapshot).start() if listen else None


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck scraper must not keep ddtreed from exiting


class _V6Server(_Server):
    address_family = socket.AF_INET6


def _handler(snapshot: Snapshot) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path.split("?", 1)[0] != "/metrics":
                self._reply(404, "text/plain; charset=utf-8", "not found: try /metrics\n")
                return
            try:
                status, counts = snapshot()
                body = render(status, counts)
            except Exception as error:  # a bad snapshot is a failed scrape, never a dead thread
                log.warning("metrics_snapshot_failed", error=repr(error))
                self._reply(500, "text/plain; charset=utf-8", f"snapshot failed: {error}\n")
                return
            self._reply(200, CONTENT_TYPE, body)

        def _reply(self, code: int, content_type: str, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
            log.debug("metrics_request", client=self.client_address[0], line=format % args)

    return Handler
