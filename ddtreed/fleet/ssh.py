"""SSH connections for the fleet: ~/.ssh/config, agent, ProxyJump, strict host keys, quoted exec."""

from __future__ import annotations

import os
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass

import paramiko
import structlog

from ..host import CommandResult
from .inventory import HostEntry

log = structlog.get_logger(__name__)

# The reasons a host can fail with; `error` in --json is exactly one of these.
UNREACHABLE = "unreachable"
AUTH_FAILED = "auth failed"
HOST_KEY_MISMATCH = "host key mismatch"
UNKNOWN_HOST_KEY = "unknown host key"
REMOTE_FAILED = "remote command failed"
TIMEOUT = "timeout"

_KNOWN_HOSTS_LOCK = threading.Lock()  # accept-new appends from many worker threads


class FleetError(OSError):
    """A per-host failure: `reason` is one of the constants above, `detail` says what happened.

    An OSError, so code written against LocalHost (which raises OSError) handles SshHost failures too.
    """

    def __init__(self, reason: str, detail: str, exit_code: int | None = None, result: object = None):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.exit_code = exit_code
        self.result = result  # what the remote printed as JSON before failing, if anything


@dataclass(frozen=True)
class Target:
    """Where and as whom to connect, after ~/.ssh/config and the inventory are merged."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    proxy_jump: str | None


def resolve(entry: HostEntry, hop: str | None = None) -> Target:
    """Per-host inventory keys win, then ~/.ssh/config, then inventory [defaults], then ssh's own.

    `hop` is a ProxyJump spec (`user@host:port`): the inventory's per-host keys don't apply to it.
    """
    alias = hop or entry.address
    user, host, port = _strip_user_port(alias)
    found = _ssh_config(entry.ssh_config).lookup(host)
    explicit = hop is None
    identity = entry.identity_file if explicit else None
    return Target(
        alias=alias,
        hostname=found.get("hostname", host),
        port=int((entry.port if explicit else None) or port or found.get("port") or entry.default_port or 22),
        user=(entry.user if explicit else None) or user or found.get("user") or entry.default_user
        or _local_user(),
        identity_files=tuple(
            [identity] if identity else found.get("identityfile") or (
                [entry.default_identity_file] if entry.default_identity_file else [])),
        # A hop's own ProxyJump is not followed: chains are written as one comma list.
        proxy_jump=None if not explicit or found.get("proxyjump", "none").lower() == "none"
        else found["proxyjump"],
    )


def _strip_user_port(spec: str) -> tuple[str | None, str, int | None]:
    """`user@host:port` (ProxyJump syntax) into its parts."""
    user, _, rest = spec.rpartition("@")
    host, port = rest, None
    if rest.count(":") == 1:
        host, port_text = rest.split(":")
        port = int(port_text) if port_text.isdigit() else None
    return user or None, host, port


def _ssh_config(path: str) -> paramiko.SSHConfig:
    expanded = os.path.expanduser(path)
    if os.path.isfile(expanded):
        return paramiko.SSHConfig.from_path(expanded)
    return paramiko.SSHConfig()


def _local_user() -> str:
    import getpass

    return getpass.getuser()


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """OpenSSH `accept-new`: record an unknown key; a changed key never reaches this policy."""

    def __init__(self, known_hosts: str):
        self._known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key):
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _KNOWN_HOSTS_LOCK:
            os.makedirs(os.path.dirname(self._known_hosts) or ".", mode=0o700, exist_ok=True)
            descriptor = os.open(self._known_hosts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(descriptor, "a", encoding="utf-8") as handle:
                handle.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)
        log.warning("fleet.host_key_recorded", host=hostname, key_type=key.get_name(),
                 fingerprint=_fingerprint(key), known_hosts=self._known_hosts)


class _Refuse(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client, hostname, key):
        raise FleetError(UNKNOWN_HOST_KEY,
                         f"{hostname} presented {key.get_name()} {_fingerprint(key)}, not in known_hosts "
                         "(verify it, then add it or use --accept-new)")


def _fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint if hasattr(key, "fingerprint") else key.get_name()


def connect(entry: HostEntry, accept_new: bool = False, timeout: float | None = None,
            jumps: list[paramiko.SSHClient] | None = None) -> paramiko.SSHClient:
    """An authenticated SSHClient; raises FleetError with the reason. ProxyJump hops go in `jumps`."""
    target = resolve(entry)
    timeout = min(timeout or entry.connect_timeout_s, entry.connect_timeout_s)
    jumps = [] if jumps is None else jumps
    sock = None
    if target.proxy_jump:
        # Each hop is authenticated and host-key checked like any host; the last one forwards to us.
        hops = [resolve(entry, hop.strip()) for hop in target.proxy_jump.split(",") if hop.strip()]
        for hop, following in zip(hops, hops[1:] + [target]):
            jump = _authenticate(entry, hop, accept_new, timeout, sock)
            jumps.append(jump)
            sock = _open_direct(jump, following, timeout)
    return _authenticate(entry, target, accept_new, timeout, sock)


def _authenticate(entry: HostEntry, target: Target, accept_new: bool, timeout: float,
                  sock: paramiko.Channel | None) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    known_hosts = os.path.expanduser(entry.known_hosts)
    if os.path.isfile(known_hosts):
        client.load_host_keys(known_hosts)
    client.set_missing_host_key_policy(_AcceptNew(known_hosts) if accept_new else _Refuse())
    try:
        client.connect(
            target.hostname, port=target.port, username=target.user,
            key_filename=list(target.identity_files) or None, timeout=timeout,
            banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout, sock=sock,
            allow_agent=bool(os.environ.get("SSH_AUTH_SOCK")), look_for_keys=not target.identity_files,
        )
    except BaseException as error:
        client.close()
        raise _classify(error, target) from None
    log.debug("fleet.connected", host=entry.name, address=target.hostname, port=target.port,
              user=target.user)
    return client


def _open_direct(jump: paramiko.SSHClient, target: Target, timeout: float) -> paramiko.Channel:
    try:
        return jump.get_transport().open_channel(
            "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0), timeout=timeout)
    except (paramiko.SSHException, OSError) as error:
        raise FleetError(UNREACHABLE, f"{target.hostname}:{target.port} via jump host: {error}") from None


def _classify(error: BaseException, target: Target) -> BaseException:
    """Map paramiko/socket exceptions to the fleet's reasons; anything else passes through."""
    where = f"{target.user}@{target.hostname}:{target.port}"
    if isinstance(error, FleetError):
        return error
    if isinstance(error, paramiko.BadHostKeyException):
        return FleetError(HOST_KEY_MISMATCH,
                          f"[{target.hostname}]:{target.port} presented {error.key.get_name()} "
                          f"{_fingerprint(error.key)}, known_hosts has {_fingerprint(error.expected_key)}; "
                          "refused (remove the old key only if the change is expected)")
    if isinstance(error, paramiko.AuthenticationException):
        return FleetError(AUTH_FAILED, f"{where}: {type(error).__name__}: server refused our key(s)")
    if isinstance(error, paramiko.SSHException) and "No authentication methods available" in str(error):
        return FleetError(AUTH_FAILED, f"{where}: no key to offer (no identity file, no agent key)")
    if isinstance(error, (socket.timeout, TimeoutError)):
        return FleetError(UNREACHABLE, f"{where}: no answer within the connect timeout")
    if isinstance(error, (OSError, paramiko.SSHException, EOFError)):
        return FleetError(UNREACHABLE, f"{where}: {type(error).__name__}: {error}")
    return error


def close_all(client: paramiko.SSHClient | None, jumps: list[paramiko.SSHClient]) -> None:
    """Close the client, then its jump hosts innermost first."""
    for each in ([client] if client else []) + list(reversed(jumps)):
        each.close()


def exec_command(client: paramiko.SSHClient, argv: list[str], timeout: float,
                 stdin_data: bytes | None = None, max_output: int = 64 * 1024 * 1024) -> CommandResult:
    """Run argv (joined with shlex.join: quoted arguments only) with a deadline; 124 on timeout."""
    command = shlex.join(argv)
    deadline = time.monotonic() + timeout
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise FleetError(UNREACHABLE, "connection closed")
    with transport.open_session(timeout=timeout) as channel:
        channel.exec_command(command)
        if stdin_data:
            channel.sendall(stdin_data)
        channel.shutdown_write()
        stdout, stderr = _drain(channel, deadline, max_output)
        if not channel.exit_status_ready():
            return CommandResult(124, stdout, stderr + f"\n{argv[0]}: timed out after {timeout:.0f}s")
        return CommandResult(channel.recv_exit_status(), stdout, stderr)


def _drain(channel: paramiko.Channel, deadline: float, max_output: int) -> tuple[str, str]:
    """Read stdout and stderr until EOF and exit status, or the deadline (bounded buffers)."""
    out, err = bytearray(), bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        # The channel's fileno wakes on stdout, stderr and EOF; the cap bounds exit-status latency.
        select.select([channel], [], [], min(remaining, 0.1))
        while channel.recv_ready():
            out += channel.recv(65536)[: max(0, max_output - len(out))]
        while channel.recv_stderr_ready():
            err = (err + channel.recv_stderr(65536))[-max_output:]
        if channel.exit_status_ready() and channel.eof_received and not channel.recv_ready() \
                and not channel.recv_stderr_ready():
            break
        if channel.closed:
            break
    return out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


class Connection:
    """One host's SSH connection and its jump hops: opened lazily, closed on every path.

    `abort()` may be called from another thread (the runner's deadline) to unblock a stuck call.
    """

    def __init__(self, entry: HostEntry, accept_new: bool = False):
        self.entry = entry
        self._accept_new = accept_new
        self._client: paramiko.SSHClient | None = None
        self._jumps: list[paramiko.SSHClient] = []
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()
        self.deadline: float | None = None  # time.monotonic() by which the current job must end

    def remaining(self, cap: float | None = None) -> float:
        """Seconds left before the deadline (at most `cap`); at least a sliver so calls can fail cleanly."""
        left = cap if cap is not None else self.entry.command_timeout_s
        if self.deadline is not None:
            left = min(left, self.deadline - time.monotonic())
        return max(left, 0.01)

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def client(self) -> paramiko.SSHClient:
        """The live client, reconnecting when the transport has died."""
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                self.close()
                self._client = connect(self.entry, self._accept_new, self.remaining(), self._jumps)
            return self._client

    def run(self, argv: list[str], timeout: float, stdin_data: bytes | None = None) -> CommandResult:
        try:
            return exec_command(self.client(), argv, timeout, stdin_data)
        except FleetError:
            raise
        except (paramiko.SSHException, OSError, EOFError) as error:
            raise FleetError(UNREACHABLE, f"{self.entry.name}: connection lost: {error}") from None

    def sftp(self) -> paramiko.SFTPClient:
        with self._lock:
            client = self.client()
            if self._sftp is None or self._sftp.get_channel().closed:
                self._sftp = client.open_sftp()
            return self._sftp

    def close(self) -> None:
        with self._lock:
            if self._sftp is not None:
                self._sftp.close()
            close_all(self._client, self._jumps)
            self._sftp, self._client, self._jumps = None, None, []

    def abort(self) -> None:
        """Close transports without taking the lock (the owning thread may hold it while blocked)."""
        for each in [self._client, *self._jumps]:
            if each is not None:
                each.close()
