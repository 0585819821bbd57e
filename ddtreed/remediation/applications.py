"""The engine's applications live in the incident store's `applications` table (one source of truth).

`ApplicationTable` gives the engine and its journal replay the three calls they need (`entries`,
`find`, `upsert`). An `applications.json` left by an older ddtreed is moved into the table once,
when the engine starts, and renamed `applications.json.migrated`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

LEGACY_FILE = "applications.json"


class ApplicationTable:
    """Engine entries (dicts) over an incident `Store` (the state dir's, when none is given)."""

    def __init__(self, state_dir: str, store=None):
        if store is None:
            from ..incidents import Store, database_path

            store = Store(database_path(state_dir))
        self.store = store
        migrate_legacy(state_dir, store)

    def entries(self) -> list[dict[str, Any]]:
        return self.store.application_entries()

    def find(self, application_id: str) -> dict[str, Any] | None:
        return self.store.application_entry(application_id)

    def upsert(self, entry: dict[str, Any]) -> None:
        self.store.put_application_entry(entry)


def migrate_legacy(state_dir: str, store) -> int:
    """Move an old `remediation/applications.json` into the store; return how many entries moved.

    The old daemon kept two records; the database's word on verification wins (the JSON store
    never knew it), the JSON's word on whether the change is still in place wins otherwise.
    """
    path = Path(state_dir) / "remediation" / LEGACY_FILE
    try:
        entries = json.loads(path.read_text(encoding="utf-8")).get("applications", [])
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, AttributeError) as error:
        log.error("legacy_applications_unreadable", path=str(path), error=str(error),
                  hint="left in place; its applications are not known to ddtreed")
        return 0
    for entry in entries:
        known = store.application_entry(entry["application_id"]) or {}
        merged = {**entry, "verified_at": known.get("verified_at")}
        if known.get("status") == "verified" and entry.get("status") == "applied":
            merged["status"] = "verified"
        if merged.get("incident_id") is None:
            merged["incident_id"] = known.get("incident_id")
        store.put_application_entry(merged)
    os.replace(path, path.with_name(LEGACY_FILE + ".migrated"))
    log.warning("legacy_applications_migrated", path=str(path), entries=len(entries))
    return len(entries)
