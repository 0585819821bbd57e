"""The incident store (SQLite through the standard library, `lite.py`) and how incidents are shown.

What the stdlib readers need (`database_path`, `StoreError`, `reads.Reader`) is imported here;
the store itself (`Store`, which imports sqlite3 and structlog) and the rest are imported on
first use, so `ddtreed incidents` and `import ddtreed.incidents.views` start without them.
"""

from __future__ import annotations

import importlib

from .errors import StoreError
from .reads import DATABASE_NAME, database_path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the readers start fast)
if TYPE_CHECKING:
    from typing import Any

    from ..records import STEPS
    from .migrations import MIGRATIONS
    from .retention import Retention
    from .state import APPLICATION_STATUSES, baseline_key
    from .store import Store
    from .timeline import SOURCES

# name -> the module that defines it (imported when the name is first asked for)
_LAZY = {"MIGRATIONS": ".migrations", "Retention": ".retention", "Store": ".store",
         "APPLICATION_STATUSES": ".state", "baseline_key": ".state", "SOURCES": ".timeline",
         "STEPS": "..records"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = ["APPLICATION_STATUSES", "DATABASE_NAME", "MIGRATIONS", "Retention", "SOURCES", "STEPS", "Store",
           "StoreError", "baseline_key", "database_path"]
