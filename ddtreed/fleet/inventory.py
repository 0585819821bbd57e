"""The fleet inventory (TOML): `[defaults]` plus `[[host]]` entries, validated with one-line errors."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..config import read_toml


class InventoryError(ValueError):
    """A bad inventory, worded as one line naming the file, host and key."""


@dataclass(frozen=True)
class HostEntry:
    """One inventory host after defaults are applied; None means "ask ~/.ssh/config, then default"."""

    name: str
    address: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    ddtreed: str = "ddtreed"  # the remote command, split with shlex (may be a venv path or `python -m`)
    config: str | None = None  # the remote daemon's config file, passed as --config when set
    site_packages: str | None = None  # for `remediate apply` when no remote config is named
    state_dir: str = "/var/lib/ddtreed"
    rules_dir: str = "/etc/ddtreed/rules"
    log_dir: str = "/var/log/ddtreed"
    tags: tuple[str, ...] = ()
    known_hosts: str = "~/.ssh/known_hosts"
    ssh_config: str = "~/.ssh/config"
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 60.0  # the per-host deadline for one fleet command, connect included
    concurrency: int | None = None  # None: sized to the fleet (runner.pool_size)
    default_user: str | None = None  # [defaults].user: below ~/.ssh/config's User
    default_port: int | None = None
    default_identity_file: str | None = None

    @property
    def ddtreed_argv(self) -> list[str]:
        return shlex.split(self.ddtreed)


@dataclass(frozen=True)
class Inventory:
    source: str
    hosts: tuple[HostEntry, ...]

    def get(self, name: str) -> HostEntry:
        for entry in self.hosts:
            if entry.name == name:
                return entry
        raise InventoryError(f"{self.source}: no host named {name!r} (known: {', '.join(self.names())})")

    def names(self) -> list[str]:
        return [entry.name for entry in self.hosts]

    def select(self, names: list[str] | None = None, tag: str | None = None) -> list[HostEntry]:
        """Hosts by name (in the order given) or by tag; all hosts when neither is given."""
        chosen = [self.get(name) for name in names] if names else list(self.hosts)
        if tag is not None:
            chosen = [entry for entry in chosen if tag in entry.tags]
            if not chosen:
                raise InventoryError(f"{self.source}: no host has tag {tag!r}")
        return chosen


_HOST_ONLY = {"name", "address", "tags"}
_DEFAULTS_ONLY = {"concurrency"}
_PATH_KEYS = {"identity_file", "known_hosts", "ssh_config"}
_CONNECTION_KEYS = {"user": "default_user", "port": "default_port", "identity_file": "default_identity_file"}
_TYPES = {f.name: f.type for f in fields(HostEntry)}
_PUBLIC = [f.name for f in fields(HostEntry) if not f.name.startswith("default_")]


def load_inventory(path: str | os.PathLike[str]) -> Inventory:
    """Read and validate an inventory file; raise InventoryError naming the file, host and key."""
    path = Path(path)
    raw = read_toml(path, InventoryError, "inventory")
    return from_mapping(raw, source=str(path), base_dir=path.parent)


def from_mapping(raw: dict[str, Any], source: str = "<memory>", base_dir: Path | None = None) -> Inventory:
    unknown = sorted(set(raw) - {"defaults", "host"})
    if unknown:
        raise InventoryError(f"{source}: unknown section [{unknown[0]}] (known: [defaults], [[host]])")
    defaults = _defaults(source, raw.get("defaults", {}), base_dir)
    hosts_raw = raw.get("host", [])
    if not isinstance(hosts_raw, list) or not hosts_raw:
        raise InventoryError(f"{source}: needs at least one [[host]] entry")
    hosts = tuple(_host(source, index, item, defaults, base_dir) for index, item in enumerate(hosts_raw))
    seen: set[str] = set()
    for entry in hosts:
        if entry.name in seen:
            raise InventoryError(f"{source}: host {entry.name!r}: name: duplicate host name")
        seen.add(entry.name)
    return Inventory(source=source, hosts=hosts)


def _defaults(source: str, raw: Any, base_dir: Path | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InventoryError(f"{source}: [defaults] must be a table")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _HOST_ONLY or key not in _TYPES or key.startswith("default_"):
            allowed = ", ".join(k for k in _PUBLIC if k not in _HOST_ONLY)
            raise InventoryError(f"{source}: [defaults]: unknown key {key!r} (known: {allowed})")
        values[_CONNECTION_KEYS.get(key, key)] = _coerce(source, "[defaults]", key, value, base_dir)
    return values


def _host(source: str, index: int, raw: Any, defaults: dict[str, Any], base_dir: Path | None) -> HostEntry:
    where = f"[[host]] #{index + 1}"
    if not isinstance(raw, dict):
        raise InventoryError(f"{source}: {where} must be a table")
    if isinstance(raw.get("name"), str):
        where = f"host {raw['name']!r}"
    values = dict(defaults)
    for key, value in raw.items():
        if key in _DEFAULTS_ONLY or key not in _TYPES or key.startswith("default_"):
            allowed = ", ".join(k for k in _PUBLIC if k not in _DEFAULTS_ONLY)
            raise InventoryError(f"{source}: {where}: unknown key {key!r} (known: {allowed})")
        values[key] = _coerce(source, where, key, value, base_dir)
    for key in ("name", "address"):
        if not values.get(key):
            if key == "address" and values.get("name"):
                values["address"] = values["name"]  # like ssh: the name may be the address
                continue
            raise InventoryError(f"{source}: {where}: missing key {key!r}")
    return HostEntry(**values)


def _coerce(source: str, where: str, key: str, value: Any, base_dir: Path | None) -> Any:
    """Check one value against the HostEntry annotation; name the file, host and key when wrong."""
    annotation = _TYPES[key].replace(" | None", "")

    def fail(expected: str) -> InventoryError:
        return InventoryError(f"{source}: {where}: {key} must be {expected}, got {value!r}")

    if annotation.startswith("tuple[str"):
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise fail("a list of non-empty strings")
        return tuple(value)
    if annotation == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("an integer")
        if key == "port" and not 0 < value < 65536:
            raise fail("1..65535")
        if value <= 0:
            raise fail("> 0")
        return value
    if annotation == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise fail("a number > 0")
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise fail("a non-empty string")
    if key == "ddtreed":
        try:
            shlex.split(value)
        except ValueError as error:
            raise fail(f"a shell-quoted command ({error})") from None
    if key in _PATH_KEYS:
        return _local_path(value, base_dir)
    return value


def _local_path(value: str, base_dir: Path | None) -> str:
    """Local files (keys, known_hosts) relative to the inventory file, like the daemon config."""
    expanded = Path(os.path.expanduser(value))
    if not expanded.is_absolute() and base_dir is not None:
        expanded = (base_dir / expanded).resolve()
    return str(expanded)

