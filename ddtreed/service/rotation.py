"""Size-based log rotation, one algorithm for every host: path -> path.1 -> … -> path.N.

The host supplies the file operations (`os` locally, SFTP and `cp` over SSH); the order of the
steps, which decides what survives a crash halfway, lives here once.

Only regular files are rotated in place. A symlink or FIFO where a log belongs is never read,
copied or truncated through (as root that would empty a file outside the log dir, or block on
the FIFO); at a fresh start it is moved aside, so the service gets a new regular file.
"""

from __future__ import annotations

import os
import shutil
import stat
from typing import Protocol

import structlog

log = structlog.get_logger(__name__)

FILE, SYMLINK, OTHER = "file", "symlink", "other"


class RotationFiles(Protocol):
    def kind(self, path: str) -> tuple[str, int, int] | None:
        """(FILE | SYMLINK | OTHER, size, identity) of the entry itself (lstat); None: absent."""
        ...

    def exists(self, path: str) -> bool: ...

    def rename(self, source: str, target: str) -> None: ...

    def copy(self, source: str, target: str) -> None: ...

    def truncate(self, path: str) -> None: ...

    def remove(self, path: str) -> None: ...


def kind_of_mode(mode: int) -> str:
    if stat.S_ISREG(mode):
        return FILE
    return SYMLINK if stat.S_ISLNK(mode) else OTHER


class _Warned:
    """Which hostile entry was already reported, so a planted link is one warning, not one per
    size check (rotate() is called every few seconds and keeps no other state)."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def first(self, path: str, identity: int) -> bool:
        if self._seen.get(path) == identity:
            return False
        if len(self._seen) > 1024:  # bounded: paths come from the config, this never fills
            self._seen.clear()
        self._seen[path] = identity
        return True


_warned = _Warned()


def rotate(files: RotationFiles, path: str, backups: int, over_bytes: int | None,
           copy_truncate: bool) -> bool:
    """Rotate `path` when it is non-empty (and larger than `over_bytes`); True when it rotated.

    copy_truncate keeps the inode a running writer appends to (O_APPEND: it continues at 0). Lines
    written between the copy and the truncate are lost: the price of not owning the writer's file
    descriptor.
    """
    found = files.kind(path)
    if found is None:
        return False
    kind, size, identity = found
    if kind != FILE:
        return _not_a_file(files, path, kind, identity, backups, copy_truncate)
    if not size or (over_bytes is not None and size <= over_bytes):
        return False
    if backups <= 0:
        files.truncate(path) if copy_truncate else files.remove(path)
        return True
    _shift(files, path, backups)
    if copy_truncate:
        files.copy(path, f"{path}.1")
        files.truncate(path)
    else:
        files.rename(path, f"{path}.1")
    return True


def _shift(files: RotationFiles, path: str, backups: int) -> None:
    for index in range(backups - 1, 0, -1):
        if files.exists(f"{path}.{index}"):
            files.rename(f"{path}.{index}", f"{path}.{index + 1}")


def _not_a_file(files: RotationFiles, path: str, kind: str, identity: int, backups: int,
                copy_truncate: bool) -> bool:
    """Never through it; before a start (rename mode) the entry itself is moved aside."""
    what = "a symlink" if kind == SYMLINK else "not a regular file (FIFO, device or directory)"
    if copy_truncate:
        if _warned.first(path, identity):
            log.warning("log_rotation_refused", path=path, reason=f"{what}: not followed, not truncated",
                        hint="a log path in ddtreed's log dir must be a regular file; remove it")
        return False
    if backups <= 0:
        files.remove(path)  # unlinks the entry, never its target
    else:
        _shift(files, path, backups)
        files.rename(path, f"{path}.1")
    log.warning("log_moved_aside", path=path, reason=what,
                hint="the service gets a fresh regular log file; the entry was renamed, its target untouched")
    return True


class LocalFiles:
    """The rotation's file operations on this machine; reads and truncations never follow links."""

    @staticmethod
    def kind(path: str) -> tuple[str, int, int] | None:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        return kind_of_mode(info.st_mode), info.st_size, info.st_ino

    exists = staticmethod(os.path.lexists)
    rename = staticmethod(os.replace)
    remove = staticmethod(os.unlink)

    @staticmethod
    def copy(source: str, target: str) -> None:
        descriptor = _open_regular(source, os.O_RDONLY)
        with os.fdopen(descriptor, "rb") as reading:
            if os.path.lexists(target):
                os.unlink(target)  # an entry planted at path.1 is replaced, never written through
            created = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            with os.fdopen(created, "wb") as writing:
                shutil.copyfileobj(reading, writing)

    @staticmethod
    def truncate(path: str) -> None:
        descriptor = _open_regular(path, os.O_WRONLY)
        try:
            os.ftruncate(descriptor, 0)
        finally:
            os.close(descriptor)


def _open_regular(path: str, flags: int) -> int:
    """Open without following a final symlink and without blocking on a FIFO; regular files only."""
    descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise OSError(f"{path}: not a regular file")
    return descriptor


def open_log_for_append(path: str):
    """The service's log file for appending: created 0644 if absent, never through a link or FIFO."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise OSError(f"{path}: not a regular file; ddtreed only writes service logs to regular files")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "ab", buffering=0)
