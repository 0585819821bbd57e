"""The incident store (SQLite through sqlite-utils) and how incidents are shown."""

from .connection import DATABASE_NAME, StoreError, database_path
from .migrations import MIGRATIONS
from .state import APPLICATION_STATUSES, baseline_key
from .retention import Retention
from .store import Store
from ..records import STEPS
from .timeline import SOURCES

__all__ = ["APPLICATION_STATUSES", "DATABASE_NAME", "MIGRATIONS", "Retention", "SOURCES", "STEPS", "Store",
           "StoreError", "baseline_key", "database_path"]
