"""The connection owner: opening, the one `atomic()` write helper, consistent reads."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar


from .lite import Database
from .connection import (DEFAULT_BUSY_TIMEOUT_S, StoreError, connect, connect_read_only, prepare_directory,
                         prepare_file, relaxed, sync_wal, transaction, translate)
from .migrations import MIGRATIONS, applied, migrate

T = TypeVar("T")


class StoreBase:
    """Owns one SQLite connection; every write is one transaction through `atomic()`."""

    def __init__(self, path: str | os.PathLike[str], busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
                 create: bool = True, read_only: bool = False):
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        self._wal_synced: tuple[int, int] | None = None  # the -wal file whose directory entry is on disk
        if not create and not self.path.exists():
            raise StoreError(f"{self.path}: no incident database here (nothing recorded yet)",
                             "missing")
        if read_only:
            self._open_read_only()
            return
        try:
            if create:
                prepare_directory(self.path)
                prepare_file(self.path)
            self.db: Database = connect(self.path, busy_timeout_s)
            migrate(self.db)
        except (sqlite3.Error, OSError) as error:
            raise translate(error, self.path, "open the incident database", busy_timeout_s) from error

    def _open_read_only(self) -> None:
        """Readers (the CLI) never write: no migration, no WAL switch, no lock on the file."""
        try:
            self.db = connect_read_only(self.path, self.busy_timeout_s)
            pending = len(applied(self.db)) < len(MIGRATIONS)
        except (sqlite3.Error, OSError) as error:
            raise translate(error, self.path, "open the incident database", self.busy_timeout_s) from error
        if pending:
            self.db.close()
            raise StoreError(f"{self.path}: written by an older ddtreed; start this version's daemon "
                             "on it once (it migrates the schema) before reading it", "outdated")

    def close(self) -> None:
        with self._lock:
            self.db.close()

    def __enter__(self) -> "StoreBase":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def atomic(self, durable: bool = True) -> Iterator[Database]:
        """One write transaction (all or nothing); a nested call joins the outer one.

        `durable` (the default): the commit returns once the transaction is on stable storage
        (WAL, `synchronous=FULL`: one fdatasync of the -wal file), so it survives a power cut.
        `durable=False`: committed at `synchronous=NORMAL` (no fsync): it survives a crash or
        kill of the daemon, not a power cut, until `make_durable()` (or any durable commit after
        it) returns. Only the incident path uses it (see `make_durable`). A nested call takes the
        outer transaction's durability."""
        with self._lock:
            if self.db.conn.in_transaction:
                yield self.db
                return
            try:
                with relaxed(self.db, not durable), transaction(self.db):
                    yield self.db
            except (sqlite3.Error, OSError) as error:
                raise translate(error, self.path, "write", self.busy_timeout_s) from error

    def make_durable(self) -> None:
        """Every transaction committed so far on stable storage: one fdatasync of the -wal file
        (and one of its directory the first time this -wal file is synced here), the sync that a
        `synchronous=FULL` commit ends with (`connection.sync_wal`). The daemon calls it after
        the incident row (committed with `durable=False`) and before it does anything to the host
        or tells anyone about the incident."""
        with self._lock:
            try:
                self._wal_synced = sync_wal(self.path, self._wal_synced, self._wal_deleted)
            except (sqlite3.Error, OSError) as error:
                raise translate(error, self.path, "write", self.busy_timeout_s) from error

    def _wal_deleted(self) -> None:
        """Our -wal was deleted under the open connection (SQLite writes on into the unlinked
        file; whoever opens the database next never sees its frames): every frame is copied into
        the database file (which `sync_wal` then syncs), and the connection opened again, so
        that later commits go to a -wal at the path."""
        busy, frames, copied = self.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy or copied < frames:  # a reader holds back the frames: the caller retries
            raise StoreError(f"{self.path}: cannot write: the -wal was deleted and a reader blocks "
                             "the checkpoint that saves its frames", "locked")
        self.db.close()
        self.db = connect(self.path, self.busy_timeout_s)
        self._wal_synced = None

    def together(self, write: Callable[[Any], T]) -> T:
        """`write(store)` as ONE transaction: every write it makes through `store` (this Store)
        commits at once (one WAL fsync instead of one per write), or none does. For facts that
        are recorded back to back with nothing done to the host between them (a step and the
        status it leads to): when this returns, all of them are on disk. Through DurableStore the
        whole of it is retried (a rolled-back batch is rerun from the start)."""
        with self.atomic():
            return write(self)

    @contextlib.contextmanager
    def reading(self) -> Iterator[Database]:
        """One read snapshot, so an incident and its steps are read as of the same moment."""
        with self._lock:
            if self.db.conn.in_transaction:
                yield self.db
                return
            try:
                with transaction(self.db, immediate=False):
                    yield self.db
            except sqlite3.Error as error:
                raise translate(error, self.path, "read", self.busy_timeout_s) from error

    def _require(self, db: Database, what: str, key: object) -> None:
        """Raise StoreError(reason="missing") when `what` ("incident" | "application") is absent."""
        table, column = {"incident": ("incidents", "id"),
                         "application": ("applications", "application_id")}[what]
        row = db.execute(f"SELECT 1 FROM {table} WHERE {column} = ?", [key]).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no {what} {key}", "missing")
