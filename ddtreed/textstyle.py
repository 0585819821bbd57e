"""The few words every view shares: colour on a terminal only, ISO-8601 UTC times in JSON.

Standard library only, so that `ddtreed status` can use them without importing the incident
store (its package opens SQLite through sqlite-utils); `incidents.views` re-exports them.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from collections.abc import Mapping

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the readers start fast)
if TYPE_CHECKING:
    from typing import Any

COLOURS = {"open": "33", "escalated": "1;31", "reverted": "31", "resolved": "32", "prevented": "32",
           "advised": "36", "interrupted": "36", "FAILED": "1;31"}


def use_colour(stream=None) -> bool:
    """Colour only on a terminal, never with NO_COLOR set or TERM=dumb (like systemctl)."""
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def paint(text: str, word: str, colour: bool) -> str:
    code = COLOURS.get(word)
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def iso(epoch: float | None) -> str | None:
    """Epoch seconds as `2025-05-01T12:00:00.123Z`; None stays None."""
    if epoch is None:
        return None
    text = datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def as_json(value: Any) -> Any:
    """A store dict with every `at` / `*_at` epoch as ISO-8601 UTC text (nested steps included)."""
    if isinstance(value, Mapping):
        return {key: iso(item) if _is_time(key, item) else as_json(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [as_json(item) for item in value]
    return value


def _is_time(key: str, value: Any) -> bool:
    return (key == "at" or key.endswith("_at") or key == "since") and isinstance(value, (int, float)) \
        and not isinstance(value, bool)
