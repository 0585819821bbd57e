"""Opening the incident database: private files, WAL, a busy timeout, clear errors."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Callable, Iterator

import structlog

from ..sqlite_readonly import open_read_only
from .lite import Database
from .errors import StoreError, translate  # noqa: F401 - the store's errors, named here as before
from .reads import DATABASE_NAME, DEFAULT_BUSY_TIMEOUT_S, database_path  # noqa: F401

log = structlog.get_logger(__name__)

# What a connection is wrapped in: the standard library's sqlite3 with sqlite-utils' calls
# (`lite.Database`); tests/test_incidents_lite.py swaps sqlite-utils itself in to compare.
DATABASE: Callable[[sqlite3.Connection], Database] = Database


def prepare_directory(path: Path) -> None:
    """Create the state directory 0700 when it is missing (incidents hold paths and tracebacks)."""
    directory = path.parent
    if directory.is_dir():
        return
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask


def prepare_file(path: Path) -> None:
    """Create the database file 0600 before SQLite does, so it is never briefly world-readable."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        _tighten(path)
        return
    os.close(descriptor)
    os.chmod(path, 0o600)


def _tighten(path: Path) -> None:
    status = path.stat()
    if status.st_mode & 0o077 and status.st_uid == os.geteuid():
        os.chmod(path, 0o600)
        log.warning("incidents.database_mode_tightened", path=str(path),
                    was=oct(status.st_mode & 0o777))


def connect(path: Path, busy_timeout_s: float) -> Database:
    """A Database (`lite`) in WAL mode whose writers wait `busy_timeout_s` for a lock."""
    # check_same_thread=False: the metrics endpoint reads from its own thread; Store serialises
    # access with a lock.
    connection = sqlite3.connect(str(path), timeout=busy_timeout_s, check_same_thread=False)
    db = DATABASE(connection)
    _switch_to_wal(db, busy_timeout_s)  # WAL: the CLI reads while the daemon writes
    db.execute("PRAGMA foreign_keys = ON")
    # FULL (set, not left to the build's WAL default): a commit returns once the -wal file is
    # synced, so a recorded step survives a power cut. `relaxed()` lowers it for one commit.
    db.execute("PRAGMA synchronous = FULL")
    return db


@contextlib.contextmanager
def relaxed(db: Database, relax: bool = True) -> Iterator[None]:
    """While inside: commits at `synchronous=NORMAL` (WAL: no fsync at commit; a crash or kill of
    the process loses nothing committed, a power cut may lose what `sync_wal` has not synced);
    FULL again after. Only outside a transaction (SQLite refuses the pragma inside one)."""
    if not relax:
        yield
        return
    db.conn.execute("PRAGMA synchronous = NORMAL")
    try:
        yield
    finally:
        db.conn.execute("PRAGMA synchronous = FULL")


def sync_wal(path: Path, synced: tuple[int, int] | None,
             wal_gone: Callable[[], None] | None = None) -> tuple[int, int] | None:
    """What a `synchronous=FULL` commit does after writing its frames, for the frames committed
    so far at NORMAL: `fdatasync` of the -wal file (any descriptor of the file flushes it), and of
    the directory when this -wal file (device, inode) is not `synced` yet: SQLite syncs the
    directory on a new WAL's first sync, and a NORMAL commit may be the first write to it.
    Returns the identity of the -wal file synced (`synced` as given when there was none).

    No -wal file while the store is open means the last connection's checkpoint moved every
    frame into the database file (a checkpoint syncs the WAL before and the database after);
    the database file is synced then (one fdatasync; it costs little and leaves no doubt).
    A connection that is open itself (`wal_gone` given) keeps its -wal file while it lives: none
    at the path means the file was deleted under it, its frames unreachable to the next opener,
    and `wal_gone()` is called instead (the store checkpoints them into the database file).

    SQLite names the -wal after the database's real path (every symlink resolved): a database
    file that is a link has its -wal next to the link's target, and that directory is synced."""
    path = Path(os.path.realpath(path))
    try:
        descriptor = os.open(f"{path}-wal", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if wal_gone is not None:
            wal_gone()
        _fdatasync(path)
        return synced
    try:
        os.fdatasync(descriptor)
        info = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    identity = (info.st_dev, info.st_ino)
    if identity != synced:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return identity


def _fdatasync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(descriptor)
    finally:
        os.close(descriptor)


def _switch_to_wal(db: Database, busy_timeout_s: float) -> None:
    """Put the database in WAL mode, waiting up to `busy_timeout_s` for a lock.

    SQLite does not call the busy handler for this switch: while another connection writes a
    rollback-journal database (another process creating the file, an old database) the pragma
    fails at once with "database is locked". Retried here until the timeout; each try re-reads
    the mode, since the other process may have switched it meanwhile."""
    deadline = time.monotonic() + busy_timeout_s
    pause = 0.005
    while True:
        try:
            if db.journal_mode != "wal":
                db.enable_wal()
            return
        except sqlite3.OperationalError as error:
            code = getattr(error, "sqlite_errorcode", 0) or 0
            if code & 0xFF not in (5, 6) or time.monotonic() + pause > deadline:  # BUSY, LOCKED
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def connect_read_only(path: Path, busy_timeout_s: float) -> Database:
    """Open for reading only: a copy from another host, a read-only mount, a reviewer's account
    (`sqlite_readonly.open_read_only`: `mode=ro`, else `immutable=1`)."""
    connection = open_read_only(path, busy_timeout_s, check_same_thread=False)
    return DATABASE(connection)


@contextlib.contextmanager
def transaction(db: Database, immediate: bool = True) -> Iterator[None]:
    """One transaction; IMMEDIATE takes the write lock up front so the busy timeout applies."""
    db.conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
    try:
        db.conn.execute("COMMIT")
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise
