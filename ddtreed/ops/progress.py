"""Progress a person can see: startup phase and elapsed/budget, the recurrence watch with time left.

Pure helpers; the daemon's loop calls them and publishes what they return into the status
snapshot (`progress`) and the log (`startup_progress`, `watching_for_recurrence`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

PROGRESS_EVERY_S = 5.0  # a long model load shows signs of life every few seconds, not a flood



def seconds_text(value: float | None) -> str:
    if value is None:
        return "?"
    value = int(value)
    return f"{value} s" if value < 120 else f"{value // 60} min {value % 60:02d} s"


class Ticker:
    """True at most every `every_s` seconds (the first call included)."""

    def __init__(self, every_s: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.every_s, self.clock, self._next = every_s, clock, 0.0

    def due(self) -> bool:
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self.every_s
        return True


def startup(phase: str, elapsed_s: float, budget_s: float, detail: str | None = None) -> dict[str, Any]:
    """The status snapshot's `progress` while the service starts."""
    return {"phase": phase, "elapsed_s": round(elapsed_s, 1), "budget_s": budget_s, "detail": detail,
            "text": f"starting: {phase}, {seconds_text(elapsed_s)} of {seconds_text(budget_s)}"}


def watching(window_s: float, until_epoch: float, now: float | None = None) -> dict[str, Any]:
    """The status snapshot's `progress` during the verification window after a fix."""
    left = max(0.0, until_epoch - (time.time() if now is None else now))
    return {"phase": None, "window_s": window_s, "watching_until": until_epoch,
            "text": f"healthy; watching {seconds_text(window_s)} for recurrence, {seconds_text(left)} left"}


class StartupReport:
    """Startup progress shown where a person looks: the status snapshot (`progress`), systemd's
    STATUS= and the lifecycle's text, while the service is starting or being verified."""

    SHOWN_IN = ("starting", "verifying")

    def __init__(self, publish: Callable[..., None], lifecycle: Any):
        self.publish, self.lifecycle = publish, lifecycle

    def __call__(self, shown: dict[str, Any]) -> None:
        self.publish(progress=shown)
        self.text(shown["text"])

    def text(self, text: str) -> None:
        if self.lifecycle.state in self.SHOWN_IN:
            self.lifecycle.enter(self.lifecycle.state, text)
