"""A service that prints SGLang's founding traceback of rank TP0 at once and then lives on until it
is stopped (SIGTERM ends it): the daemon, not the crash, ends this service, so every signal it
gets is one the daemon sent (tests/test_incidents_durability.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fast_service import founding_traceback  # noqa: E402

if __name__ == "__main__":
    sys.stderr.write(founding_traceback(["TP0"]))
    sys.stderr.flush()
    while True:
        time.sleep(60)
