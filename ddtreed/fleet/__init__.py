"""Fleet mode: an inventory of SSH hosts, fleet commands, and `SshHost` for remote supervision."""

from __future__ import annotations

from typing import Any

from .inventory import HostEntry, Inventory, InventoryError, load_inventory
from .runner import FleetReport, HostResult, run_on_hosts
from .ssh import Connection, FleetError

__all__ = ["Connection", "FleetError", "FleetReport", "HostEntry", "HostResult", "Inventory",
           "InventoryError", "host_for", "load_inventory", "run_on_hosts"]


def host_for(config: Any, accept_new: bool = False):
    """LocalHost when the service is local (`service.remote` unset), else the SshHost for that entry."""
    from ..service.host import LocalHost

    service = config.service
    if service.remote is None:
        return LocalHost()
    if not service.inventory:
        raise InventoryError(f"{config.source}: service.remote = {service.remote!r} needs service.inventory")
    from .remote_host import SshHost

    return SshHost(load_inventory(service.inventory).get(service.remote), accept_new=accept_new)
