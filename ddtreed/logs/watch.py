"""inotify on the directories of the followed files, read in the caller's thread: no threads.

watchdog's ctypes wrappers (`watchdog.observers.inotify_c`) make the system calls. `wait()` polls
the inotify descriptor with a timeout and drains every queued event in one read; the kernel merges
identical unread events, so a burst of appends to one file is one wake-up. Without inotify (no
support, instance or watch limit reached) `complete` stays False and the follower polls.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import time

import structlog

try:
    from watchdog.observers import inotify_c
    from watchdog.observers.inotify_c import InotifyConstants as IN
except Exception as error:  # watchdog raises UnsupportedLibcError (an Exception) off Linux
    inotify_c, IN, _IMPORT_ERROR = None, None, str(error)
else:
    _IMPORT_ERROR = ""

log = structlog.get_logger(__name__)

_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name
_MAX_EVENT = _EVENT.size + 256  # NAME_MAX + 1, padded
READ_BYTES = 64 * 1024
if IN is not None:
    # Writes, truncation, creation, renames and deletion in the directory; the directory itself
    # going away. IN_OPEN/IN_ACCESS/IN_CLOSE_* are left out: our own reads must not wake us.
    WATCH_MASK = (IN.IN_MODIFY | IN.IN_CREATE | IN.IN_DELETE | IN.IN_MOVED_FROM | IN.IN_MOVED_TO
                  | IN.IN_DELETE_SELF | IN.IN_MOVE_SELF | IN.IN_ONLYDIR)
    GONE = IN.IN_IGNORED | IN.IN_DELETE_SELF | IN.IN_MOVE_SELF | IN.IN_UNMOUNT


class DirectoryWatch:
    """One inotify instance watching the directories of `paths`; `complete` is False while a
    directory is missing or cannot be watched (the caller then polls)."""

    def __init__(self, paths: set[str]):
        self._names: dict[str, set[bytes]] = {}  # directory -> followed base names in it
        for path in paths:
            directory, name = os.path.split(path)
            self._names.setdefault(directory, set()).add(os.fsencode(name))
        self._watches: dict[str, tuple[int, tuple[int, int]]] = {}  # directory -> (wd, identity)
        self._directories_of: dict[int, set[str]] = {}  # wd -> directories (one inode, two paths)
        self._failed: set[str] = set()  # warned once; retried on every refresh
        self.complete = False
        self._stale = False
        self._fd = _open_instance()
        self._poller = None
        if self._fd is not None:
            self._poller = select.poll()
            self._poller.register(self._fd, select.POLLIN)
        self.refresh()

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` for events; True if one concerned a followed file or directory."""
        if self._poller is None:
            time.sleep(max(0.0, timeout))
            return False
        if not self._poller.poll(max(0.0, timeout) * 1000.0):
            return False
        return self.drain()

    def drain(self) -> bool:
        """Consume every queued event without blocking; True if one concerned us."""
        relevant = False
        while self._fd is not None:
            try:
                data = os.read(self._fd, READ_BYTES)
            except BlockingIOError:
                break
            relevant = self._handle(data) or relevant
            if len(data) <= READ_BYTES - _MAX_EVENT:
                break  # the kernel had no more events, or the next one would have fit
        if self._stale:
            self.refresh()
        return relevant

    def refresh(self) -> None:
        """(Re)watch directories that appeared or were replaced; drop watches on vanished ones."""
        self._stale = False
        if self._fd is None:
            return
        complete = True
        for directory in self._names:
            identity = _identity(directory)
            current = self._watches.get(directory)
            if current is not None and current[1] != identity:
                self._unwatch(directory)
                current = None
            if identity is None:
                complete = False
            elif current is None:
                complete = self._watch(directory, identity) and complete
        self.complete = complete

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # removes every watch with it
        self._fd, self._poller, self.complete = None, None, False
        self._watches.clear()
        self._directories_of.clear()

    # --- internals --------------------------------------------------------------------------

    def _handle(self, data: bytes) -> bool:
        relevant, offset = False, 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            start = offset + _EVENT.size
            offset = start + length
            if mask & IN.IN_Q_OVERFLOW:
                relevant = True  # events were lost: look at everything
                continue
            directories = self._directories_of.get(wd, ())
            if mask & GONE and directories:
                self._stale = relevant = True
                if mask & IN.IN_IGNORED:  # the kernel dropped the watch already
                    for directory in self._directories_of.pop(wd):
                        self._watches.pop(directory, None)
                continue
            name = data[start:offset].rstrip(b"\0")
            if any(name in self._names[d] for d in directories):
                relevant = True
                # A followed file created, renamed or deleted: check the directories too (an
                # open file in a deleted directory keeps it alive, so no IN_DELETE_SELF comes).
                self._stale = self._stale or bool(mask & ~IN.IN_MODIFY)
        return relevant

    def _watch(self, directory: str, identity: tuple[int, int]) -> bool:
        # Stat first, watch second: if the directory is replaced in between, the next refresh
        # sees the identity differ and watches again.
        wd = inotify_c.inotify_add_watch(self._fd, os.fsencode(directory), WATCH_MASK)
        if wd == -1:
            if directory not in self._failed:
                log.warning("log_watch_failed", directory=directory, error=os.strerror(ctypes.get_errno()))
                self._failed.add(directory)
            return False
        self._failed.discard(directory)
        self._watches[directory] = (wd, identity)
        self._directories_of.setdefault(wd, set()).add(directory)
        return True

    def _unwatch(self, directory: str) -> None:
        wd, _ = self._watches.pop(directory)
        sharing = self._directories_of.get(wd, set())
        sharing.discard(directory)
        if not sharing:
            self._directories_of.pop(wd, None)
            inotify_c.inotify_rm_watch(self._fd, wd)  # EINVAL when the kernel dropped it: fine


def _open_instance() -> int | None:
    if inotify_c is None:
        log.warning("log_watch_unavailable", error=_IMPORT_ERROR)
        return None
    fd = inotify_c.inotify_init()
    if fd == -1:  # EMFILE: fs.inotify.max_user_instances reached (128 per user by default)
        log.warning("log_watch_unavailable", error=os.strerror(ctypes.get_errno()))
        return None
    os.set_inheritable(fd, False)  # inotify_init sets no O_CLOEXEC: keep it out of the service
    os.set_blocking(fd, False)
    return fd


def _identity(directory: str) -> tuple[int, int] | None:
    try:
        status = os.stat(directory)
    except OSError:
        return None
    return status.st_dev, status.st_ino
