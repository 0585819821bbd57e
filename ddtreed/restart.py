"""The restart policy: exponential backoff, and a give-up point so a crash loop never storms."""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

import structlog

log = structlog.get_logger(__name__)


class RestartBudget:
    """At most `max_restarts` restarts within `window_s`; the delay doubles with each one.

    Pure bookkeeping over a clock: the caller records each start and asks for the next delay.
    """

    def __init__(self, max_restarts: int, window_s: float, backoff_initial_s: float,
                 backoff_max_s: float, clock: Callable[[], float] = time.monotonic):
        if max_restarts < 0 or window_s <= 0 or backoff_initial_s < 0:
            raise ValueError("max_restarts >= 0, window_s > 0 and backoff_initial_s >= 0 are required")
        if backoff_max_s < backoff_initial_s:
            raise ValueError("backoff_max_s must be >= backoff_initial_s")
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._clock = clock
        self._starts: deque[float] = deque()

    @classmethod
    def from_policy(cls, policy, clock: Callable[[], float] = time.monotonic) -> "RestartBudget":
        """Built from a config's [policy] section."""
        return cls(policy.max_restarts, policy.restart_window_s, policy.backoff_initial_s,
                   policy.backoff_max_s, clock)

    def record_start(self) -> None:
        self._starts.append(self._clock())

    def reset(self) -> None:
        """Forget past starts, e.g. once a fix has been verified healthy."""
        self._starts.clear()

    @property
    def starts_in_window(self) -> int:
        self._forget_old()
        return len(self._starts)

    def spent_reason(self) -> str:
        """Why `next_delay` gave up, in the words of the [policy] settings."""
        return (f"restart budget spent: {self.starts_in_window} starts in {self.window_s:g} s "
                f"(policy.max_restarts = {self.max_restarts})")

    def next_delay(self) -> float | None:
        """Seconds to wait before the next start, or None: give up (too many starts in the window)."""
        starts = self.starts_in_window
        # The first start is not a restart: starts - 1 restarts have been spent so far.
        if starts - 1 >= self.max_restarts:
            log.error("restart.give_up", starts_in_window=starts, window_s=self.window_s,
                      max_restarts=self.max_restarts,
                      hint="the service keeps crashing; fix the cause, then restart the daemon")
            return None
        exponent = max(starts - 1, 0)
        delay = min(self.backoff_max_s, self.backoff_initial_s * (2.0 ** exponent))
        log.debug("restart.backoff", delay_s=delay, starts_in_window=starts)
        return delay

    def _forget_old(self) -> None:
        horizon = self._clock() - self.window_s
        while self._starts and self._starts[0] < horizon:
            self._starts.popleft()
