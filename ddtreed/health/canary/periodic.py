"""The periodic canary: every `interval_s` while serving, deferred while the service is busy."""

from __future__ import annotations

import time
from typing import Callable

import structlog

from ...records import ServiceContext
from . import client
from .core import Canary
from .results import CanaryResult

log = structlog.get_logger(__name__)

LOAD_PROBE_S = 2.0  # /metrics answers at once or not at all; don't hold the loop for it
MAX_DEFERRAL_INTERVALS = 2  # a service that is never idle is still checked every 2 intervals


class PeriodicCanary:
    """Call `run_if_due` from the serving loop; `reset` after a restart's own canary check."""

    def __init__(self, canary: Canary, clock: Callable[[], float] = time.monotonic):
        self.canary = canary
        self.clock = clock
        self.interval_s = canary.config.interval_s
        self.last_run: float = clock()
        self.deferred = 0

    def reset(self) -> None:
        """A check just ran (after a restart or remediation): the next is one interval away."""
        self.last_run = self.clock()
        self.deferred = 0

    def due(self) -> bool:
        return self.interval_s > 0 and self.clock() - self.last_run >= self.interval_s

    def run_if_due(self, prober, context: ServiceContext) -> CanaryResult | None:
        """A check when the interval has passed and the service is not busy; else None."""
        if not self.due():
            return None
        overdue = self.clock() - self.last_run >= self.interval_s * MAX_DEFERRAL_INTERVALS
        load = client.service_load(prober.base_url, time.monotonic() + LOAD_PROBE_S)
        if load is not None and load >= self.canary.config.busy_requests and not overdue:
            self.deferred += 1
            log.debug("canary.deferred", load=load, busy_requests=self.canary.config.busy_requests,
                      deferred=self.deferred)
            return None
        self.reset()
        return self.canary.check(prober, context)
