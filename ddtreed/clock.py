"""The clock seam: every wait and every timestamp of the loop goes through one `Clock`.

The loop never calls `time.*` itself, so the middle tier of tests (`ddtreed.testing.FakeClock`)
drives a whole incident in milliseconds.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines)."""
        ...

    def time(self) -> float:
        """Epoch seconds (what records and the status snapshot show)."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))
