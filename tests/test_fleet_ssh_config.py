"""Fleet hosts resolved the way OpenSSH resolves them, against a real sshd on loopback.

The inventory names a host only by its alias; everything else (address, port, user, key, which
known_hosts file to trust, how to reach it) comes from an ssh config split with `Include`, as
fleets commonly write it. paramiko's own parser ignored Include, ProxyCommand and
UserKnownHostsFile, so these hosts used to resolve to the bare alias as the local user.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import sshd
from ddtreed.fleet.runner import run_on_hosts
from ddtreed.fleet.inventory import load_inventory
from ddtreed.fleet.ssh import resolve

pytestmark = pytest.mark.skipif(not sshd.available(), reason="needs /usr/sbin/sshd and root (.ci/sshd-setup.sh)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sshcfg")
    key = directory / "client_key"
    public = sshd.keygen(key)
    running = sshd.start_sshd(directory / "server", public + "\n")
    yield running, key, directory
    running.stop()


def _fleet(directory: Path, included: str, name: str = "gpu-inc") -> Path:
    """An ssh config whose host block lives in an included file, and an inventory naming the alias."""
    config_dir = directory / f"ssh-{name}-{time.monotonic_ns()}"
    (config_dir / "config.d").mkdir(parents=True)
    (config_dir / "config.d" / "fleet.conf").write_text(included)
    (config_dir / "config").write_text(f"Include {config_dir / 'config.d'}/*.conf\n")
    inventory = config_dir / "inventory.toml"
    inventory.write_text(f'[defaults]\nssh_config = "{config_dir / "config"}"\n'
                         f'known_hosts = "{config_dir / "inventory_known_hosts"}"\nconnect_timeout_s = 10\n'
                         f'\n[[host]]\nname = "{name}"\n')
    return inventory


def _echo(inventory: Path):
    entries = load_inventory(inventory).select()
    return run_on_hosts(entries, lambda connection: connection.run(["echo", "reached"], 20).stdout).hosts[0]


def test_an_included_host_block_with_its_own_known_hosts_file_is_used(server):
    running, key, directory = server
    known = directory / "from-config-known-hosts"
    known.write_text(running.host_key_line + "\n")
    inventory = _fleet(directory, f"Host gpu-*\n  HostName 127.0.0.1\n  Port {running.port}\n  User root\n"
                                  f"  IdentityFile {key}\n  UserKnownHostsFile {known}\n")
    target = resolve(load_inventory(inventory).get("gpu-inc"))
    assert (target.hostname, target.port, target.user, target.identity_files) == \
        ("127.0.0.1", running.port, "root", (str(key),))
    assert str(known) in target.known_hosts_files
    host = _echo(inventory)
    assert (host.ok, host.result, host.error) == (True, "reached\n", None)


def test_host_keys_stay_strict_by_default(server):
    running, key, directory = server
    empty = directory / "empty-known-hosts"
    empty.write_text("")
    inventory = _fleet(directory, f"Host gpu-*\n  HostName 127.0.0.1\n  Port {running.port}\n  User root\n"
                                  f"  IdentityFile {key}\n  UserKnownHostsFile {empty}\n"
                                  f"  GlobalKnownHostsFile {empty}\n")
    host = _echo(inventory)
    assert (host.ok, host.error) == (False, "unknown host key")


def test_the_global_known_hosts_file_is_trusted(server):
    running, key, directory = server
    global_file = directory / "global-known-hosts"
    global_file.write_text(running.host_key_line + "\n")
    inventory = _fleet(directory, f"Host gpu-*\n  HostName 127.0.0.1\n  Port {running.port}\n  User root\n"
                                  f"  IdentityFile {key}\n  UserKnownHostsFile /nonexistent\n"
                                  f"  GlobalKnownHostsFile {global_file}\n")
    host = _echo(inventory)
    assert (host.ok, host.error) == (True, None)


def test_by_default_the_system_known_hosts_is_among_the_trusted_files(server):
    _, _, directory = server
    inventory = _fleet(directory, "Host gpu-*\n  HostName 127.0.0.1\n")
    assert "/etc/ssh/ssh_known_hosts" in resolve(load_inventory(inventory).get("gpu-inc")).known_hosts_files


def test_proxy_command_reaches_the_host_through_a_real_ssh_client(server):
    """ProxyCommand runs OpenSSH's own client as the transport (`ssh -W`), tokens expanded."""
    running, key, directory = server
    known = directory / "proxy-known-hosts"
    known.write_text(running.host_key_line + "\n")
    inner = (f"ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={known} "
             f"-i {key} -p {running.port} -W %h:%p root@127.0.0.1")
    inventory = _fleet(directory, f"Host gpu-*\n  HostName 127.0.0.1\n  Port {running.port}\n  User root\n"
                                  f"  IdentityFile {key}\n  UserKnownHostsFile {known}\n  ProxyCommand {inner}\n")
    target = resolve(load_inventory(inventory).get("gpu-inc"))
    assert target.proxy_command and f"-W 127.0.0.1:{running.port}" in target.proxy_command
    before = running.log.read_text().count("Accepted publickey")
    host = _echo(inventory)
    assert (host.ok, host.result, host.error) == (True, "reached\n", None)
    deadline = time.monotonic() + 10
    while running.log.read_text().count("Accepted publickey") < before + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running.log.read_text().count("Accepted publickey") == before + 2  # the proxy's and ours


def test_a_config_openssh_refuses_is_one_line(server):
    _, _, directory = server
    inventory = _fleet(directory, "Host gpu-*\n  NoSuchOption yes\n")
    host = _echo(inventory)
    assert host.ok is False and "OpenSSH refused the config" in host.detail and "nosuchoption" in host.detail.lower()
