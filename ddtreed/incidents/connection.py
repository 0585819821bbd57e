"""Opening the incident database: private files, WAL, a busy timeout, clear errors."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path
from typing import Iterator

import sqlite_utils
import structlog

from ..sqlite_readonly import open_read_only

log = structlog.get_logger(__name__)

DATABASE_NAME = "incidents.sqlite3"
DEFAULT_BUSY_TIMEOUT_S = 5.0

# sqlite3 primary result codes (the low byte of an extended code).
_REASONS = {
    5: "locked",  # SQLITE_BUSY: another connection holds the write lock past the timeout
    6: "locked",  # SQLITE_LOCKED
    8: "readonly",
    10: "io",
    11: "corrupt",
    13: "full",
    14: "cantopen",
    26: "corrupt",  # SQLITE_NOTADB
}
_RETRYABLE = frozenset({"locked", "full", "io"})


class StoreError(RuntimeError):
    """A database problem as one line; `.reason` says what kind, `.retryable` whether to retry."""

    def __init__(self, message: str, reason: str = "other"):
        super().__init__(message)
        self.reason = reason

    @property
    def retryable(self) -> bool:
        return self.reason in _RETRYABLE


def database_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / DATABASE_NAME


def translate(error: BaseException, path: Path, action: str, busy_timeout_s: float) -> StoreError:
    """An sqlite3 or OS error as a StoreError that names the file and what to do."""
    if isinstance(error, StoreError):
        return error
    if isinstance(error, OSError):
        reason = "full" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "io"
        return StoreError(f"{path}: cannot {action}: {error.strerror or error}", reason)
    code = getattr(error, "sqlite_errorcode", None)
    reason = _REASONS.get(code & 0xFF, "other") if isinstance(code, int) else "other"
    hints = {
        "locked": f"database is locked by another connection (waited {busy_timeout_s:g} s); retry later",
        "full": "disk full; free space in the state directory, then retry",
        "readonly": "database is read-only (file or directory permissions)",
        "corrupt": "not a valid ddtreed database (corrupt, or another program's file)",
        "cantopen": "cannot open the database file",
    }
    detail = hints.get(reason, str(error))
    return StoreError(f"{path}: cannot {action}: {detail}", reason)


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


def connect(path: Path, busy_timeout_s: float) -> sqlite_utils.Database:
    """A sqlite-utils Database in WAL mode whose writers wait `busy_timeout_s` for a lock."""
    # check_same_thread=False: the metrics endpoint reads from its own thread; Store serialises
    # access with a lock.
    connection = sqlite3.connect(str(path), timeout=busy_timeout_s, check_same_thread=False)
    db = sqlite_utils.Database(connection, execute_plugins=False)
    if db.journal_mode != "wal":
        db.enable_wal()  # WAL: the CLI reads while the daemon writes, neither blocks the other
    db.execute("PRAGMA foreign_keys = ON")
    # synchronous stays FULL (the WAL default here): a recorded step must survive a power cut.
    return db


def connect_read_only(path: Path, busy_timeout_s: float) -> sqlite_utils.Database:
    """Open for reading only: a copy from another host, a read-only mount, a reviewer's account
    (`sqlite_readonly.open_read_only`: `mode=ro`, else `immutable=1`)."""
    connection = open_read_only(path, busy_timeout_s, check_same_thread=False)
    return sqlite_utils.Database(connection, execute_plugins=False)


@contextlib.contextmanager
def transaction(db: sqlite_utils.Database, immediate: bool = True) -> Iterator[None]:
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
