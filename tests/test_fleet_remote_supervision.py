"""Remote supervision end to end: the real daemon runs the demo service on an SSH "host" (a real sshd on
loopback) and closes the founding loop there: crash → diagnosis → patch over SFTP → restart → healthy.

The "remote" is this machine, so paths are shared; the tests prove the SSH path was taken from what
only SSH leaves behind: sshd's log, the SSH variables in the service's own environment, the tunnel.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest
from structlog.testing import capture_logs

import sshd
from ddtreed.context import service_context
from ddtreed.fleet import host_for
from ddtreed.fleet.remote_follower import RemoteFollower
from ddtreed.fleet.remote_host import SshHost
from ddtreed.service.host import LocalHost
from ddtreed.incidents import Store
from ddtreed.paths import shipped
from ddtreed.remediation import Engine, load_remediations
from tests.daemon_helpers import demo_config, run_daemon, runner_path, steps_of
from supervision_helpers import wait_for

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sshd.available(), reason="needs root and /usr/sbin/sshd (.ci/sshd-setup.sh)")]

HOST_NAME = "gpu-remote"
FOUNDING_STEPS = ["detected", "diagnosed", "applied", "restarted", "healthy", "verified"]
REMEDIATION = "ddtree-verify-graph-width"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _in_order(names: list[str], wanted: list[str]) -> bool:
    remaining = iter(names)
    return all(any(name == step for name in remaining) for step in wanted)


class ServiceWatch:
    """Samples /proc while the daemon runs: every process whose command line names the demo directory
    and that carries the launch token, with the SSH_CONNECTION it inherited (None when launched locally)."""

    def __init__(self, marker: str):
        self.marker = marker.encode()
        self.seen: dict[int, str | None] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="service-watch", daemon=True)

    def __enter__(self) -> "ServiceWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(0.1):  # sampling period; the service lives for seconds
            for pid, environ in service_processes(self.marker):
                self.seen.setdefault(pid, environ.get(b"SSH_CONNECTION", b"").decode() or None)


def service_processes(marker: bytes) -> list[tuple[int, dict[bytes, bytes]]]:
    """Live processes started for this test's service (they carry the launch token): (pid, environment)."""
    return [(pid, environ) for pid, environ in live_processes(marker) if b"DDTREED_SERVICE_TOKEN" in environ]


def live_processes(marker: bytes) -> list[tuple[int, dict[bytes, bytes]]]:
    """Live (not zombie) processes whose command line contains `marker`: (pid, environment)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if marker not in Path(f"/proc/{entry}/cmdline").read_bytes():
                continue
            if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:  # gone between listdir and read
            continue
        found.append((int(entry), dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)))
    return found




def remote_inventory(directory: Path, server: sshd.Sshd, client_key: Path) -> Path:
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(server.host_key_line + "\n")
    path = directory / "inventory.toml"
    path.write_text(
        f'[defaults]\nuser = "root"\nidentity_file = "{client_key}"\nknown_hosts = "{known_hosts}"\n'
        f'ssh_config = "{directory / "ssh_config"}"\nconnect_timeout_s = 5\n\n'
        f'[[host]]\nname = "{HOST_NAME}"\naddress = "127.0.0.1"\nport = {server.port}\n')
    return path


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """One sshd on loopback that accepts a fresh client key, and an inventory naming it."""
    directory = tmp_path_factory.mktemp("remote-sshd")
    client_key = directory / "client_key"
    server = sshd.start_sshd(directory / "server", sshd.keygen(client_key) + "\n")
    try:
        yield server, remote_inventory(directory, server, client_key)
    finally:
        server.stop()


def _recording(posix_rename, calls: list[tuple[str, str]]):
    """SFTPClient.posix_rename that still renames, and remembers (old, new) for the assertions."""
    def rename(self, old: str, new: str):
        calls.append((old, new))
        return posix_rename(self, old, new)
    return rename


@pytest.fixture(scope="module")
def supervised(remote, tmp_path_factory):
    """The founding loop once, on the SSH host: (config, daemon, exit code, pre-image, watch, events)."""
    server, inventory = remote
    demo_dir = tmp_path_factory.mktemp("remote-demo")
    local = demo_config(demo_dir)
    config = replace(local, service=replace(local.service, remote=HOST_NAME, inventory=str(inventory)))
    before = runner_path(config).read_bytes()
    before_inode = runner_path(config).stat().st_ino
    renames: list[tuple[str, str]] = []
    with capture_logs() as events, ServiceWatch(f"{demo_dir}/") as watch, pytest.MonkeyPatch.context() as patch:
        patch.setattr(paramiko.SFTPClient, "posix_rename", _recording(paramiko.SFTPClient.posix_rename, renames))
        daemon, code = run_daemon(config, timeout=90.0, stop_after_incident=True)
    try:
        yield config, daemon, code, (before, before_inode), watch, events, renames
    finally:
        daemon.host.close()  # the daemon leaves its host open (see the report on _shutdown)


def test_founding_crash_is_resolved_on_the_ssh_host(supervised):
    config, daemon, code, *_ = supervised
    assert code == 0
    assert [outcome.status for outcome in daemon.outcomes] == ["resolved"]
    incident = Store(config.database).get(daemon.outcomes[0].incident_id)
    assert (incident["status"], incident["category"]) == ("resolved", "cuda-graph-shape-mismatch")
    assert (incident["rule_id"], incident["remediation_id"]) == (REMEDIATION, REMEDIATION)
    names = steps_of(Store(config.database), incident["id"])
    assert _in_order(names, FOUNDING_STEPS), names
    verified = next(step for step in incident["steps"] if step["step"] == "verified")
    assert verified["data"]["accept_length"] > 1.5  # a real generation answered through the tunnel


def test_patch_was_written_atomically_with_a_local_backup(supervised):
    config, daemon, _, (before, before_inode), _, _, renames = supervised
    runner = runner_path(config)
    after = runner.read_bytes()
    assert after != before
    # Read locally, the file is exactly ddtreed's patch of the RECORD pre-image ("already applied").
    local = replace(config, service=replace(config.service, remote=None, inventory=None))
    engine = Engine(LocalHost(), str(Path(config.service.cwd) / "check-state"), daemon.catalog)
    plan = engine.plan(REMEDIATION, service_context(local, LocalHost()))
    assert (plan.applicable, plan.already_applied) == (False, True), plan.reason
    assert runner.stat().st_ino != before_inode  # a renamed-in new file, not an in-place write
    assert [p.name for p in runner.parent.iterdir() if p.name.startswith(".ddtreed-")] == []
    # The new bytes were renamed into place over SFTP, from a temp file in the same directory.
    [(temp, target)] = [(old, new) for old, new in renames if new == str(runner)]
    assert Path(temp).parent == runner.parent and Path(temp).name.startswith(".ddtreed-")
    [application] = Store(config.database).get(daemon.outcomes[0].incident_id)["applications"]
    assert application["status"] == "verified"
    [change] = application["files"]
    assert change["path"] == str(runner)
    assert (change["before_sha256"], change["after_sha256"]) == (_sha(before), _sha(after))
    backup = Path(change["backup_path"])
    assert backup.is_relative_to(Path(config.paths.state_dir)) and backup.read_bytes() == before


def test_every_stage_went_through_ssh(supervised, remote):
    config, daemon, _, _, watch, events, _ = supervised
    server, _ = remote
    assert isinstance(daemon.host, SshHost) and daemon.host.name == HOST_NAME
    assert isinstance(daemon.follower, RemoteFollower)
    log = server.log.read_text()
    assert "Accepted publickey for root from 127.0.0.1" in log
    assert daemon.engine.host is daemon.host  # remediation reads and writes go through the SSH host
    # Two launches (the crash, then the patched restart), both spawned by the SSH host.
    spawned = [e for e in events if e["event"] == "fleet.spawned"]
    started = [e for e in events if e["event"] == "service.started"]
    assert len(spawned) == len(started) == 2 and {e["host"] for e in started} == {HOST_NAME}
    assert [e["pid"] for e in spawned] == [e["pid"] for e in started]
    # Each service process inherited the SSH session's variables: sshd started it, not this process.
    sampled = {pid: via for pid, via in watch.seen.items() if pid in {e["pid"] for e in spawned}}
    assert sampled, f"no service process sampled (seen: {watch.seen})"
    assert all(via and via.endswith(f" {server.port}") for via in watch.seen.values()), watch.seen
    # Probes reached the service's port through the SSH tunnel, on another local port.
    [tunnel] = [e for e in events if e["event"] == "fleet.tunnel_opened"]
    assert tunnel["remote"] == f"127.0.0.1:{daemon.context.port}"
    assert tunnel["local_port"] != daemon.context.port


def test_no_service_process_is_left_after_the_daemon_stops(supervised):
    config, _, _, _, watch, _, _ = supervised
    assert watch.seen, "the watch saw no service process at all"
    marker = f"{config.service.cwd}/".encode()
    assert service_processes(marker) == []
    assert not [p for p in Path(config.paths.log_dir).iterdir() if p.name.startswith(".ddtreed-exit-")]
    # The log followers' `tail -F` ended with their channels (only a zombie until sshd reaps it).
    wait_for(lambda: not live_processes(marker), what="no process naming the demo directory")


def test_locally_modified_remote_file_is_refused_over_ssh(remote, tmp_path):
    """The RECORD pre-image check runs against the remote bytes: an edited file is never patched."""
    _, inventory = remote
    config = demo_config(tmp_path)
    config = replace(config, service=replace(config.service, remote=HOST_NAME, inventory=str(inventory)))
    runner = runner_path(config)
    runner.write_bytes(runner.read_bytes() + b"\n# a local hotfix\n")
    edited = runner.read_bytes()
    with host_for(config) as host:
        assert isinstance(host, SshHost)
        engine = Engine(host, config.paths.state_dir, load_remediations([shipped("remediations")]))
        plan = engine.plan(REMEDIATION, service_context(config, host))
    assert not plan.applicable and "RECORD" in plan.reason, plan.reason
    assert runner.read_bytes() == edited
