"""What the store says went wrong: `StoreError` (one line, a reason) and how an sqlite3 or OS
error becomes one. Standard library only: the stdlib readers (`incidents.reads`) raise the same
errors as the store."""

from __future__ import annotations

import errno
from pathlib import Path

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
