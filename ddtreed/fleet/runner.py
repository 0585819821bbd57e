"""Run one job on many hosts: bounded concurrency, a deadline per host, every result kept."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import structlog

from .inventory import HostEntry
from .ssh import TIMEOUT, UNREACHABLE, Connection, FleetError

log = structlog.get_logger(__name__)

# Without --concurrency or the inventory's `concurrency`: every host at once, up to this many. A
# host's turn is mostly waiting (round trips, the remote side); the client's share is CPU for key
# exchange and authentication, which more threads do not add to (docs/fleet.md, the model).
MAX_AUTO_CONCURRENCY = 64
DEADLINE_SLACK_S = 0.1  # a call given "the time left" may return a hair before the timer fires

Job = Callable[[Connection], Any]


@dataclass
class HostResult:
    name: str
    ok: bool
    error: str | None = None  # one of the reasons in fleet.ssh, None when ok
    result: Any = None
    detail: str | None = None  # what happened, for a human; never key or password material
    exit_code: int | None = None  # for "remote command failed"
    elapsed_s: float = 0.0

    def as_json(self) -> dict[str, Any]:
        data = {"name": self.name, "ok": self.ok, "error": self.error, "result": self.result,
                "detail": self.detail, "elapsed_s": round(self.elapsed_s, 3)}
        if self.exit_code is not None:
            data["exit_code"] = self.exit_code
        return data


@dataclass
class FleetReport:
    hosts: list[HostResult] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(host.ok for host in self.hosts)

    def as_json(self) -> dict[str, Any]:
        return {"hosts": [host.as_json() for host in self.hosts], "elapsed_s": round(self.elapsed_s, 3)}


def run_on_hosts(entries: list[HostEntry], job: Job, *, accept_new: bool = False,
                 concurrency: int | None = None, deadline_s: float | None = None) -> FleetReport:
    """Run `job(connection)` on every host; results in inventory order, failures never stop the rest."""
    started = time.monotonic()
    if not entries:
        return FleetReport([], 0.0)
    workers = pool_size(len(entries), concurrency, entries[0].concurrency)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleet") as pool:
        futures = [pool.submit(_run_one, entry, job, accept_new, deadline_s) for entry in entries]
        results = [future.result() for future in futures]
    report = FleetReport(results, time.monotonic() - started)
    log.info("fleet.run_finished", hosts=len(results), failed=sum(not r.ok for r in results),
             elapsed_s=round(report.elapsed_s, 3), concurrency=workers)
    return report


def pool_size(hosts: int, asked: int | None, inventory: int | None) -> int:
    """--concurrency, else the inventory's, else sized to the fleet; never more threads than hosts."""
    return max(1, min(asked or inventory or MAX_AUTO_CONCURRENCY, hosts))


def _run_one(entry: HostEntry, job: Job, accept_new: bool, deadline_s: float | None) -> HostResult:
    """One host under its own deadline: when it passes, the connection is closed under the job."""
    started = time.monotonic()
    deadline = deadline_s or entry.command_timeout_s
    expired = threading.Event()
    with Connection(entry, accept_new) as connection:
        connection.deadline = started + deadline
        def expire() -> None:
            expired.set()
            connection.abort()

        timer = threading.Timer(deadline, expire)
        timer.daemon = True
        timer.start()
        try:
            result = _outcome(entry, job, connection, expired, deadline)
        finally:
            timer.cancel()
    result.elapsed_s = time.monotonic() - started
    log.debug("fleet.host_finished", host=entry.name, ok=result.ok, error=result.error,
              elapsed_s=round(result.elapsed_s, 3))
    return result


def _outcome(entry: HostEntry, job: Job, connection: Connection, expired: threading.Event,
             deadline: float) -> HostResult:
    try:
        value = job(connection)
    except FleetError as error:
        # Calls are bounded by the time left, so one that failed at the deadline failed because of it.
        if expired.is_set() or time.monotonic() >= connection.deadline - DEADLINE_SLACK_S:
            return HostResult(entry.name, False, TIMEOUT, detail=f"no result within {deadline:g}s")
        return HostResult(entry.name, False, error.reason, result=error.result, detail=error.detail,
                          exit_code=error.exit_code)
    except Exception as error:  # a per-host surprise must not take the other hosts down
        if expired.is_set():
            return HostResult(entry.name, False, TIMEOUT, detail=f"no result within {deadline:g}s")
        log.warning("fleet.host_error", host=entry.name, error_type=type(error).__name__, error=str(error))
        return HostResult(entry.name, False, UNREACHABLE, detail=f"{type(error).__name__}: {error}")
    if expired.is_set():
        return HostResult(entry.name, False, TIMEOUT, detail=f"no result within {deadline:g}s")
    return HostResult(entry.name, True, result=value)
