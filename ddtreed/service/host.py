"""The seam between the daemon and the machine the service runs on.

Every OS edge that touches the service's host (spawn, signal, files outside the state dir,
probing commands) goes through a `Host`. `LocalHost` is this machine; the fleet layer provides
an SSH-backed host with the same methods, so the daemon has one code path for both.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..records import ExitStatus


def decode_wait_status(returncode: int) -> ExitStatus:
    """subprocess' returncode (negative = signal) as an ExitStatus."""
    if returncode < 0:
        return ExitStatus(code=None, signal=-returncode)
    return ExitStatus(code=returncode, signal=None)


class Process(Protocol):
    pid: int

    def poll(self) -> ExitStatus | None: ...

    def signal_group(self, signum: int) -> bool: ...

    def wait(self, timeout: float | None = None) -> ExitStatus | None: ...


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


class Host(Protocol):
    """Capabilities, never identities: code asks `host.local`, it does not compare names or types."""

    name: str
    local: bool  # True: this machine (its files and processes are ours to read directly)

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str | None,
              stdout_path: str, stderr_path: str) -> Process: ...

    def run(self, argv: list[str], timeout: float) -> CommandResult: ...

    def read_bytes(self, path: str) -> bytes: ...

    def write_atomic(self, path: str, data: bytes, mode: int | None = None) -> None: ...

    def exists(self, path: str) -> bool: ...

    def realpath(self, path: str) -> str: ...

    def remove(self, path: str) -> None: ...

    def makedirs(self, path: str, mode: int = 0o755) -> None: ...

    def port_in_use(self, address: str, port: int) -> bool: ...

    def sweep_session(self, session_id: int, name_patterns: tuple[str, ...],
                      token: str | None = None) -> list[int]:
        """SIGKILL what survives of a service tree: processes in its session, or named like its
        children (e.g. `sglang::scheduler*`) and descended from it (or carrying the service's
        environment `token`, which survives re-parenting); return the pids killed."""
        ...

    def session_pids(self, session_id: int) -> list[int]:
        """Live (not zombie) processes of this session."""
        ...

    def rotate_file(self, path: str, backups: int, over_bytes: int | None = None,
                    copy_truncate: bool = False) -> bool:
        """Shift path -> path.1 -> ... path.N (only when larger than over_bytes, if given)."""
        ...

    def gpu_holders(self, pids: list[int] | None = None) -> list[int]:
        """Pids holding a GPU (NVML), limited to `pids` when given; [] where NVML is absent."""
        ...

    def open_follower(self, paths: list[str]) -> "FollowerLike":
        """Follow these log files on this host (local: watchdog; SSH: a tail channel)."""
        ...

    def http_base_url(self, address: str, port: int) -> str:
        """A URL this process can reach the service at (SSH: through a tunnel)."""
        ...

    def token_holders(self, token: str) -> list[int]:
        """Live processes whose environment carries the service token (a leftover service tree)."""
        ...

    def leftover_tokens(self, state_dir: str, port: int | None) -> set[str]:
        """Tokens of service trees a dead ddtreed left: processes with a service token whose
        environment names `state_dir`, or that hold `port` (found without the previous record)."""
        ...

    def sweep_token(self, token: str, name_patterns: tuple[str, ...]) -> list[int]:
        """SIGKILL every process carrying `token` and the rest of their sessions; the pids killed."""
        ...

    def close(self) -> None:
        """Release what the host holds (an SSH connection and its tunnels); idempotent."""
        ...


class FollowerLike(Protocol):
    def read(self) -> list: ...  # list[LogChunk]

    def wait(self, timeout: float) -> bool: ...

    def close(self) -> None: ...


class LocalProcess:
    """A child started in its own session, so the whole service tree is one process group."""

    def __init__(self, popen: subprocess.Popen[bytes]):
        self._popen = popen
        self.pid = popen.pid
        self.polls = 0  # waitpid calls by `poll` (tests: none per turn while a pidfd says it runs)
        # A pidfd of the child (readable once it exits): the follower's waits poll it, sparing a
        # waitpid per loop turn. Opened before the child is reaped, so the pid is still ours.
        # None where pidfd_open is missing (Linux < 5.3, another OS, seccomp): poll every turn.
        self.pidfd: int | None = None
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                self.pidfd = pidfd_open(popen.pid)  # close-on-exec, as every pidfd
            except OSError:
                self.pidfd = None

    def poll(self) -> ExitStatus | None:
        self.polls += 1
        code = self._popen.poll()
        return None if code is None else decode_wait_status(code)

    def close_pidfd(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def __del__(self) -> None:
        self.close_pidfd()

    def signal_group(self, signum: int) -> bool:
        """Signal the process group; False when it is already gone."""
        try:
            os.killpg(self.pid, signum)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return False

    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        try:
            return decode_wait_status(self._popen.wait(timeout))
        except subprocess.TimeoutExpired:
            return None


class LocalHost:
    name = "localhost"
    local = True

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str | None,
              stdout_path: str, stderr_path: str) -> LocalProcess:
        from .rotation import open_log_for_append  # O_NOFOLLOW: never appends through a planted link

        with open_log_for_append(stdout_path) as out, open_log_for_append(stderr_path) as err:
            popen = subprocess.Popen(
                argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True, close_fds=True,
            )
        return LocalProcess(popen)

    def run(self, argv: list[str], timeout: float) -> CommandResult:
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout, text=True,
                                  stdin=subprocess.DEVNULL, errors="replace")
        except FileNotFoundError as error:
            return CommandResult(127, "", f"{argv[0]}: {error.strerror}")
        except subprocess.TimeoutExpired:
            return CommandResult(124, "", f"{argv[0]}: timed out after {timeout:.0f}s")
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def read_bytes(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def write_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        write_atomic(path, data, mode)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        os.makedirs(path, mode=mode, exist_ok=True)

    def port_in_use(self, address: str, port: int) -> bool:
        return port_in_use(address, port)

    def sweep_session(self, session_id: int, name_patterns: tuple[str, ...],
                      token: str | None = None) -> list[int]:
        from . import _proctree

        return _proctree.sweep(session_id, name_patterns, token)

    def session_pids(self, session_id: int) -> list[int]:
        from . import _proctree

        return _proctree.session_pids(session_id)

    def gpu_holders(self, pids: list[int] | None = None) -> list[int]:
        from . import _proctree

        return _proctree.gpu_holders(pids)

    def rotate_file(self, path: str, backups: int, over_bytes: int | None = None,
                    copy_truncate: bool = False) -> bool:
        from . import _proctree
        from .rotation import rotate

        return rotate(_proctree.LocalFiles, path, backups, over_bytes, copy_truncate)

    def open_follower(self, paths: list[str]) -> "FollowerLike":
        from ..logs import Follower  # lazily: the follower pulls in watchdog

        return Follower(list(paths))

    def http_base_url(self, address: str, port: int) -> str:
        return http_base_url(address, port)

    def token_holders(self, token: str) -> list[int]:
        from . import _proctree

        return _proctree.token_holders(token)

    def leftover_tokens(self, state_dir: str, port: int | None) -> set[str]:
        from . import _proctree

        return _proctree.leftover_tokens(state_dir, port)

    def sweep_token(self, token: str, name_patterns: tuple[str, ...]) -> list[int]:
        from . import _proctree

        return _proctree.sweep_token(token, name_patterns)

    def close(self) -> None:
        return None


def write_atomic(path: str, data: bytes, mode: int | None = None, durable: bool = True) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory: old or new, never half.

    `durable=False` skips both fsyncs: still never half, but after a power cut the file may hold
    the previous content (for snapshots that are rewritten all the time, not for records)."""
    directory = os.path.dirname(os.path.abspath(path))
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    fd, temp = tempfile.mkstemp(prefix=".ddtreed-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    if not durable:
        return
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def port_in_use(address: str, port: int) -> bool:
    """True when something accepts or holds the TCP port (bind test, then connect test)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0" if address in ("", "0.0.0.0") else address, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def http_base_url(address: str, port: int) -> str:
    """`http://address:port`; a wildcard listen address is reached on loopback."""
    if address in ("", "0.0.0.0"):
        address = "127.0.0.1"
    elif address == "::":
        address = "::1"
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"http://{address}:{port}"
