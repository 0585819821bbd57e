"""Inventory loading, selection, ~/.ssh/config resolution and the CLI's one-line inventory errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.config import from_mapping
from ddtreed.fleet import InventoryError, host_for, load_inventory
from ddtreed.fleet.ssh import resolve
from ddtreed.service.host import LocalHost

REPO = Path(__file__).resolve().parent.parent

GOOD = """
[defaults]
user = "infer"
identity_file = "keys/fleet"
ddtreed = "/opt/ddtreed/.venv/bin/ddtreed"
state_dir = "/var/lib/ddtreed"
concurrency = 4

[[host]]
name = "gpu-a"
address = "10.0.0.1"
tags = ["h200", "prod"]

[[host]]
name = "gpu-b"
address = "10.0.0.2"
port = 2222
user = "root"
ddtreed = "python3 -m ddtreed"
tags = ["h200"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.toml"
    path.write_text(text)
    return path


def test_defaults_apply_and_host_keys_override(tmp_path):
    inventory = load_inventory(write(tmp_path, GOOD))
    a, b = inventory.hosts
    assert (a.name, a.address, a.port, a.user, a.default_user) == ("gpu-a", "10.0.0.1", None, None, "infer")
    assert a.default_identity_file == str(tmp_path / "keys" / "fleet")  # relative to the inventory
    assert a.ddtreed_argv == ["/opt/ddtreed/.venv/bin/ddtreed"]
    assert (b.port, b.user, b.ddtreed_argv, b.concurrency) == (2222, "root", ["python3", "-m", "ddtreed"], 4)
    assert [e.name for e in inventory.select(tag="prod")] == ["gpu-a"]
    assert [e.name for e in inventory.select(["gpu-b", "gpu-a"])] == ["gpu-b", "gpu-a"]


@pytest.mark.parametrize("text, expected", [
    (GOOD.replace("port = 2222", "port = \"2222\""), "host 'gpu-b': port must be an integer"),
    (GOOD.replace("port = 2222", "port = 70000"), "host 'gpu-b': port must be 1..65535"),
    (GOOD.replace("tags = [\"h200\"]", "password = \"hunter2\""), "host 'gpu-b': unknown key 'password'"),
    (GOOD.replace("concurrency = 4", "concurrency = 0"), "[defaults]: concurrency must be > 0"),
    (GOOD.replace("name = \"gpu-b\"", "name = \"gpu-a\""), "host 'gpu-a': name: duplicate host name"),
    (GOOD.replace("name = \"gpu-b\"\naddress = \"10.0.0.2\"", ""), "[[host]] #2: missing key 'name'"),
    (GOOD.replace("[defaults]", "[defaults]\nname = \"x\""), "[defaults]: unknown key 'name'"),
    (GOOD.replace("ddtreed = \"python3 -m ddtreed\"", "ddtreed = \"python3 'unclosed\""),
     "host 'gpu-b': ddtreed must be a shell-quoted command"),
    ("[defaults]\nuser = \"x\"\n", "needs at least one [[host]] entry"),
    ("[[host]\n", "invalid TOML"),
])
def test_bad_inventory_names_file_host_and_key(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in str(caught.value)


def test_cli_bad_inventory_is_one_line_exit_2(tmp_path):
    path = write(tmp_path, GOOD.replace("port = 2222", "port = \"2222\""))
    done = subprocess.run([sys.executable, "-m", "ddtreed", "fleet", "status", "--inventory", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"ddtreed: error: {path}: host 'gpu-b': port must be an integer, got '2222'"]
    unknown = subprocess.run([sys.executable, "-m", "ddtreed", "fleet", "status", "--inventory",
                              str(write(tmp_path, GOOD)), "--hosts", "gpu-z"],
                             capture_output=True, text=True, cwd=REPO, timeout=60)
    assert unknown.returncode == 2 and "no host named 'gpu-z'" in unknown.stderr


def test_ssh_config_fills_what_the_inventory_leaves_open(tmp_path):
    (tmp_path / "ssh_config").write_text(
        "Host gpu-*\n  HostName %h.example.internal\n  User ops\n  Port 2200\n"
        "  IdentityFile /keys/ops\n  ProxyJump bastion@jump.example:2022\n")
    inventory = load_inventory(write(tmp_path, f"""
[defaults]
user = "fallback"
ssh_config = "{tmp_path / 'ssh_config'}"
[[host]]
name = "gpu-c"
[[host]]
name = "explicit"
address = "gpu-d"
user = "root"
port = 22
identity_file = "/keys/root"
"""))
    from_config = resolve(inventory.get("gpu-c"))
    assert from_config.hostname == "gpu-c.example.internal"
    assert (from_config.user, from_config.port, from_config.identity_files) == ("ops", 2200, ("/keys/ops",))
    assert from_config.proxy_jump == "bastion@jump.example:2022"
    explicit = resolve(inventory.get("explicit"))
    assert (explicit.user, explicit.port, explicit.identity_files) == ("root", 22, ("/keys/root",))
    hop = resolve(inventory.get("gpu-c"), "bastion@jump.example:2022")
    assert (hop.user, hop.hostname, hop.port, hop.proxy_jump) == ("bastion", "jump.example", 2022, None)


def test_host_for_local_and_remote(tmp_path):
    inventory = write(tmp_path, GOOD)
    local = from_mapping({"service": {"argv": ["python", "-m", "server"]}})
    assert isinstance(host_for(local), LocalHost)
    remote = from_mapping({"service": {"argv": ["x"], "remote": "gpu-b", "inventory": str(inventory)}})
    host = host_for(remote)
    try:
        assert (type(host).__name__, host.name, host.entry.port) == ("SshHost", "gpu-b", 2222)
    finally:
        host.close()
    missing = from_mapping({"service": {"argv": ["x"], "remote": "gpu-z", "inventory": str(inventory)}})
    with pytest.raises(InventoryError, match="no host named 'gpu-z'"):
        host_for(missing)
