"""The Prometheus endpoint (`GET /metrics`), off unless `metrics.listen` is set.

The exposition is `prometheus_client`'s: a custom collector renders from a snapshot callable that
returns `(DaemonStatus | None, counts)`, where `counts` is what `incidents.Store.counts()` returns
(a plain dict; `{}` when there is no database yet), so a scrape never touches the daemon loop's
objects and never blocks it. The process collector adds `process_*`, the platform collector
`python_info`; the `Accept` header picks the text format 0.0.4 or OpenMetrics.

Names follow the Prometheus naming guide: counters end in `_total`, no counter and gauge share a
family, times are `_timestamp_seconds` (a value that stays put while all is well, not an age that
grows), and what can be summed is safe to sum.

The HTTP side is one thread with a selector, not a thread per connection: at most
`MAX_CONNECTIONS` are open, each must send its request within `REQUEST_TIMEOUT_S`, and a new
connection beyond the limit closes the oldest. Idle or slow clients cannot exhaust threads or fds.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder

from .status import STATES, DaemonStatus

log = structlog.get_logger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Snapshot = Callable[[], tuple[DaemonStatus | None, Mapping[str, Any]]]

MAX_CONNECTIONS = 32
REQUEST_TIMEOUT_S = 10.0
MAX_REQUEST_BYTES = 16 * 1024

# A service counts as up once a probe passed after its current start, and while ddtreed is not
# handling a crash (a crashed service can still answer /health for a moment).
_UP_STATES = ("running", "verifying")

# Every family this module exports (the alert rules and dashboard in contrib/ are checked
# against this list by the tests).
FAMILIES = (
    "ddtreed_build_info", "ddtreed_service_up", "ddtreed_state", "ddtreed_service_restarts_total",
    "ddtreed_last_accept_length", "ddtreed_last_healthy_probe_timestamp_seconds",
    "ddtreed_service_start_timestamp_seconds", "ddtreed_canary_passed", "ddtreed_degraded",
    "ddtreed_incidents_total", "ddtreed_incidents_by_status", "ddtreed_remediations_applied_total",
    "ddtreed_remediations_reverted_total", "ddtreed_frozen_signatures",
)


class DaemonCollector:
    """prometheus_client collector over the snapshot; `healthy_probe()` keeps the timestamp fresh."""

    def __init__(self, snapshot: Snapshot):
        self._snapshot = snapshot
        self._healthy_at: float | None = None
        self._lock = threading.Lock()

    def healthy_probe(self, at: float | None = None) -> None:
        """A probe of the serving service passed at `at` (time.time()); cheap, any thread."""
        at = time.time() if at is None else at
        with self._lock:
            if self._healthy_at is None or at > self._healthy_at:
                self._healthy_at = at

    def collect(self) -> Iterator[Metric]:
        status, counts = self._snapshot()
        with self._lock:
            recorded = self._healthy_at
        yield from daemon_families(status, recorded)
        yield from incident_families(counts)


def daemon_families(status: DaemonStatus | None, healthy_probe_at: float | None = None) -> list[Metric]:
    from .. import __version__

    state = status.state if status else None
    healthy_at = max(filter(None, (status.last_healthy_at if status else None, healthy_probe_at)),
                     default=None)
    started_at = (status.service_started_at or 0.0) if status else 0.0
    up = state in _UP_STATES and healthy_at is not None and healthy_at >= started_at

    build = InfoMetricFamily("ddtreed_build", "ddtreed's version (the value is always 1).",
                             value={"version": __version__})
    service_up = _gauge("ddtreed_service_up",
                        "1 when the supervised service passed a probe since its current start and is serving.",
                        1.0 if up else 0.0)
    states = GaugeMetricFamily("ddtreed_state", "The daemon's state, one-hot over all states.",
                               labels=["state"])
    for name in STATES:
        states.add_metric([name], 1.0 if name == state else 0.0)
    restarts = CounterMetricFamily("ddtreed_service_restarts", "Service restarts since this daemon started.")
    if status:
        restarts.add_metric([], float(status.restarts))
    canary = _canary_passed(status)
    return [
        build, service_up, states, restarts,
        _gauge("ddtreed_last_accept_length",
               "Speculative acceptance length (tokens per verify step) at the last generate probe.",
               status.last_accept_length if status else None),
        _gauge("ddtreed_last_healthy_probe_timestamp_seconds",
               "Unix time of the last passing health or generate probe.", healthy_at),
        _gauge("ddtreed_service_start_timestamp_seconds",
               "Unix time the supervised service was last started.",
               status.service_started_at if status else None),
        _gauge("ddtreed_canary_passed", "1 when the last canary run passed, 0 when it failed.", canary),
        _gauge("ddtreed_degraded",
               "1 while the service runs in a degraded configuration (a fallback remediation).",
               1.0 if status and status.degraded else 0.0),
    ]


def incident_families(counts: Mapping[str, Any]) -> list[Metric]:
    by_category: dict[str, float] = {}
    by_status: dict[tuple[str, str], float] = {}
    for row in counts.get("incidents") or ():
        category, status, count = str(row["category"]), str(row["status"]), float(row["count"])
        by_category[category] = by_category.get(category, 0.0) + count
        by_status[(category, status)] = by_status.get((category, status), 0.0) + count
    total = CounterMetricFamily("ddtreed_incidents", "Incidents recorded, by category.", labels=["category"])
    for category, count in sorted(by_category.items()):
        total.add_metric([category], count)
    # Current status is a gauge of its own family: an incident moves from open to resolved, so a
    # per-status counter would go down, which Prometheus reads as a counter reset.
    current = GaugeMetricFamily("ddtreed_incidents_by_status",
                                "Incidents by category and current status (open, escalated, resolved, ...).",
                                labels=["category", "status"])
    for (category, status), count in sorted(by_status.items()):
        current.add_metric([category, status], count)
    applications = counts.get("applications") or {}
    # Two counters, not one with an action label: reverted ones are a subset of applied ones,
    # so summing over such a label would count a reverted remediation twice.
    applied = CounterMetricFamily("ddtreed_remediations_applied",
                                  "Remediations applied (each application once, whatever became of it).")
    reverted = CounterMetricFamily("ddtreed_remediations_reverted",
                                   "Applied remediations that were reverted (a subset of the applied ones).")
    if counts:
        applied.add_metric([], float(sum(applications.values())))
        reverted.add_metric([], float(applications.get("reverted", 0)))
    frozen = counts.get("frozen_signatures")
    return [total, current, applied, reverted,
            _gauge("ddtreed_frozen_signatures",
                   "Crash signatures on which auto-remediation has stopped (escalated).", frozen)]


def _gauge(name: str, documentation: str, value: float | None) -> GaugeMetricFamily:
    # An unknown value is left out rather than exported as 0, which would read as a measurement.
    family = GaugeMetricFamily(name, documentation)
    if value is not None:
        family.add_metric([], float(value))
    return family


def _canary_passed(status: DaemonStatus | None) -> float | None:
    if not status or not status.canary or status.canary.get("passed") is None:
        return None
    return 1.0 if status.canary["passed"] else 0.0


def registry_for(collector: DaemonCollector, process: bool = True) -> CollectorRegistry:
    """A registry of its own (never the global one): the daemon's metrics, process_*, python_info."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    if process:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    return registry


def render(status: DaemonStatus | None, counts: Mapping[str, Any], accept: str = "") -> str:
    """The exposition of the daemon's own families for one snapshot (text 0.0.4 by default)."""
    registry = registry_for(DaemonCollector(lambda: (status, counts)), process=False)
    encoder, _ = choose_encoder(accept)
    return encoder(registry).decode()


def parse_listen(text: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `:port` (all addresses) as (host, port); ValueError otherwise."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ValueError(f"metrics.listen must be HOST:PORT, e.g. 127.0.0.1:9477, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port_text)


class MetricsServer:
    """`GET /metrics` served by one selector thread; `close()` stops it."""

    def __init__(self, listen: str, snapshot: Snapshot):
        host, port = parse_listen(listen)
        self.collector = DaemonCollector(snapshot)
        self.registry = registry_for(self.collector)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=64)
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._connections: dict[socket.socket, _Connection] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="ddtreed-metrics", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port): with port 0 in `listen`, the port the kernel chose."""
        host, port = self._listener.getsockname()[:2]
        return host, port

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    def healthy_probe(self, at: float | None = None) -> None:
        """Call on every passing probe of the serving service (keeps the timestamp fresh)."""
        self.collector.healthy_probe(at)

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics_listening", host=self.address[0], port=self.address[1])
        return self

    def close(self) -> None:
        self._stopping = True
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout=5)
        for sock in list(self._connections):
            self._drop(sock)
        for sock in (self._listener, self._wake_read, self._wake_write):
            sock.close()
        self._selector.close()

    # --- the selector loop ------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stopping:
            for key, events in self._selector.select(timeout=1.0):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is self._wake_read:
                    continue
                else:
                    self._service(key.fileobj, events)
            self._expire()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # EMFILE and the like: the loop keeps serving the others
                log.warning("metrics_accept_failed", error=str(error))
                return
            sock.setblocking(False)
            if len(self._connections) >= MAX_CONNECTIONS:
                oldest = min(self._connections, key=lambda s: self._connections[s].opened_at)
                self._drop(oldest)
            self._connections[sock] = _Connection(time.monotonic())
            self._selector.register(sock, selectors.EVENT_READ, None)

    def _service(self, sock: Any, events: int) -> None:
        connection = self._connections.get(sock)
        if connection is None:
            return
        try:
            if events & selectors.EVENT_READ and connection.response is None:
                data = sock.recv(4096)
                if not data:
                    self._drop(sock)
                    return
                connection.request += data
                if b"\r\n\r\n" in connection.request:
                    connection.response = self._respond(bytes(connection.request))
                    self._selector.modify(sock, selectors.EVENT_WRITE, None)
                elif len(connection.request) > MAX_REQUEST_BYTES:
                    connection.response = _reply(431, "text/plain; charset=utf-8", b"request too large\n")
                    self._selector.modify(sock, selectors.EVENT_WRITE, None)
                return
            if events & selectors.EVENT_WRITE and connection.response:
                sent = sock.send(connection.response)
                connection.response = connection.response[sent:]
                if not connection.response:
                    self._drop(sock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sock)

    def _respond(self, request: bytes) -> bytes:
        lines = request.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if method not in ("GET", "HEAD"):
            return _reply(405, "text/plain; charset=utf-8", b"only GET /metrics\n")
        if path.split("?", 1)[0] != "/metrics":
            return _reply(404, "text/plain; charset=utf-8", b"not found: try /metrics\n")
        try:
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            body = encoder(self.registry)
        except Exception as error:  # a bad snapshot is a failed scrape, never a dead thread
            log.warning("metrics_snapshot_failed", error=repr(error))
            return _reply(500, "text/plain; charset=utf-8", f"snapshot failed: {error}\n".encode())
        return _reply(200, content_type, b"" if method == "HEAD" else body, length=len(body))

    def _expire(self) -> None:
        now = time.monotonic()
        for sock, connection in list(self._connections.items()):
            if now - connection.opened_at > REQUEST_TIMEOUT_S:
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self._connections.pop(sock, None)
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()


class _Connection:
    __slots__ = ("opened_at", "request", "response")

    def __init__(self, opened_at: float):
        self.opened_at = opened_at
        self.request = bytearray()
        self.response: bytes | None = None


def _reply(code: int, content_type: str, body: bytes, length: int | None = None) -> bytes:
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large",
              500: "Internal Server Error"}[code]
    head = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1") + body


def start_metrics(listen: str | None, snapshot: Snapshot) -> MetricsServer | None:
    """The running endpoint, or None when `listen` (config.metrics.listen) is unset."""
    return MetricsServer(listen, snapshot).start() if listen else None


__all__ = ["CONTENT_TYPE", "FAMILIES", "DaemonCollector", "MetricsServer",
           "parse_listen", "render", "start_metrics"]
