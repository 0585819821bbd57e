"""`SshHost`: the `Host` seam (ddtreed/service/host.py) over SSH, so the daemon supervises a remote service."""

from __future__ import annotations

import os
import posixpath
import secrets
import shlex
import signal
import time

import structlog

from ..service.host import CommandResult
from ..records import ExitStatus
from ..service.rotation import kind_of_mode, rotate
from . import remote_procs
from .remote_follower import RemoteFollower
from .inventory import HostEntry
from .ssh import REMOTE_FAILED, Connection, FleetError
from .tunnel import Tunnel

log = structlog.get_logger(__name__)

SWEEP_WAIT_S = 3.0  # SIGKILL takes effect at once; this covers scheduling latency
POLL_TIMEOUT_S = 15.0  # one status round trip; a host slower than this is treated as unreachable

# A wrapper in its own session starts the service in another new session (so the service's process
# group is its pid), prints that pid, and records the wait status when it ends. The wrapper is not
# in the service's group, so TERM/KILL to the group leave it alive to write the status.
_WRAPPER = (
    'setsid "$@" >>"$DDTREED_OUT" 2>>"$DDTREED_ERR" </dev/null & child=$!; echo "$child"; '
    'exec >/dev/null 2>&1 </dev/null; wait "$child"; echo "$?" >"$DDTREED_STATUS.tmp"; '
    'mv -f "$DDTREED_STATUS.tmp" "$DDTREED_STATUS"'
)


class RemoteProcess:
    """A service started by SshHost.spawn; poll() reads the wrapper's status file or `kill -0`."""

    def __init__(self, host: "SshHost", pid: int, status_path: str):
        self._host = host
        self.pid = pid
        self._status_path = status_path
        self._status: ExitStatus | None = None
        self._gone_since: float | None = None

    def poll(self) -> ExitStatus | None:
        if self._status is not None:
            return self._status
        script = f'cat -- {shlex.quote(self._status_path)} 2>/dev/null || ' \
                 f'{{ kill -0 {self.pid} 2>/dev/null && echo running || echo gone; }}'
        text = self._host.run(["sh", "-c", script], POLL_TIMEOUT_S).stdout.strip()
        if text.lstrip("-").isdigit():
            self._status = _decode_shell_status(int(text))
            self._host.remove(self._status_path)
            return self._status
        if text == "gone":
            return self._vanished()
        self._gone_since = None
        return None

    def _vanished(self) -> ExitStatus | None:
        """No process and no status yet: the wrapper writes it a moment after the exit; wait a little."""
        now = time.monotonic()
        self._gone_since = self._gone_since or now
        if now - self._gone_since < 5.0:
            return None
        log.warning("fleet.remote_status_lost", host=self._host.name, pid=self.pid)
        self._status = ExitStatus(code=None, signal=None)
        return self._status

    def signal_group(self, signum: int) -> bool:
        """Signal the remote process group; False when it is already gone."""
        name = signal.Signals(signum).name.removeprefix("SIG")
        return self._host.run(["kill", "-s", name, "--", f"-{self.pid}"], POLL_TIMEOUT_S).returncode == 0

    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.poll()
            if status is not None or (deadline is not None and time.monotonic() >= deadline):
                return status
            time.sleep(0.1)  # each poll is a round trip; this bounds the rate, not a fixed wait


def _decode_shell_status(value: int) -> ExitStatus:
    """`$?` from `wait`: 128+N means signal N (the shell cannot tell it from exit code 128+N)."""
    if 128 < value < 128 + 65:
        return ExitStatus(code=None, signal=value - 128)
    return ExitStatus(code=value, signal=None)


class SshHost:
    """The service's host reached over SSH; one connection, re-established when it drops."""

    local = False

    def __init__(self, entry: HostEntry, accept_new: bool = False):
        self.name = entry.name
        self.entry = entry
        self._connection = Connection(entry, accept_new)
        self._tunnels: dict[tuple[str, int], Tunnel] = {}

    def __enter__(self) -> "SshHost":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        for tunnel in self._tunnels.values():
            tunnel.close()
        self._tunnels.clear()
        self._connection.close()

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str | None,
              stdout_path: str, stderr_path: str) -> RemoteProcess:
        status_path = posixpath.join(posixpath.dirname(stdout_path) or ".",
                                     f".ddtreed-exit-{secrets.token_hex(6)}")
        files = {"DDTREED_OUT": stdout_path, "DDTREED_ERR": stderr_path, "DDTREED_STATUS": status_path}
        command = ["env", *_env_assignments({**_remote_env(env), **files}), "setsid", "sh", "-c",
                   _WRAPPER, "sh", *argv]
        line = shlex.join(command) + " &"
        if cwd:
            line = f"cd {shlex.quote(cwd)} && {line}"
        result = self._exec_line(line)
        pid_text = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        if result.returncode != 0 or not pid_text.isdigit():
            raise FleetError(REMOTE_FAILED, f"spawn {argv[0]} failed ({result.returncode}): "
                             f"{result.stderr.strip()[-300:]}", exit_code=result.returncode)
        # Values may hold tokens: log the env keys only.
        log.info("fleet.spawned", host=self.name, pid=int(pid_text), program=argv[0],
                 env_keys=sorted(_remote_env(env)))
        return RemoteProcess(self, int(pid_text), status_path)

    def _exec_line(self, line: str, timeout: float = POLL_TIMEOUT_S) -> CommandResult:
        """A shell line assembled only from shlex-quoted parts (plus fixed operators like `&&`)."""
        return self.run(["sh", "-c", line], timeout)

    def run(self, argv: list[str], timeout: float) -> CommandResult:
        return self._connection.run(argv, timeout)

    def read_bytes(self, path: str) -> bytes:
        with self._connection.sftp().open(path, "rb") as handle:
            return handle.read()

    def write_atomic(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Temp file in the same directory, synced, chmod, posix_rename, directory synced."""
        sftp = self._connection.sftp()
        directory = posixpath.dirname(path) or "."
        if mode is None:
            try:
                mode = (sftp.stat(path).st_mode or 0o644) & 0o7777
            except FileNotFoundError:
                mode = 0o644
        temp = posixpath.join(directory, f".ddtreed-{secrets.token_hex(6)}")
        try:
            with sftp.open(temp, "wb") as handle:
                handle.write(data)
            sftp.chmod(temp, mode)
            self.checked_run(["sync", "--", temp])
            sftp.posix_rename(temp, path)
        except BaseException:
            self.remove(temp)
            raise
        self.checked_run(["sync", "--", directory])

    def checked_run(self, argv: list[str]) -> CommandResult:
        result = self.run(argv, POLL_TIMEOUT_S)
        if result.returncode != 0:
            raise OSError(f"{self.name}: {shlex.join(argv)} exited {result.returncode}: "
                          f"{result.stderr.strip()[-200:]}")
        return result

    def exists(self, path: str) -> bool:
        try:
            self._connection.sftp().lstat(path)
            return True
        except FileNotFoundError:
            return False

    def realpath(self, path: str) -> str:
        return self.checked_run(["realpath", "-m", "--", path]).stdout.strip()

    def remove(self, path: str) -> None:
        try:
            self._connection.sftp().remove(path)
        except FileNotFoundError:
            pass

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        self.checked_run(["mkdir", "-p", "-m", format(mode, "o"), "--", path])

    def port_in_use(self, address: str, port: int) -> bool:
        """Listening or bound sockets on that port per `ss`; a connect through the tunnel when ss is missing."""
        result = self.run(["ss", "-Htan", f"sport = :{port}"], POLL_TIMEOUT_S)
        if result.returncode == 0:
            return any(line.split()[0] != "TIME-WAIT" for line in result.stdout.splitlines() if line.split())
        try:
            channel = self._connection.client().get_transport().open_channel(
                "direct-tcpip", (address or "127.0.0.1", port), ("127.0.0.1", 0), timeout=5.0)
        except Exception:  # paramiko raises ChannelException/SSHException for a refused port
            return False
        channel.close()
        return True

    def sweep_session(self, session_id: int, name_patterns: tuple[str, ...],
                      token: str | None = None) -> list[int]:
        """SIGKILL survivors: in the session, or named like its children and descended from it or
        carrying its environment token; wait until they are gone; return their pids."""
        rows = remote_procs.parse_ps(self.run(remote_procs.PS_ARGV, POLL_TIMEOUT_S))
        victims, undecided = remote_procs.sweep_candidates(rows, session_id, name_patterns)
        if token is not None:
            victims |= {pid for pid in undecided if remote_procs.carries_token(self._environ(pid), token)}
        victims.discard(0)
        if not victims:
            return []
        self.run(["kill", "-s", "KILL", "--", *map(str, sorted(victims))], POLL_TIMEOUT_S)
        self._wait_gone(victims)
        log.warning("fleet.swept", host=self.name, session=session_id, pids=sorted(victims))
        return sorted(victims)

    def _environ(self, pid: int) -> bytes:
        try:
            return self.read_bytes(f"/proc/{pid}/environ")
        except OSError:  # gone, or not ours to read
            return b""

    def _wait_gone(self, pids: set[int]) -> None:
        deadline = time.monotonic() + SWEEP_WAIT_S
        while time.monotonic() < deadline:
            rows = remote_procs.parse_ps(self.run(remote_procs.PS_ARGV, POLL_TIMEOUT_S))
            if not any(row.pid in pids and not row.zombie for row in rows):
                return
            time.sleep(0.05)  # poll interval: each check is a round trip
        log.error("fleet.sweep_survivor", host=self.name, pids=sorted(pids),
                  hint="process survived SIGKILL (uninterruptible sleep in a driver?)")

    def token_holders(self, token: str) -> list[int]:
        rows = remote_procs.parse_ps(self.run(remote_procs.PS_ARGV, POLL_TIMEOUT_S))
        return sorted(row.pid for row in rows if not row.zombie and row.pid > 0
                      and remote_procs.carries_token(self._environ(row.pid), token))

    def leftover_tokens(self, state_dir: str, port: int | None) -> set[str]:
        """Tokens of processes whose environment names this state dir (the port is not checked)."""
        from ..service._proctree import STATE_DIR_VARIABLE, TOKEN_VARIABLE

        marker = f"{STATE_DIR_VARIABLE}={state_dir}".encode()
        tokens = set()
        for row in remote_procs.parse_ps(self.run(remote_procs.PS_ARGV, POLL_TIMEOUT_S)):
            items = [] if row.zombie else self._environ(row.pid).split(b"\0")
            if marker in items:
                tokens |= {item.split(b"=", 1)[1].decode("ascii", "replace") for item in items
                           if item.startswith(TOKEN_VARIABLE.encode() + b"=")}
        return tokens

    def sweep_token(self, token: str, name_patterns: tuple[str, ...]) -> list[int]:
        rows = remote_procs.parse_ps(self.run(remote_procs.PS_ARGV, POLL_TIMEOUT_S))
        sessions = {row.sid for row in rows if row.pid in set(self.token_holders(token)) and row.sid > 0}
        return sorted({pid for sid in sessions for pid in self.sweep_session(sid, name_patterns, token)})

    def session_pids(self, session_id: int) -> list[int]:
        rows = remote_procs.parse_ps(self.run(remote_procs.PS_ARGV, POLL_TIMEOUT_S))
        return remote_procs.session_pids(rows, session_id)

    def rotate_file(self, path: str, backups: int, over_bytes: int | None = None,
                    copy_truncate: bool = False) -> bool:
        """path -> path.1 -> … -> path.N over SFTP (ddtreed/service/rotation.py has the algorithm)."""
        return rotate(_SftpFiles(self), path, backups, over_bytes, copy_truncate)

    def gpu_holders(self, pids: list[int] | None = None) -> list[int]:
        result = self.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], POLL_TIMEOUT_S)
        if result.returncode != 0:
            return []  # no nvidia-smi (127) or no driver: nothing we can see holds a GPU
        holders = sorted({int(line) for line in result.stdout.split() if line.strip().isdigit()})
        return [pid for pid in holders if pids is None or pid in pids]

    def open_follower(self, paths: list[str]) -> RemoteFollower:
        return RemoteFollower(self._connection, paths)

    def http_base_url(self, address: str, port: int) -> str:
        key = (address or "127.0.0.1", port)
        tunnel = self._tunnels.get(key)
        if tunnel is None or tunnel.closed:
            tunnel = self._tunnels[key] = Tunnel(self._connection, *key)
        return f"http://127.0.0.1:{tunnel.local_port}"


def _remote_env(env: dict[str, str]) -> dict[str, str]:
    """Only what the caller set on purpose: values inherited from this process's own environment
    describe this machine (PATH, HOME, SSH_AUTH_SOCK…), not the remote host."""
    return {key: value for key, value in env.items() if os.environ.get(key) != value}


def _env_assignments(env: dict[str, str]) -> list[str]:
    return [f"{key}={value}" for key, value in sorted(env.items()) if key and "=" not in key]


class _SftpFiles:
    """The rotation's file operations on the remote host: SFTP, and `cp` for the copy."""

    def __init__(self, host: SshHost):
        self._host = host
        self._sftp = host._connection.sftp()

    def kind(self, path: str) -> tuple[str, int, int] | None:
        try:
            info = self._sftp.lstat(path)  # the entry itself: a planted link is not followed
        except FileNotFoundError:
            return None
        return kind_of_mode(info.st_mode or 0), info.st_size or 0, hash((path, info.st_mtime, info.st_size))

    def exists(self, path: str) -> bool:
        return self._host.exists(path)

    def rename(self, source: str, target: str) -> None:
        self._sftp.posix_rename(source, target)

    def copy(self, source: str, target: str) -> None:
        self._host.checked_run(["cp", "--", source, target])

    def truncate(self, path: str) -> None:
        self._sftp.truncate(path, 0)

    def remove(self, path: str) -> None:
        self._sftp.remove(path)
