"""The one place that builds the middle: rules, catalogs, host, incident store, engine, budget, canary.

`build(config)` is shared by the daemon, the CLI and promotion, so all three see the same files
and write the same database. `rules_dirs(config)` / `remediations_dirs(config)` are the default
catalog directories, computed here only (the shipped ones come from `ddtreed.paths.shipped`).

SIGHUP calls `rebuild(old, new_config)`: everything is rebuilt from the new file except the host
(the service runs there now) and the store (the state dir does not move). What a reload cannot
change is listed in docs/ARCHITECTURE.md ("Reload").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import structlog

from ..clock import Clock, SystemClock
from ..config import Config, ConfigError, load
from ..context import service_context as context_of
from ..health.probes import Prober
from ..service.host import Host, LocalHost
from ..incidents import Store, database_path
from ..incidents.durable import DurableStore, open_store
from ..paths import shipped
from ..remediation import Catalog, Engine, Launch, load_remediations
from ..restart import RestartBudget
from ..rules import RuleSet, load_rules

if TYPE_CHECKING:
    from ..health.canary import Canary, PeriodicCanary

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Wiring:
    config: Config
    host: Host
    store: DurableStore  # the incident store; it survives a full disk, a corrupt or a deleted file
    rules: RuleSet
    catalog: Catalog
    engine: Engine
    budget: RestartBudget
    canary: Canary | None
    periodic_canary: PeriodicCanary | None
    prober: Callable[[str], Prober]  # base URL -> prober (the middle tier swaps in a fake)
    clock: Clock
    preflight_checks: Mapping[str, Callable] | None = None  # None: every shipped check (ddtreed.preflight)


def rules_dirs(config: Config) -> tuple[str, ...]:
    return tuple(config.paths.rules_dirs) or (str(shipped("rules")),)


def remediations_dirs(config: Config) -> tuple[str, ...]:
    return tuple(config.paths.remediations_dirs) or (str(shipped("remediations")),)


def catalog_for(config: Config | None, override: Sequence[str] | None = None) -> Catalog:
    """The remediation catalog of `config` (or the shipped one), unless `override` names directories."""
    return load_remediations(list(override) if override else
                             remediations_dirs(config) if config is not None else [str(shipped("remediations"))])


def engine_for(config: Config | None, state_dir: str, override: Sequence[str] | None = None) -> Engine:
    """The engine `ddtreed remediate` uses: the same catalog, host and incident store as the daemon."""
    host = service_host(config) if config is not None else LocalHost()
    secrets = (config.service.argv, config.service.env) if config is not None else ((), {})
    return Engine(host, state_dir, catalog_for(config, override), secrets_from=secrets)


def service_host(config: Config) -> Host:
    """LocalHost, or the SshHost of `service.remote` (imports paramiko only then)."""
    if config.service.remote is None:
        return LocalHost()
    from ..fleet import host_for

    return host_for(config)


def load_catalogs(config: Config) -> tuple[RuleSet, Catalog]:
    """Rules and remediations as the daemon uses them; errors name file, line and field."""
    return load_rules(rules_dirs(config)), load_remediations(remediations_dirs(config))


def build(config: Config, *, host: Host | None = None, store: Store | None = None,
          clock: Clock | None = None, prober: Callable[[str], Prober] | None = None,
          preflight_checks: Mapping[str, Callable] | None = None) -> Wiring:
    """Everything the loop needs for `config`; rule or remediation errors raise before anything starts."""
    rules, catalog = load_catalogs(config)
    rules.rank_rivals = False  # the incident path reads the decision only: its rivals are not ranked
    host = host or service_host(config)
    durable = DurableStore(store or open_store(database_path(config.paths.state_dir)),
                           clock.sleep if clock else None)
    return _assemble(config, host, durable, rules, catalog, clock or SystemClock(), prober or Prober,
                     preflight_checks)


def service_context(wiring: Wiring, argv: list[str]):
    """The service's context (ddtreed.context) for this launch argv on the wiring's host."""
    config = wiring.config
    return context_of(replace(config, service=replace(config.service, argv=tuple(argv))), wiring.host)


def prober_for(wiring: Wiring, port: int, stop_asked: Callable[[], bool], service: Any = None) -> Prober:
    """The prober of the service on `port`. A real one gives up within a slice of its wait when
    ddtreed is to stop, or when `service` (the launch it probes, a ServiceRun) is dying under it
    (`service.death()`: its main process exited, a member of its session died); the failed
    request says which. Every probe the loop sends goes through here: start-up, verification,
    acceptance, canary, the serving watch, the health probe that confirms crash text."""
    prober = wiring.prober(wiring.host.http_base_url(wiring.config.service.host, port))
    if isinstance(prober, Prober):
        prober.interrupted = probe_interrupted(stop_asked, getattr(service, "death", None))
    return prober


def probe_interrupted(stop_asked: Callable[[], bool], death: Callable[[], str] | None) -> Callable[[], str]:
    """Why a probe in flight gives up now ("" while it waits on): the stop first, then a death."""
    def interrupted() -> str:
        if stop_asked():
            return "ddtreed is stopping"
        return death() if death is not None else ""

    return interrupted


def reload_config(current: Config) -> Config:
    """SIGHUP: the config file read again (ConfigError when it is bad or moves the service)."""
    config = load(current.source) if os.path.exists(current.source) else current
    config = replace(config, paths=replace(config.paths, state_dir=current.paths.state_dir))
    if (config.service.remote, config.service.inventory) != (current.service.remote, current.service.inventory):
        raise ConfigError(f"{config.source}: service.remote/inventory cannot change on reload "
                          "(the service runs there now); restart ddtreed to move it")
    return config


def rebuild(old: Wiring, config: Config) -> Wiring:
    """SIGHUP: a new wiring from the new config, keeping the host, the store, the clock and the seams."""
    rules, catalog = load_catalogs(config)
    return _assemble(config, old.host, old.store, rules, catalog, old.clock, old.prober, old.preflight_checks)


def reload(old: Wiring) -> Wiring | None:
    """SIGHUP: the whole wiring rebuilt from the config file; None (logged) when the new file is bad."""
    try:
        return rebuild(old, reload_config(old.config))
    except (ConfigError, ValueError, OSError) as error:
        log.error("reload_rejected", error=str(error), hint="the previous config, rules and remediations stay in use")
        return None


def reloaded_launch(old: Config, new: Config) -> Launch | None:
    """The operator's new launch when a reload changed `service.argv`/`env`; None when unchanged."""
    if (old.service.argv, old.service.env) == (new.service.argv, new.service.env):
        return None
    launch = Launch(list(new.service.argv), dict(new.service.env))
    log.info("launch_reloaded", argv=launch.argv, hint="used from the next (re)start")
    return launch


def _assemble(config: Config, host: Host, store: DurableStore, rules: RuleSet, catalog: Catalog,
              clock: Clock, prober: Callable[[str], Prober],
              preflight_checks: Mapping[str, Callable] | None) -> Wiring:
    engine = Engine(host, config.paths.state_dir, catalog, incidents=store,
                    secrets_from=(config.service.argv, config.service.env))  # stored launches are redacted
    budget = RestartBudget.from_policy(config.policy, clock=clock.monotonic)
    canary = periodic = None
    if config.canary.enabled:  # the canary package (~0.25 MB resident) only for a daemon that runs it
        from ..health.canary import Canary, PeriodicCanary

        canary = Canary(store, config.canary)
        periodic = PeriodicCanary(canary, clock.monotonic)
    return Wiring(config, host, store, rules, catalog, engine, budget, canary, periodic, prober, clock,
                  preflight_checks)
