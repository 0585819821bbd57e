"""One `ssh -G` per run when the ssh config cannot tell hosts apart, and the same Target as asking
OpenSSH host by host; one per host as soon as it can (a Host pattern, Match, a %-token, HostName).

Real OpenSSH client (`ssh -G`); the calls are counted by a wrapper script standing in for `ssh`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.fleet import ssh
from ddtreed.fleet.inventory import from_mapping

pytestmark = pytest.mark.skipif(not ssh._have_ssh(), reason="needs OpenSSH's client (ssh)")

HOSTS = [("gpu-A01.Example.org", None, None), ("10.0.0.7", "bob", 2222), ("node-3", None, 22),
         ("Node-4.internal", "alice", None)] + [(f"h{index}.example", None, 22000 + index) for index in range(12)]


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """`ssh` behind a wrapper that appends one line per run to a file; fresh caches."""
    calls = tmp_path / "ssh-calls"
    wrapper = tmp_path / "ssh"
    real = subprocess.run(["sh", "-c", "command -v ssh"], capture_output=True, text=True, check=True).stdout.strip()
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(ssh, "SSH", str(wrapper))
    monkeypatch.setattr(ssh, "_RESOLVED", {})
    monkeypatch.setattr(ssh, "_DEFAULT_IDENTITIES", None)
    return calls


def entries(tmp_path: Path, config_text: str | None, defaults: dict | None = None):
    config = tmp_path / "ssh_config"
    if config_text is not None:
        config.write_text(config_text)
    raw = {"defaults": {"ssh_config": str(config), "known_hosts": str(tmp_path / "known_hosts"), **(defaults or {})},
           "host": [{"name": f"host{index}", "address": address, **({"user": user} if user else {}),
                     **({"port": port} if port else {})} for index, (address, user, port) in enumerate(HOSTS)]}
    return from_mapping(raw, source="inventory.toml", base_dir=tmp_path).hosts


def ssh_g_runs(calls: Path) -> int:
    if not calls.exists():
        return 0
    return sum(1 for line in calls.read_text().splitlines() if "ddtreed.invalid" not in line)  # not the defaults probe


def resolved_both_ways(hosts, monkeypatch) -> tuple[list, list]:
    fast = [ssh.resolve(entry) for entry in hosts]
    monkeypatch.setattr(ssh, "_RESOLVED", {})
    monkeypatch.setattr(ssh, "uniform_config_files", lambda entry: None)  # OpenSSH asked for every host
    slow = [ssh.resolve(entry) for entry in hosts]
    return fast, slow


UNIFORM = {
    "no config file": (None, None),
    "an empty file": ("", None),
    "Host * settings": ("# fleet defaults\nHost *\n  User ops\n  Port 2200\n  IdentityFile /keys/fleet\n"
                        "  UserKnownHostsFile /keys/known_hosts\n  StrictHostKeyChecking accept-new\n"
                        "  ServerAliveInterval=15\n", None),
    "settings before any Host": ("ConnectTimeout 7\nProxyJump jump@bastion:2022\n", None),
    "inventory defaults": (None, {"user": "deploy", "port": 2022}),
}


@pytest.mark.parametrize("shape", list(UNIFORM))
def test_a_config_without_host_dependent_lines_is_asked_once_and_resolves_as_per_host(shape, tmp_path, counted,
                                                                                      monkeypatch):
    text, defaults = UNIFORM[shape]
    hosts = entries(tmp_path, text, defaults)
    fast, slow = resolved_both_ways(hosts, monkeypatch)
    assert fast == slow
    # one per run for each of the 4 ways a host can come (user given or not, port given or not);
    # then one per host, asked apart
    assert ssh_g_runs(counted) == 4 + len(hosts)
    if shape == "Host * settings":
        by_address = {target.alias: target for target in fast}
        assert by_address["10.0.0.7"].user == "bob" and by_address["10.0.0.7"].port == 2222
        assert by_address["node-3"].user == "ops" and by_address["node-3"].port == 22
        assert by_address["gpu-A01.Example.org"].hostname == "gpu-a01.example.org"
        assert by_address["gpu-A01.Example.org"].port == 2200
        assert all(target.accept_new and "/keys/known_hosts" in target.known_hosts_files for target in fast)


def test_an_include_of_host_independent_files_is_followed(tmp_path, counted, monkeypatch):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.conf").write_text("Host *\n  ServerAliveInterval 30\n")
    (tmp_path / "conf.d" / "b.conf").write_text("Compression yes\n")
    hosts = entries(tmp_path, f"Include {tmp_path}/conf.d/*.conf\n")
    fast, slow = resolved_both_ways(hosts, monkeypatch)
    assert fast == slow and ssh_g_runs(counted) == 4 + len(hosts)


HOST_DEPENDENT = {
    "a Host pattern": "Host gpu-*\n  User gpu\n  Port 2201\n",
    "Match": "Match host node-*\n  User matched\n",
    "a %-token": "Host *\n  UserKnownHostsFile /keys/known_%h\n",
    "HostName under Host *": "Host *\n  HostName 192.0.2.1\n",
    "an included Host pattern": None,
}


@pytest.mark.parametrize("shape", list(HOST_DEPENDENT))
def test_a_config_that_can_tell_hosts_apart_is_asked_per_host(shape, tmp_path, counted, monkeypatch):
    text = HOST_DEPENDENT[shape]
    if text is None:
        (tmp_path / "conf.d").mkdir()
        (tmp_path / "conf.d" / "fleet.conf").write_text("Host h1*\n  User one\n")
        text = f"Include {tmp_path}/conf.d/*.conf\n"
    hosts = entries(tmp_path, text)
    fast, slow = resolved_both_ways(hosts, monkeypatch)
    assert fast == slow
    assert ssh_g_runs(counted) == 2 * len(hosts)
    if shape == "a Host pattern":
        assert [target.user for target in fast[:1]] == ["gpu"] and fast[2].user != "gpu"


def test_an_edit_of_the_config_is_seen_by_the_next_resolution(tmp_path, counted):
    hosts = entries(tmp_path, "Host *\n  User first\n")
    assert ssh.resolve(hosts[0]).user == "first"
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n  User second\n  ConnectTimeout 9\n")  # a new size: a new version
    assert ssh.resolve(hosts[2]).user == "second"


def test_fleet_commands_start_without_invoke_and_the_paramiko_parser_gets_it_back():
    code = ("import sys\nimport ddtreed.fleet.ssh, ddtreed.fleet.remote_status, ddtreed.fleet.commands\n"
            "print('invoke' in sys.modules, 'sqlite_utils' in sys.modules)\n"
            "from ddtreed.fleet import _paramiko\nimport paramiko\n_paramiko.with_invoke()\n"
            "config = paramiko.SSHConfig.from_text('Match exec \"true\"\\n  User viaexec\\n')\n"
            "print(config.lookup('anything')['user'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.split() == ["False", "False", "viaexec"]
