"""Test hook for the crash-safety tests: `DDTREED_KILL_AT=STEP` (or `STEP#N`, the Nth time) makes
this process SIGKILL itself when it reaches STEP, so a test hits a window between two steps
deterministically instead of by a lucky delay (tests/faults/test_kill_windows.py). Unset (always,
outside those tests) it costs one dictionary lookup.

Steps: `launch:spawned` — the service was just spawned; its pid and token are not recorded yet.
`incident:committed` — a crash's incident row (or a crash loop's `recurred` step) is committed
without its fsync (`synchronous=NORMAL`) and `make_durable()` has not run yet
(tests/test_incidents_durability.py).
"""

from __future__ import annotations

import os
import signal
from collections import Counter

VARIABLE = "DDTREED_KILL_AT"
_reached: Counter[str] = Counter()


def reached(step: str) -> None:
    wanted = os.environ.get(VARIABLE)
    if not wanted:
        return
    name, _, nth = wanted.partition("#")
    if name != step:
        return
    _reached[step] += 1
    if _reached[step] == (int(nth) if nth.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)
