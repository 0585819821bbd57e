"""inotify on the directories of the followed files, read in the caller's thread: no threads.

`inotify_simple` (a maintained, public, thread-free wrapper of inotify_init1/add_watch/rm_watch)
makes the watch calls. `take()` reads every queued event in one `read` of the non-blocking
descriptor (no poll, no FIONREAD first) and sorts them into what the follower needs: the
followed files that were only written to (`modified`), and whether anything else happened to a
followed file or directory (`everything`: created, renamed, deleted, a watch gone, events lost),
after which every file is looked at again. The kernel merges identical unread events, so a
burst of appends to one file is one event. Without inotify (no support, instance or watch limit
reached) `complete` stays False and the follower polls.
"""

from __future__ import annotations

import os
import select
import struct
import time

import structlog

try:
    from inotify_simple import INotify, parse_events
    from inotify_simple import flags as IN  # noqa: N812 (the kernel's constant names)
except (ImportError, OSError) as error:  # off Linux there is no inotify_init1 to bind
    INotify, parse_events, IN, _IMPORT_ERROR = None, None, None, str(error)
else:
    _IMPORT_ERROR = ""

log = structlog.get_logger(__name__)

if IN is not None:
    # Writes, truncation, creation, renames and deletion in the directory; the directory itself
    # going away. IN_OPEN/IN_ACCESS/IN_CLOSE_* are left out: our own reads must not wake us.
    WATCH_MASK = (IN.MODIFY | IN.CREATE | IN.DELETE | IN.MOVED_FROM | IN.MOVED_TO
                  | IN.DELETE_SELF | IN.MOVE_SELF | IN.ONLYDIR)
    GONE = IN.IGNORED | IN.DELETE_SELF | IN.MOVE_SELF | IN.UNMOUNT
    # Plain ints: an IntEnum member costs an attribute lookup through the enum class per use.
    _OVERFLOW, _GONE, _IGNORED, _MODIFY = int(IN.Q_OVERFLOW), int(GONE), int(IN.IGNORED), int(IN.MODIFY)

_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
# One read takes every queued event that fits; more than this many bytes queued are read by the
# next call (the descriptor stays readable). 4,096 events of a 16-byte name.
_READ_BYTES = 4096 * (_EVENT.size + 16)
_EVENT_MAX = _EVENT.size + 256  # the largest event: NAME_MAX + 1 bytes of name


class DirectoryWatch:
    """One inotify instance watching the directories of `paths`; `complete` is False while a
    directory is missing or cannot be watched (the caller then polls)."""

    def __init__(self, paths: set[str]):
        self._paths: dict[str, dict[bytes, str]] = {}  # directory -> {base name as the kernel gives it: path}
        for path in paths:
            directory, name = os.path.split(path)
            self._paths.setdefault(directory, {})[os.fsencode(name)] = path
        self._paths_of: dict[int, list[dict[bytes, str]]] = {}  # wd -> its directories' names
        # What the events taken since the caller last cleared them say: these followed paths were
        # written to (only that), or something else happened (look at every file and directory).
        self.modified: set[str] = set()
        self.everything = False
        self._watches: dict[str, tuple[int, tuple[int, int]]] = {}  # directory -> (wd, identity)
        self._directories_of: dict[int, set[str]] = {}  # wd -> directories (one inode, two paths)
        self._failed: set[str] = set()  # warned once; retried on every refresh
        self.complete = False
        self._stale = False
        self._inotify = _open_instance()
        self._poller = None
        self._fd = -1
        if self._inotify is not None:
            self._fd = self._inotify.fileno()
            self._poller = select.poll()
            self._poller.register(self._fd, select.POLLIN)
        # A descriptor polled with the inotify one (`wake_on`: the service's pidfd), until it is
        # readable: then `woken`, and it is polled no more (a pidfd stays readable once its
        # process exited). `wake_quiet`: the last poll took it in and found it not readable.
        self._wake_fd = -1
        self.woken = False
        self.wake_quiet = False
        self.refresh()

    def wake_on(self, fd: int) -> None:
        """Poll `fd` in every wait and pause too: readable, it ends them at once (`woken`)."""
        if self._wake_fd >= 0 or self.woken or fd < 0:
            return
        self._wake_fd = fd
        if self._poller is None:
            self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` for events; True if one concerned a followed file or directory."""
        return self.readable(timeout) and self.drain()

    def readable(self, timeout: float) -> bool:
        """Block up to `timeout` until events are queued (they stay queued: `take` reads them)
        or the wake descriptor is readable (then `woken`)."""
        if self._poller is None:
            time.sleep(max(0.0, timeout))
            return False
        ready = self._poller.poll(max(0.0, timeout) * 1000.0)
        if self._wake_fd >= 0:
            self._saw(ready)
        return bool(ready) and (self._fd >= 0 or self.woken)

    def pause(self, seconds: float) -> bool:
        """Sleep `seconds` (the flood hold-off: inotify is not looked at), or less when the wake
        descriptor becomes readable; True then. `select` for its microsecond timeout (`poll`
        rounds up to the millisecond); `poll` for a descriptor past select's FD_SETSIZE."""
        fd = self._wake_fd
        if fd < 0:
            time.sleep(seconds)
            return False
        if fd < 1024:
            readable = bool(select.select((fd,), (), (), seconds)[0])
        else:  # pragma: no cover - a daemon holds few descriptors
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            readable = bool(poller.poll(seconds * 1000.0))
        self._saw([(fd, select.POLLIN)] if readable else [])
        return self.woken

    def _saw(self, ready: list) -> None:
        fd = self._wake_fd
        if any(entry[0] == fd for entry in ready):
            self.woken, self.wake_quiet, self._wake_fd = True, False, -1
            if self._poller is not None:
                self._poller.unregister(fd)
                if self._fd < 0:
                    self._poller = None
        else:
            self.wake_quiet = True

    def drain(self) -> bool:
        """Consume every queued event without blocking; True if one concerned us. A directory
        that went away or was replaced is watched again (as far as it exists)."""
        return self.take(refresh=True)

    def take(self, refresh: bool = False) -> bool:
        """Read the queued events (one non-blocking `read`) into `modified` / `everything`; True
        if one concerned a followed file or directory. A watch that went away is made again
        here when `refresh`, otherwise by the next `refresh()` (the caller's, when `everything`)."""
        if self._inotify is None:
            return False
        try:
            data = os.read(self._fd, _READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return False
        relevant = self._handle(data)
        if len(data) > _READ_BYTES - _EVENT_MAX:  # the buffer may have been too small: read on
            relevant = self.take() or relevant
        if refresh and self._stale:
            self.refresh()
        return relevant

    def refresh(self) -> None:
        """(Re)watch directories that appeared or were replaced; drop watches on vanished ones."""
        self._stale = False
        if self._inotify is None:
            return
        complete = True
        for directory in self._paths:
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
        if self._inotify is not None:
            self._inotify.close()  # removes every watch with it
        self._inotify, self._poller, self.complete, self._wake_fd = None, None, False, -1
        self._watches.clear()
        self._directories_of.clear()
        self._paths_of.clear()

    # --- internals --------------------------------------------------------------------------

    def _handle(self, data: bytes) -> bool:
        relevant = False
        position, end, unpack = 0, len(data), _EVENT.unpack_from
        while position < end:
            wd, mask, _cookie, size = unpack(data, position)
            start = position + _EVENT.size
            position = start + size
            name = data[start:position].rstrip(b"\0")
            if mask & _OVERFLOW:
                self.everything = relevant = True  # events were lost: look at everything
                continue
            directories = self._paths_of.get(wd, ())
            if mask & _GONE and directories:
                self._stale = self.everything = relevant = True
                if mask & _IGNORED:  # the kernel dropped the watch already
                    for directory in self._directories_of.pop(wd):
                        self._watches.pop(directory, None)
                    self._paths_of.pop(wd, None)
                continue
            for paths in directories:
                path = paths.get(name)
                if path is None:
                    continue
                relevant = True
                if mask == _MODIFY:
                    self.modified.add(path)
                else:
                    # A followed file created, renamed or deleted: check the directories too (an
                    # open file in a deleted directory keeps it alive, so no IN_DELETE_SELF comes).
                    self._stale = self.everything = True
        return relevant

    def _watch(self, directory: str, identity: tuple[int, int]) -> bool:
        # Stat first, watch second: if the directory is replaced in between, the next refresh
        # sees the identity differ and watches again.
        try:
            wd = self._inotify.add_watch(directory, WATCH_MASK)
        except OSError as error:  # ENOSPC: fs.inotify.max_user_watches reached; ENOENT: gone again
            if directory not in self._failed:
                log.warning("log_watch_failed", directory=directory, error=error.strerror or str(error))
                self._failed.add(directory)
            return False
        self._failed.discard(directory)
        self._watches[directory] = (wd, identity)
        self._directories_of.setdefault(wd, set()).add(directory)
        self._paths_of[wd] = [self._paths[d] for d in self._directories_of[wd]]
        return True

    def _unwatch(self, directory: str) -> None:
        wd, _ = self._watches.pop(directory)
        sharing = self._directories_of.get(wd, set())
        sharing.discard(directory)
        self._paths_of[wd] = [self._paths[d] for d in sharing]
        if not sharing:
            self._directories_of.pop(wd, None)
            self._paths_of.pop(wd, None)
            try:
                self._inotify.rm_watch(wd)
            except OSError:
                pass  # EINVAL when the kernel dropped it already: fine


def _open_instance():
    if INotify is None:
        log.warning("log_watch_unavailable", error=_IMPORT_ERROR)
        return None
    try:
        # IN_CLOEXEC keeps the descriptor out of the service; non-blocking for the drain.
        return INotify(inheritable=False, nonblocking=True)
    except OSError as error:  # EMFILE: fs.inotify.max_user_instances reached (128 per user by default)
        log.warning("log_watch_unavailable", error=error.strerror or str(error))
        return None


def _identity(directory: str) -> tuple[int, int] | None:
    try:
        status = os.stat(directory)
    except OSError:
        return None
    return status.st_dev, status.st_ino
