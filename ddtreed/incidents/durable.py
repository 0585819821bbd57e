"""The incident store for a long-running loop: it never stops the service.

Writes wait out a full disk or a lock; a corrupt database (at start or while running) is moved
aside loudly and a fresh one opened; a database file deleted or replaced under the daemon is
noticed (inode / link count) and reopened, so nothing is written into an unlinked file.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Callable

import structlog

from .connection import StoreError
from .store import Store

log = structlog.get_logger(__name__)

RETRY_INITIAL_S = 1.0
RETRY_MAX_S = 30.0
# Writes whose record belongs to a database that had to be replaced: the incident is gone with the
# old file; losing one step beats stopping the supervisor.
_LOSABLE = frozenset({"add_step", "amend_recurrence", "finish", "set_diagnosis", "set_remediation", "mark_application",
                      "freeze", "set_degraded", "add_accept_sample", "record_canary_run",
                      "together"})  # the daemon batches only writes of the above kinds


def open_store(path: str | os.PathLike[str]) -> Store:
    """Store(path); a corrupt file is moved aside (loudly) and a fresh database opened in its place."""
    try:
        return Store(path)
    except StoreError as error:
        if error.reason != "corrupt":
            raise
        return Store(move_aside(Path(path), error))


def move_aside(path: Path, error: StoreError) -> Path:
    """Rename the database (and its -wal/-shm) to `<name>.corrupt-<epoch>`; return `path`."""
    stamp = f"corrupt-{int(time.time())}"
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, f"{path}.{stamp}{suffix}")
    log.error("incident_database_corrupt", path=str(path), moved_to=f"{path}.{stamp}", error=str(error),
              hint="a fresh incident database is in use; the old one is kept for inspection "
                   "(sqlite3 FILE '.recover'); the service was not touched")
    return path


class DurableStore:
    """A Store whose calls survive the database: see the module docstring.

    `wait(seconds)` is how the caller waits (the daemon answers signals and the watchdog
    meanwhile). `current` is the Store in use now (the metrics thread reads it without retrying).
    """

    def __init__(self, store: "Store | DurableStore", wait: Callable[[float], None] | None = None):
        if isinstance(store, DurableStore):
            store = store.current
        self.current = store
        self.wait = wait or time.sleep
        self.replaced = 0  # how many times the database had to be replaced (corrupt, deleted)
        self._identity = _identity(store.path)
        self._prime()

    def _prime(self) -> None:
        """The -wal file's directory entry on disk now, at the start, so that the first
        incident's `make_durable()` is the one fdatasync of the -wal, not that and the directory's."""
        try:
            self.current.make_durable()
        except StoreError as error:  # a full or broken disk: the first write will say so, and wait
            log.warning("incident_database_sync_failed", error=str(error))

    @property
    def path(self) -> Path:
        return self.current.path

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("current", "wait", "replaced", "_identity"):
            raise AttributeError(name)  # not set yet (a half-built object): never recurse
        method = getattr(self.current, name)
        if not callable(method):
            return method

        def durable(*args, **kwargs):
            delay = RETRY_INITIAL_S
            while True:
                self._follow_the_file()
                try:
                    return getattr(self.current, name)(*args, **kwargs)
                except StoreError as error:
                    if error.reason == "corrupt":
                        self._replace(error)
                        continue
                    if error.reason == "missing" and self.replaced and name in _LOSABLE:
                        log.error("incident_record_lost", call=name, error=str(error),
                                  hint="it belonged to the incident database that was replaced")
                        return None
                    if not error.retryable:
                        raise
                    log.error("store_write_failed", call=name, error=str(error), retry_in_s=delay,
                              hint="free space in the state dir (or release the lock); ddtreed retries")
                    self.wait(delay)
                    delay = min(delay * 2, RETRY_MAX_S)

        return durable

    def _follow_the_file(self) -> None:
        """A deleted or replaced database file: open the one at the path now (a new one if none)."""
        now = _identity(self.current.path)
        if now == self._identity and now is not None:
            return
        log.error("incident_database_vanished" if now is None else "incident_database_replaced",
                  path=str(self.current.path),
                  hint="reopened at the same path; incidents written before are in the old file only")
        self._reopen()

    def _replace(self, error: StoreError) -> None:
        self._close()
        move_aside(self.current.path, error)
        self._reopen()

    def _reopen(self) -> None:
        path = self.current.path
        self._close()
        self.current = open_store(path)
        self._identity = _identity(path)
        self.replaced += 1
        self._prime()

    def _close(self) -> None:
        try:
            self.current.close()
        except (sqlite3.Error, OSError) as error:  # a connection on a broken file: dropped anyway
            log.debug("incident_database_close_failed", error=str(error))


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the database file, None when it is gone (or has no links left)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return (info.st_dev, info.st_ino) if info.st_nlink > 0 else None
