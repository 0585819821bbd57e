"""Follow remote log files over an SSH channel running `tail -F`, handing out LogChunk batches."""

from __future__ import annotations

import shlex
import threading
import time

import structlog

from ..records import LogChunk
from .ssh import Connection

log = structlog.get_logger(__name__)

READY_TIMEOUT_S = 10.0  # how long open waits for tail to report every file (header or error)
RECONNECT_DELAY_S = 1.0  # between attempts after the connection drops; lines written meanwhile are missed


class RemoteFollower:
    """`tail -v -n 0 -F` on the remote host; its `==> path <==` headers say which file a line is from."""

    def __init__(self, connection: Connection, paths: list[str], max_line_bytes: int = 65536):
        self._connection = connection
        self._paths = list(paths)
        self._headers = {f"==> {path} <==".encode(): path for path in self._paths}
        self._max_line_bytes = max_line_bytes
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._ready = threading.Event()
        self._closed = threading.Event()
        self._pending: list[tuple[str, str]] = []
        self._numbers = {path: 0 for path in self._paths}
        self._channel = None
        self._thread = threading.Thread(target=self._pump, name="ssh-follower", daemon=True)
        self._thread.start()
        self._ready.wait(READY_TIMEOUT_S)

    def read(self) -> list[LogChunk]:
        """All complete lines received since the last call, one chunk per run of lines from one file."""
        with self._lock:
            pending, self._pending = self._pending, []
            self._changed.clear()
        now = time.time()
        chunks: list[LogChunk] = []
        for source, text in pending:
            self._numbers[source] += 1
            if chunks and chunks[-1].source == source:
                last = chunks[-1]
                chunks[-1] = LogChunk(source, last.first_number, last.lines + (text,), now)
            else:
                chunks.append(LogChunk(source, self._numbers[source], (text,), now))
        return chunks

    def wait(self, timeout: float) -> bool:
        return self._changed.wait(timeout)

    def close(self) -> None:
        self._closed.set()
        channel = self._channel
        if channel is not None:
            channel.close()
        self._thread.join(timeout=5.0)

    def _pump(self) -> None:
        while not self._closed.is_set():
            try:
                self._follow_once()
            except Exception as error:  # a dropped connection: retry until closed
                log.warning("fleet.follower_lost", host=self._connection.entry.name,
                            error_type=type(error).__name__, error=str(error))
            if not self._closed.wait(RECONNECT_DELAY_S):
                continue

    def _follow_once(self) -> None:
        command = shlex.join(["tail", "-v", "-n", "0", "-F", "--", *self._paths])
        transport = self._connection.client().get_transport()
        with transport.open_session(timeout=10.0) as channel:
            self._channel = channel
            channel.exec_command(command)
            channel.settimeout(0.5)
            self._read_channel(channel)

    def _read_channel(self, channel) -> None:
        buffer, source, reported, held_blank = bytearray(), self._paths[0], set(), False
        while not self._closed.is_set() and not channel.closed:
            data = self._recv(channel, reported)
            if data is None:
                if channel.exit_status_ready() and not channel.recv_ready():
                    return
                continue
            buffer += data
            while True:
                newline = buffer.find(b"\n")
                if newline < 0:
                    del buffer[self._max_line_bytes:]  # overlong line: keep its head, drop the rest
                    break
                raw, buffer = bytes(buffer[:newline]), buffer[newline + 1:]
                if raw in self._headers:
                    # tail prints a blank line before each header after the first: not log content.
                    source, held_blank = self._headers[raw], False
                    reported.add(source)
                    self._mark_ready(reported)
                    continue
                if held_blank:
                    self._push(source, b"")
                held_blank = raw == b""
                if not held_blank:
                    self._push(source, raw)

    def _recv(self, channel, reported: set[str]) -> bytes | None:
        """stdout bytes, or None after a quiet moment; stderr (`cannot open`) counts as reported."""
        while channel.recv_stderr_ready():
            for line in channel.recv_stderr(65536).decode("utf-8", "replace").splitlines():
                reported.update(path for path in self._paths if f"'{path}'" in line or f" {path}:" in line)
                log.debug("fleet.follower_tail_stderr", host=self._connection.entry.name, line=line)
            self._mark_ready(reported)
        try:
            data = channel.recv(65536)
        except TimeoutError:
            return None
        if not data:
            channel.close()
            return None
        return data

    def _mark_ready(self, reported: set[str]) -> None:
        if reported.issuperset(self._paths):
            self._ready.set()

    def _push(self, source: str, raw: bytes) -> None:
        text = raw[: self._max_line_bytes].decode("utf-8", "replace").rstrip("\r")
        with self._lock:
            self._pending.append((source, text))
            self._changed.set()
