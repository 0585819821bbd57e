"""One daemon per state dir: an OS lock (`flock`) on `<state_dir>/ddtreed.lock`, held for life.

The kernel drops the lock when the holder dies (even by SIGKILL), so a stale file never blocks a
start; the file holds the holder's pid so a refused start can name it. `holder(state_dir)` is the
one answer to "is a daemon running on this state dir?" (the CLI and promotion ask it).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "ddtreed.lock"


class StateDirLocked(RuntimeError):
    """Another live ddtreed holds the state dir; the message is one line naming its pid."""

    def __init__(self, path: Path, pid: int | None):
        holder = f"pid {pid}" if pid is not None else "a process that did not say its pid"
        super().__init__(f"{path}: another ddtreed ({holder}) supervises this state dir; stop it first")
        self.pid = pid


def lock_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / LOCK_FILE


def acquire(state_dir: str | os.PathLike[str]) -> int:
    """Take the lock for this process and write its pid; the fd stays open for the daemon's life.

    Raises StateDirLocked when a live daemon holds it. The fd is close-on-exec: the service tree
    never inherits it (an orphaned service must not keep the next daemon out).
    """
    path = lock_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _read_pid(descriptor)
        os.close(descriptor)
        raise StateDirLocked(path, pid) from None
    except BaseException:
        os.close(descriptor)
        raise
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return descriptor


def release(descriptor: int) -> None:
    os.close(descriptor)  # closing drops the flock


def holder(state_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the live daemon holding the state dir, or None when no daemon holds it."""
    path = lock_path(state_dir)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(descriptor) or -1
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return None
    finally:
        os.close(descriptor)


def _read_pid(descriptor: int) -> int | None:
    try:
        text = os.pread(descriptor, 32, 0).decode("ascii", "replace").split()
        return int(text[0]) if text else None
    except (OSError, ValueError):
        return None
