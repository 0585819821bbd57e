"""SSH connections for the fleet: hosts resolved by OpenSSH (`ssh -G`), agent, ProxyJump and
ProxyCommand, strict host keys (the inventory's, the config's and the global known_hosts), quoted exec."""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

from . import _paramiko  # first: imports paramiko without invoke where `ssh` is installed
import paramiko
import structlog

from ..service.host import CommandResult
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
    """Where and as whom to connect, after the inventory and OpenSSH's own resolution are merged."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    proxy_jump: str | None
    proxy_command: str | None = None  # with %h %p %r %n %% already expanded
    known_hosts_files: tuple[str, ...] = ()  # UserKnownHostsFile, then GlobalKnownHostsFile
    accept_new: bool = False  # StrictHostKeyChecking accept-new in the ssh config


SSH = "ssh"
SYSTEM_SSH_CONFIG = "/etc/ssh/ssh_config"
_USER_SSH_CONFIG = "~/.ssh/config"
_RESOLVED: dict[tuple, dict[str, list[str]]] = {}  # `ssh -G` answers, once per host and config
_RESOLVED_LOCK = threading.Lock()


def resolve(entry: HostEntry, hop: str | None = None) -> Target:
    """Per-host inventory keys win, then the ssh config, then inventory [defaults], then ssh's own.

    The ssh config is read by OpenSSH itself (`ssh -G`), so Include, Match, HostName tokens,
    ProxyCommand, ProxyJump, UserKnownHostsFile and the system-wide /etc/ssh/ssh_config (when
    the inventory's ssh_config is the user's default ~/.ssh/config) mean what they mean to `ssh`.
    `hop` is a ProxyJump spec (`user@host:port`): the inventory's per-host keys don't apply to it.
    """
    alias = hop or entry.address
    user, host, port = _strip_user_port(alias)
    explicit = hop is None
    if explicit:
        user, port = entry.user or user, entry.port or port
    if not _have_ssh():
        return _resolve_with_paramiko(entry, hop)
    found = _resolved(entry, host, user, port)

    def first(key: str, default: str | None = None) -> str | None:
        return found.get(key, [default])[0]

    hostname = first("hostname", host) or host
    port_value = int(first("port", "22") or 22)
    user_value = first("user") or _local_user()
    identities = [path for path in found.get("identityfile", []) if path not in _default_identities()]
    if explicit and entry.identity_file:
        identities = [entry.identity_file]
    elif not identities and entry.default_identity_file:
        identities = [entry.default_identity_file]
    jump = first("proxyjump", "none") or "none"
    command = first("proxycommand", "none") or "none"
    known = [os.path.expanduser(entry.known_hosts)]  # the inventory's: where accept-new writes
    for key in ("userknownhostsfile", "globalknownhostsfile"):
        for value in found.get(key, []):
            for path in value.split():
                if path.lower() != "none" and os.path.expanduser(path) not in known:
                    known.append(os.path.expanduser(path))
    return Target(
        alias=alias, hostname=hostname, port=port_value, user=user_value,
        identity_files=tuple(os.path.expanduser(path) for path in identities),
        # A hop's own ProxyJump is not followed: chains are written as one comma list.
        proxy_jump=None if not explicit or jump.lower() == "none" else jump,
        # OpenSSH takes whichever of ProxyJump and ProxyCommand came first; -G shows that one.
        proxy_command=None if command.lower() == "none" or (explicit and jump.lower() != "none")
        else _expand_proxy_command(command, hostname, port_value, user_value, host),
        known_hosts_files=tuple(known),
        accept_new=(first("stricthostkeychecking", "") or "").lower() == "accept-new",
    )


_HAVE_SSH: bool | None = None


def _have_ssh() -> bool:
    global _HAVE_SSH
    if _HAVE_SSH is None:
        _HAVE_SSH = shutil.which(SSH) is not None
    return _HAVE_SSH


# A name no config can mean (the .invalid TLD), for the one `ssh -G` of a host-independent config.
PLACEHOLDER_HOST = "ddtreed-any-host.invalid"
PLACEHOLDER_USER = "ddtreed-any-user"
PLACEHOLDER_PORT = 65534
_PER_HOST_LINES = ("host", "hostname", "user", "port")


def _resolved(entry: HostEntry, host: str, user: str | None, port: int | None) -> dict[str, list[str]]:
    """What `ssh -G` says for this host: asked once per run when the config cannot tell hosts apart."""
    files = uniform_config_files(entry)
    if files is None:
        return _ssh_g(entry, host, user, port)
    try:
        template = _ssh_g(entry, PLACEHOLDER_HOST, PLACEHOLDER_USER if user else None,
                          PLACEHOLDER_PORT if port else None, versions=files)
    except FleetError:
        return _ssh_g(entry, host, user, port)  # the same refusal, worded with this host's name
    expected = {"host": PLACEHOLDER_HOST, "hostname": PLACEHOLDER_HOST}
    if user:
        expected["user"] = PLACEHOLDER_USER
    if port:
        expected["port"] = str(PLACEHOLDER_PORT)
    placeholder_elsewhere = any(PLACEHOLDER_HOST in value or (user and PLACEHOLDER_USER in value)
                                for name, values in template.items() if name not in _PER_HOST_LINES
                                for value in values)
    if placeholder_elsewhere or any(template.get(name) != [value] for name, value in expected.items()):
        return _ssh_g(entry, host, user, port)  # the config does use the name after all: ask per host
    found = dict(template)
    # OpenSSH prints the destination as given and its lowercased form as the hostname.
    found["host"], found["hostname"] = [host], [host.lower()]
    if user:
        found["user"] = [user]
    if port:
        found["port"] = [str(port)]
    return found


def uniform_config_files(entry: HostEntry) -> tuple | None:
    """The ssh config files `ssh` would read for this inventory, with their versions, when nothing in
    them depends on the host (no Host pattern but `*`, no Match, no %-token, no HostName, no
    CanonicalizeHostname; Include followed); None when a host could resolve differently from another.

    Then one `ssh -G` of a placeholder name answers for every host, its name, user and port put in.
    """
    config = os.path.expanduser(entry.ssh_config)
    user_default = os.path.abspath(config) == os.path.abspath(os.path.expanduser(_USER_SSH_CONFIG))
    roots = [(config, os.path.expanduser("~/.ssh"))]
    if user_default:
        roots.append((SYSTEM_SSH_CONFIG, os.path.dirname(SYSTEM_SSH_CONFIG)))
    seen: list[tuple] = []
    for path, base in roots:
        if not _uniform_file(path, base, seen, depth=0):
            return None
    return tuple(seen)


_HOST_DEPENDENT = {"match", "hostname", "canonicalizehostname", "canonicaldomains"}


def _uniform_file(path: str, base: str, seen: list[tuple], depth: int) -> bool:
    if depth > 16:
        return False  # OpenSSH's own include depth limit: let it say what it says
    seen.append((path, *_file_version(path)))
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return True  # ssh skips a missing Include or -F file of ours the same way for every host
    except (OSError, UnicodeDecodeError):
        return False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "%" in line or "${" in line:
            return False
        keyword, _, rest = line.replace("=", " ", 1).partition(" ")
        keyword, rest = keyword.lower(), rest.strip()
        if keyword in _HOST_DEPENDENT:
            return False
        try:
            words = shlex.split(rest)
        except ValueError:
            return False
        if keyword == "host" and words != ["*"]:
            return False
        if keyword == "include":
            import glob

            for word in words:
                pattern = os.path.expanduser(word)
                pattern = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
                for included in sorted(glob.glob(pattern)):
                    if not _uniform_file(included, base, seen, depth + 1):
                        return False
                seen.append(("glob", pattern, tuple(sorted(glob.glob(pattern)))))
    return True


def _ssh_g(entry: HostEntry, host: str, user: str | None, port: int | None,
           versions: tuple = ()) -> dict[str, list[str]]:
    """`ssh -G` for one host: the inventory's [defaults] go last, so the config's values win."""
    config = os.path.expanduser(entry.ssh_config)
    key = (config, host, user, port, entry.default_user, entry.default_port, _mtime(config), versions)
    with _RESOLVED_LOCK:
        if key in _RESOLVED:
            return _RESOLVED[key]
    lines = [f'Include "{config}"']
    if os.path.abspath(config) == os.path.abspath(os.path.expanduser(_USER_SSH_CONFIG)):
        lines.append(f'Include "{SYSTEM_SSH_CONFIG}"')  # what plain `ssh` reads second
    defaults = [f"  User {entry.default_user}" if entry.default_user else "",
                f"  Port {entry.default_port}" if entry.default_port else ""]
    if any(defaults):
        lines += ["Host *", *[line for line in defaults if line]]
    import tempfile

    with tempfile.NamedTemporaryFile("w", prefix="ddtreed-ssh-", suffix=".conf") as handle:
        handle.write("\n".join(lines) + "\n")
        handle.flush()
        argv = [SSH, "-G", "-F", handle.name]
        argv += ["-l", user] if user else []
        argv += ["-p", str(port)] if port else []
        try:
            done = subprocess.run([*argv, "--", host], capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.SubprocessError) as error:
            raise FleetError(UNREACHABLE, f"{host}: ssh -G failed: {error}") from None
    if done.returncode != 0:
        problem = " ".join(done.stderr.replace(handle.name, "<ddtreed>").split())[:300]
        raise FleetError(UNREACHABLE, f"{host}: {entry.ssh_config}: OpenSSH refused the config: {problem}")
    found: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition(" ")
        found.setdefault(name.lower(), []).append(value.strip())
    with _RESOLVED_LOCK:
        _RESOLVED[key] = found
    return found


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


_DEFAULT_IDENTITIES: set[str] | None = None


def _default_identities() -> set[str]:
    """The identity files ssh lists when none is configured (~/.ssh/id_rsa, id_ed25519, …)."""
    global _DEFAULT_IDENTITIES
    if _DEFAULT_IDENTITIES is None:
        try:
            done = subprocess.run([SSH, "-G", "-F", "/dev/null", "--", "ddtreed.invalid"],
                                  capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL, check=False)
            _DEFAULT_IDENTITIES = {line.split(" ", 1)[1] for line in done.stdout.splitlines()
                                   if line.startswith("identityfile ")}
        except (OSError, subprocess.SubprocessError):
            _DEFAULT_IDENTITIES = set()
    return _DEFAULT_IDENTITIES


def _expand_proxy_command(command: str, hostname: str, port: int, user: str, alias: str) -> str:
    """OpenSSH's tokens in ProxyCommand: %h host, %p port, %r user, %n the name as given, %% a %."""
    tokens = {"h": hostname, "p": str(port), "r": user, "n": alias, "%": "%"}
    return re.sub(r"%(.)", lambda match: tokens.get(match.group(1), match.group(0)), command)


def _strip_user_port(spec: str) -> tuple[str | None, str, int | None]:
    """`user@host:port` (ProxyJump syntax) into its parts."""
    user, _, rest = spec.rpartition("@")
    host, port = rest, None
    if rest.count(":") == 1:
        host, port_text = rest.split(":")
        port = int(port_text) if port_text.isdigit() else None
    return user or None, host, port


def _resolve_with_paramiko(entry: HostEntry, hop: str | None) -> Target:
    """Without an `ssh` binary: paramiko's parser (no Include, no Match exec, no ProxyCommand)."""
    alias = hop or entry.address
    user, host, port = _strip_user_port(alias)
    _paramiko.with_invoke()  # paramiko's parser runs `Match exec` through invoke
    expanded = os.path.expanduser(entry.ssh_config)
    parsed = paramiko.SSHConfig.from_path(expanded) if os.path.isfile(expanded) else paramiko.SSHConfig()
    found = parsed.lookup(host)
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
        proxy_jump=None if not explicit or found.get("proxyjump", "none").lower() == "none"
        else found["proxyjump"],
        known_hosts_files=(entry.known_hosts, "/etc/ssh/ssh_known_hosts"),
    )


def _local_user() -> str:
    import getpass

    return getpass.getuser()


_HOST_KEYS: dict[tuple[str, ...], tuple[tuple, paramiko.HostKeys, paramiko.HostKeys]] = {}
_HOST_KEYS_LOCK = threading.Lock()


def _known_host_keys(known_hosts: str, others: tuple[str, ...]) -> tuple[paramiko.HostKeys, paramiko.HostKeys]:
    """(the inventory's known_hosts, the ssh config's UserKnownHostsFile and the global file), parsed
    once while none of the files changes. Only the first is ever written (accept-new appends there;
    the file's new size makes the next connection parse it again)."""
    paths = (known_hosts, *[path for path in others if path != known_hosts])
    version = tuple((path, *_file_version(path)) for path in paths)
    with _HOST_KEYS_LOCK:  # one thread parses, the others wait for its result
        cached = _HOST_KEYS.get(paths)
        if cached is not None and cached[0] == version:
            return cached[1], cached[2]
        own, system = paramiko.HostKeys(), paramiko.HostKeys()
        if os.path.isfile(known_hosts):
            own.load(known_hosts)
        # The ssh config's UserKnownHostsFile and the global /etc/ssh/ssh_known_hosts: read only.
        for path in paths[1:]:
            if os.path.isfile(path):
                try:
                    system.load(path)
                except (OSError, paramiko.SSHException) as error:
                    log.warning("fleet.known_hosts_unreadable", path=path, error=str(error))
        _HOST_KEYS[paths] = (version, own, system)
        log.debug("fleet.known_hosts_loaded", files=[path for path in paths if os.path.isfile(path)],
                  hosts=len(own) + len(system))
    return own, system


def _file_version(path: str) -> tuple[int, int, int] | tuple[()]:
    try:
        info = os.stat(path)
    except OSError:
        return ()
    return info.st_ino, info.st_size, info.st_mtime_ns


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
    if target.proxy_command and not target.proxy_jump:
        sock = _proxy_command(target)
    if target.proxy_jump:
        # Each hop is authenticated and host-key checked like any host; the last one forwards to us.
        hops = [resolve(entry, hop.strip()) for hop in target.proxy_jump.split(",") if hop.strip()]
        if hops and hops[0].proxy_command:
            sock = _proxy_command(hops[0])  # the first hop may itself be reached by a command
        for hop, following in zip(hops, hops[1:] + [target]):
            jump = _authenticate(entry, hop, accept_new, timeout, sock)
            jumps.append(jump)
            sock = _open_direct(jump, following, timeout)
    return _authenticate(entry, target, accept_new, timeout, sock)


def _authenticate(entry: HostEntry, target: Target, accept_new: bool, timeout: float,
                  sock: paramiko.Channel | None) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    known_hosts = os.path.expanduser(entry.known_hosts)
    # Parsed once per run and shared by every connection (paramiko reads them, never writes).
    client._host_keys, client._system_host_keys = _known_host_keys(known_hosts, target.known_hosts_files)
    strict = not (accept_new or target.accept_new)  # changed keys are refused either way
    client.set_missing_host_key_policy(_Refuse() if strict else _AcceptNew(known_hosts))
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


def _proxy_command(target: Target) -> paramiko.ProxyCommand:
    try:
        return paramiko.ProxyCommand(target.proxy_command)
    except (OSError, paramiko.SSHException) as error:
        raise FleetError(UNREACHABLE, f"{target.alias}: ProxyCommand failed: {error}") from None


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
