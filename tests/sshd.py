"""Real OpenSSH servers on loopback for the fleet tests and benchmark (see /work/shared/TESTING.md).

Installs nothing: .ci/sshd-setup.sh puts /usr/sbin/sshd in place; without it the tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
REPO = Path(__file__).resolve().parent.parent
# The remote side of the tests is this machine and this checkout: no install needed.
REMOTE_DDTREED = f"env PYTHONPATH={REPO} {REPO / '.venv' / 'bin' / 'python'} -m ddtreed"
if not (REPO / ".venv" / "bin" / "python").exists():
    REMOTE_DDTREED = f"env PYTHONPATH={REPO} {sys.executable} -m ddtreed"


def available() -> bool:
    return os.access(SSHD, os.X_OK) and shutil.which("ssh-keygen") is not None and os.geteuid() == 0


def keygen(path: Path) -> str:
    """A new ed25519 key pair at `path`; returns the public key line ("ssh-ed25519 AAAA…")."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    return Path(f"{path}.pub").read_text().strip()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.settimeout(1.0)
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"sshd on port {port} did not answer within {deadline_s}s")


@dataclass
class Sshd:
    """One sshd process; `host_key_line` is its known_hosts line."""

    directory: Path
    port: int
    public_host_key: str
    process: subprocess.Popen | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.directory / "sshd.log"

    @property
    def host_key_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.public_host_key}"

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen | None) -> None:
    """SIGTERM a running sshd, SIGKILL it after 10 s; nothing when it is gone already."""
    if process and process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def start_sshd(directory: Path, authorized_keys: str, port: int | None = None,
               host_key: Path | None = None, extra_config: str = "") -> Sshd:
    """sshd -D on 127.0.0.1 with its own config, host key and authorized_keys in `directory`;
    `extra_config` lines are appended to its sshd_config."""
    directory.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", exist_ok=True)
    if host_key is None:
        host_key = directory / "hostkey"
        public = keygen(host_key)
    else:
        public = Path(f"{host_key}.pub").read_text().strip()
    (directory / "authorized_keys").write_text(authorized_keys)
    server = Sshd(directory, port or free_port(), " ".join(public.split()[:2]))
    config = directory / "sshd_config"
    config.write_text(
        f"Port {server.port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\nPidFile {directory / 'sshd.pid'}\n"
        "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nAllowTcpForwarding yes\nSubsystem sftp internal-sftp\n"
        "MaxStartups 200\nMaxSessions 64\nLogLevel INFO\n" + extra_config
    )
    server.process = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(server.log)],
                                      stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_port(server.port)
    except TimeoutError:
        server.stop()
        raise TimeoutError(f"sshd on {server.port} failed: {server.log.read_text()[-500:]}") from None
    return server


@dataclass
class TestFleet:
    """Four hosts: healthy, down (nothing listening), changed host key, refused client key."""

    directory: Path
    client_key: Path
    known_hosts: Path
    servers: dict[str, Sshd]
    down_port: int

    def inventory(self, path: Path | None = None, defaults: dict | None = None, extra_hosts: str = "") -> Path:
        """An inventory of the four hosts; `defaults` overrides [defaults] keys (None drops one)."""
        path = path or self.directory / "inventory.toml"
        values = {
            "user": "root", "identity_file": str(self.client_key), "known_hosts": str(self.known_hosts),
            "ssh_config": str(self.directory / "ssh_config"), "ddtreed": REMOTE_DDTREED,
            "connect_timeout_s": 5, "command_timeout_s": 30,
            "state_dir": str(self.directory / "remote-state"), "rules_dir": str(self.directory / "remote-rules"),
            "log_dir": str(self.directory / "remote-logs"),
        }
        values.update(defaults or {})
        text = "[defaults]\n" + "".join(f"{key} = {json.dumps(value)}\n"
                                        for key, value in values.items() if value is not None)
        for name, port, tags in (("healthy", self.servers["healthy"].port, ["gpu", "good"]),
                                 ("down", self.down_port, ["gpu"]),
                                 ("changed-key", self.servers["changed-key"].port, ["gpu"]),
                                 ("refused-key", self.servers["refused-key"].port, ["gpu"])):
            text += f"\n[[host]]\nname = \"{name}\"\naddress = \"127.0.0.1\"\nport = {port}\ntags = {json.dumps(tags)}\n"
        path.write_text(text + extra_hosts)
        return path

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


def start_test_fleet(directory: Path) -> TestFleet:
    directory.mkdir(parents=True, exist_ok=True)
    # An installed host has its state dir (`ddtreed status` exits 2 without one, 3 when no daemon runs).
    (directory / "remote-state").mkdir(mode=0o700, exist_ok=True)
    client_key = directory / "client_key"
    client_public = keygen(client_key)
    stranger_public = keygen(directory / "stranger_key")
    servers: dict[str, Sshd] = {}
    try:
        servers["healthy"] = start_sshd(directory / "healthy", client_public + "\n")
        servers["changed-key"] = start_sshd(directory / "changed-key", client_public + "\n")
        servers["refused-key"] = start_sshd(directory / "refused-key", stranger_public + "\n")
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    old_key = keygen(directory / "old_hostkey")  # what known_hosts remembers for changed-key
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(
        servers["healthy"].host_key_line + "\n"
        + f"[127.0.0.1]:{servers['changed-key'].port} {' '.join(old_key.split()[:2])}\n"
        + servers["refused-key"].host_key_line + "\n"
    )
    return TestFleet(directory, client_key, known_hosts, servers, free_port())
