"""The fault harness: hostile files, hostile services, hostile HTTP answers, killed and doubled
daemons. Each maker puts one break in place and returns what a test needs to check its effect;
the tests in this folder parametrise over them, one case per break of issue 16.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import fast_service
from fault_harness import DaemonProcess, kill_service_sessions  # noqa: F401  (re-exported)
from supervision_helpers import free_port, wait_for

NOBODY = 65534  # a real uid that is neither root nor the test's user


# ---- hostile files -------------------------------------------------------------------------

@dataclass
class PlantedFile:
    """A log path replaced by something hostile; `outside` is what must stay untouched."""

    path: Path
    outside: Path | None
    outside_bytes: bytes | None


def symlink_out(log_path: Path, outside_dir: Path) -> PlantedFile:
    """The log path is a symlink to a file outside the log dir (e.g. /etc/shadow, as root)."""
    outside_dir.mkdir(parents=True, exist_ok=True)
    outside = outside_dir / "precious.conf"
    outside.write_bytes(b"precious bytes that no log rotation may truncate\n" * 100)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if log_path.exists() or log_path.is_symlink():
        log_path.unlink()
    log_path.symlink_to(outside)
    return PlantedFile(log_path, outside, outside.read_bytes())


def fifo(log_path: Path, _outside_dir: Path | None = None) -> PlantedFile:
    """The log path is a FIFO: opening or reading it must neither block nor spin."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if log_path.exists() or log_path.is_symlink():
        log_path.unlink()
    os.mkfifo(log_path)
    return PlantedFile(log_path, None, None)


HOSTILE_LOG_FILES: dict[str, Callable[[Path, Path], PlantedFile]] = {"symlink-out": symlink_out, "fifo": fifo}


def world_writable(path: Path) -> Path:
    os.chmod(path, stat.S_IMODE(path.stat().st_mode) | stat.S_IWOTH)
    return path


def foreign_owned(path: Path) -> Path:
    """Owned by another ordinary user (needs root): that user could edit what ddtreed runs."""
    os.chown(path, NOBODY, -1)
    return path


# ---- hostile services and daemons ------------------------------------------------------------

def service_config(directory: Path, **options) -> Path:
    """A fast SGLang-shaped service under ddtreed (tests/programs/fast_service.py)."""
    return fast_service.write_config(directory, port=free_port(), **options)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """`python -m ddtreed ARGS` as a user runs it: exit code, stdout, stderr."""
    repo = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "ddtreed", *args], cwd=repo, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


class ReadOnlyMount:
    """`directory` made read-only as a read-only site-packages is (a bind mount remounted ro):
    root's writes fail with EROFS, unlike chmod, which root ignores. Needs root and mount(8)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.mounted = False

    def __enter__(self) -> ReadOnlyMount:
        for argv in (["mount", "--bind", str(self.directory), str(self.directory)],
                     ["mount", "-o", "remount,bind,ro", str(self.directory)]):
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                self.__exit__()
                raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")
            self.mounted = True
        return self

    def __exit__(self, *exc_info) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.directory)], capture_output=True, check=False)
            self.mounted = False


def read_only_mount_works(scratch: Path) -> bool:
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        with ReadOnlyMount(scratch):
            try:
                (scratch / "probe").write_text("x")
            except OSError:
                return True
            return False
    except OSError:
        return False


# ---- hostile HTTP answers ----------------------------------------------------------------------

class HostileHTTP:
    """A service endpoint that answers every request with one hostile response (`mode`):

    meta-not-a-dict  a 200 whose meta_info is a list
    deep-json        a 200 of 100,000 nested lists (RecursionError in a naive json.loads)
    huge-body        a 200 that streams `huge_bytes` of JSON-looking bytes
    trickle          a 200 that sends one byte per second (a per-read timeout never fires)

    `sent` counts the body bytes the client accepted before it hung up.
    """

    MODES = ("meta-not-a-dict", "deep-json", "huge-body", "trickle")

    def __init__(self, mode: str, huge_bytes: int = 256 * 1024 * 1024):
        import socket
        import threading

        assert mode in self.MODES, mode
        self.mode, self.huge_bytes, self.sent = mode, huge_bytes, 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import threading

        self._listener.settimeout(0.2)
        while not self._stopping.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection) -> None:
        import time as clock

        with connection:
            connection.settimeout(5)
            try:
                connection.recv(65536)
                if self.mode == "meta-not-a-dict":
                    self._send(connection, b'{"text": "Paris", "meta_info": [1, 2, 3]}')
                elif self.mode == "deep-json":
                    self._send(connection, b"[" * 100_000 + b"]" * 100_000)
                elif self.mode == "huge-body":
                    header = f"HTTP/1.1 200 OK\r\nContent-Length: {self.huge_bytes}\r\n\r\n".encode()
                    connection.sendall(header)
                    block = b'{"text": "' + b"x" * (1 << 20)
                    while self.sent < self.huge_bytes and not self._stopping.is_set():
                        piece = block[: self.huge_bytes - self.sent]
                        connection.sendall(piece)
                        self.sent += len(piece)
                else:  # trickle: a valid, slow body
                    body = b'{"text": "Paris", "meta_info": {"completion_tokens": 1}}' + b" " * 600
                    connection.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
                    for index in range(len(body)):
                        if self._stopping.is_set():
                            return
                        connection.sendall(body[index:index + 1])
                        self.sent += 1
                        clock.sleep(1.0)
            except OSError:
                return  # the client hung up: what it took is in `sent`

    def _send(self, connection, body: bytes) -> None:
        connection.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.sent += len(body)

    def close(self) -> None:
        self._stopping.set()
        self._listener.close()

    def __enter__(self) -> HostileHTTP:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# ---- doubled daemons ---------------------------------------------------------------------------

def doubled_daemons(config: Path, directory: Path) -> tuple[DaemonProcess, DaemonProcess]:
    """A second `ddtreed run` on the state dir of a first one that already serves (a mistaken unit)."""
    from ddtreed.ops.status import read_status

    state_dir = directory / "state"
    first = DaemonProcess(config, directory / "daemon1.jsonl")
    wait_for(lambda: (read_status(state_dir) is not None and read_status(state_dir).pid == first.pid
                      and read_status(state_dir).state == "running"), 60, what="the first daemon to serve")
    return first, DaemonProcess(config, directory / "daemon2.jsonl")
