"""The daemon's TOML configuration: load, validate, and name the key that is wrong."""

from __future__ import annotations

import os
import tomllib
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .paths import untrusted
from .records import POLICIES


class ConfigError(ValueError):
    """A config problem, worded as one line that names the file and key."""


@dataclass(frozen=True)
class ServiceConfig:
    argv: tuple[str, ...]
    python: str | None = None  # the service's interpreter (for version / site-packages probes)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    host: str = "127.0.0.1"  # where the service's HTTP port is reached
    port: int | None = None  # default: --port from argv, else 30000
    remote: str | None = None  # inventory host name when the service runs on another host
    inventory: str | None = None  # inventory file for `remote`
    site_packages: str | None = None  # override the probed site-packages directory


@dataclass(frozen=True)
class PathsConfig:
    log_dir: str = "/var/log/ddtreed"
    state_dir: str = "/var/lib/ddtreed"
    extra_logs: tuple[str, ...] = ()
    rules_dirs: tuple[str, ...] = ()  # default: the shipped rules/
    remediations_dirs: tuple[str, ...] = ()  # default: the shipped remediations/
    log_max_bytes: int = 64 * 1024 * 1024
    log_backups: int = 5


@dataclass(frozen=True)
class PolicyConfig:
    mode: str = "auto"  # auto | advise | off
    max_restarts: int = 5  # within restart_window_s; beyond it the service is given up
    restart_window_s: float = 600.0
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    stop_grace_s: float = 30.0
    max_remediations_per_incident: int = 4


@dataclass(frozen=True)
class ProbeConfig:
    startup_timeout_s: float = 1800.0  # a 1T model loads in ~11 minutes; leave room
    health_timeout_s: float = 30.0
    generate_prompt: str = "The capital of France is"
    generate_max_new_tokens: int = 16
    generate_timeout_s: float = 60.0
    verify_window_s: float = 60.0  # watch for recurrence this long after healthy
    min_accept_length: float | None = None  # floor; None = only the learned baseline
    accept_baseline_fraction: float = 0.5  # fail below this fraction of the learned baseline
    poll_interval_s: float = 0.5
    # while serving (ddtreed/health/serving.py): a health probe every serving_interval_s (0: off), an
    # incident after serving_failures failures in a row; `cuda graph: False` on eager_fallback_lines
    # decode lines in a row after a capture is the silent eager fallback
    serving_interval_s: float = 10.0
    serving_timeout_s: float = 5.0
    serving_failures: int = 3
    eager_fallback_lines: int = 5


@dataclass(frozen=True)
class PreflightConfig:
    enabled: bool = True
    # check ids whose would-crash findings block the launch. A taken port is certain to fail, and
    # only after the whole model load (SGLang binds its HTTP port last): block it by default.
    block_on: tuple[str, ...] = ("port-in-use",)


@dataclass(frozen=True)
class CanaryConfig:
    enabled: bool = True
    prompts: tuple[str, ...] = ()  # empty: the shipped default set
    max_new_tokens: int = 32
    interval_s: float = 0.0  # 0: only after restarts and remediations
    max_divergent_tokens: int = 0  # differing positions tolerated inside the agreement window
    agree_tokens: int = 8  # leading tokens that must agree with a golden (0: every token)
    golden_samples: int = 3  # requests per prompt when goldens are recorded; distinct outputs kept
    isolate_cache: bool = True  # each request in its own prefix-cache namespace (`extra_key`)
    repetition_limit: int = 0  # the same token this many times in a row is degenerate (0: off)
    degenerate_loop_share: float = 0.9  # one loop covering this share of an output is degenerate
    degenerate_loop_period: int = 4  # ... a loop of at most this many tokens
    collapse_accept_length: float = 1.2  # at or below: acceptance collapsed
    collapse_baseline_fraction: float = 0.5  # below this share of the learned baseline: collapsed
    timeout_s: float = 60.0  # deadline budget for one whole canary run (all prompts)
    busy_requests: int = 4  # periodic runs wait while this many requests run or queue (/metrics)


@dataclass(frozen=True)
class MetricsConfig:
    listen: str | None = None  # e.g. "127.0.0.1:9477"; off when unset


@dataclass(frozen=True)
class NotifyConfig:
    """Hooks run on escalation, give-up, silent corruption, recurrence (see notify.Hooks)."""

    webhook: str | None = None  # POST the JSON here
    command: tuple[str, ...] = ()  # run this, the JSON on stdin
    timeout_s: float = 10.0  # per attempt
    retries: int = 2  # after the first attempt; delays double from retry_delay_s
    retry_delay_s: float = 2.0
    events: tuple[str, ...] = ()  # empty: all of notify.EVENTS


@dataclass(frozen=True)
class IncidentsConfig:
    """Retention of the incident database (ddtreed/incidents/retention.py; 0: no such limit).

    Never pruned, whatever these say: open incidents, escalated ones nobody acknowledged
    (`ddtreed incidents ack ID`), and those a recorded remediation refers to.
    """

    keep: int = 10_000  # the newest this many incidents stay (~70 MB of the typical shape)
    max_age_days: float = 180.0  # closed incidents older than this go (two quarters of reviews)


@dataclass(frozen=True)
class Config:
    service: ServiceConfig
    paths: PathsConfig = PathsConfig()
    policy: PolicyConfig = PolicyConfig()
    probe: ProbeConfig = ProbeConfig()
    preflight: PreflightConfig = PreflightConfig()
    canary: CanaryConfig = CanaryConfig()
    metrics: MetricsConfig = MetricsConfig()
    notify: NotifyConfig = NotifyConfig()
    incidents: IncidentsConfig = IncidentsConfig()
    source: str = "<memory>"

    @property
    def database(self) -> Path:
        return Path(self.paths.state_dir) / "incidents.sqlite3"

    def with_state_dir(self, state_dir: str) -> "Config":
        return replace(self, paths=replace(self.paths, state_dir=state_dir))


_SECTIONS = {
    "service": ServiceConfig,
    "paths": PathsConfig,
    "policy": PolicyConfig,
    "probe": ProbeConfig,
    "preflight": PreflightConfig,
    "canary": CanaryConfig,
    "metrics": MetricsConfig,
    "notify": NotifyConfig,
    "incidents": IncidentsConfig,
}


def load(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file; raise ConfigError naming the file and key."""
    path = Path(path)
    _check_trusted(path)
    return from_mapping(read_toml(path, ConfigError, "config"), source=str(path), base_dir=path.parent)


def _check_trusted(path: Path) -> None:
    """The config's argv runs as ddtreed's user (root): held to the rule files' trust rules."""
    try:
        refusal = untrusted(path)
    except FileNotFoundError:
        return  # read_toml words it
    except OSError as problem:
        raise ConfigError(f"{path}: cannot examine: {problem.strerror}") from None
    if refusal:
        raise ConfigError(f"{path}: {refusal}")


def read_toml(path: Path, error: type[Exception], what: str) -> dict[str, Any]:
    """A TOML file as a table, or `error` with one line naming the file (config, inventory)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file") from None
    except OSError as problem:
        raise error(f"{path}: cannot read: {problem.strerror}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as problem:
        raise error(f"{path}: invalid TOML: {problem}") from None


def from_mapping(raw: dict[str, Any], source: str = "<memory>", base_dir: Path | None = None) -> Config:
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"{source}: unknown section [{unknown[0]}] (known: {', '.join(_SECTIONS)})")
    if "service" not in raw:
        raise ConfigError(f"{source}: missing section [service] (it holds the launch argv)")
    sections = {name: _section(source, name, cls, raw.get(name, {})) for name, cls in _SECTIONS.items()}
    config = Config(source=source, **sections)
    if base_dir is not None:
        config = _resolve_relative(config, base_dir)
    _check(config)
    return config


def _section(source: str, name: str, cls: type, raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: [{name}] must be a table")
    known = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown key {name}.{key} (known: {', '.join(known)})")
        values[key] = _coerce(source, f"{name}.{key}", known[key].type, value)
    missing = [
        f.name for f in fields(cls)
        if f.name not in values and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise ConfigError(f"{source}: missing key {name}.{missing[0]}")
    return cls(**values)


def _coerce(source: str, key: str, annotation: str, value: Any) -> Any:
    """Check one value against its field annotation (annotations are strings here)."""
    def fail(expected: str) -> ConfigError:
        return ConfigError(f"{source}: {key} must be {expected}, got {type(value).__name__} {value!r}")

    optional = "None" in annotation
    if value is None and optional:
        return None
    base = annotation.replace(" | None", "")
    if base.startswith("tuple[str"):
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise fail("a list of strings")
        return tuple(value)
    if base.startswith("dict[str, str]"):
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise fail("a table of strings")
        return dict(value)
    if base == "bool":
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("an integer")
        return value
    if base == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail("a number")
        return float(value)
    if base == "str":
        if not isinstance(value, str):
            raise fail("a string")
        return value
    raise ConfigError(f"{source}: {key}: unsupported type {annotation}")


def _resolve_relative(config: Config, base_dir: Path) -> Config:
    """Relative directories in a config file are relative to that file, not to the cwd."""
    def resolve(value: str) -> str:
        path = Path(os.path.expanduser(value))
        return str(path if path.is_absolute() else (base_dir / path).resolve())

    paths = config.paths
    paths = replace(
        paths,
        log_dir=resolve(paths.log_dir),
        state_dir=resolve(paths.state_dir),
        extra_logs=tuple(resolve(p) for p in paths.extra_logs),
        rules_dirs=tuple(resolve(p) for p in paths.rules_dirs),
        remediations_dirs=tuple(resolve(p) for p in paths.remediations_dirs),
    )
    service = config.service
    if service.cwd is not None:
        service = replace(service, cwd=resolve(service.cwd))
    if service.inventory is not None:
        service = replace(service, inventory=resolve(service.inventory))
    return replace(config, paths=paths, service=service)


def _check(config: Config) -> None:
    source = config.source
    if not config.service.argv:
        raise ConfigError(f"{source}: service.argv must name the launch command")
    if config.policy.mode not in POLICIES:
        raise ConfigError(f"{source}: policy.mode must be one of {', '.join(POLICIES)}, got {config.policy.mode!r}")
    port = config.service.port
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"{source}: service.port must be 1..65535, got {port}")
    positive = {
        "policy.max_restarts": config.policy.max_restarts,
        "policy.stop_grace_s": config.policy.stop_grace_s,
        "policy.backoff_initial_s": config.policy.backoff_initial_s,
        "probe.startup_timeout_s": config.probe.startup_timeout_s,
        "probe.health_timeout_s": config.probe.health_timeout_s,
        "probe.generate_max_new_tokens": config.probe.generate_max_new_tokens,
        "probe.serving_timeout_s": config.probe.serving_timeout_s,
        "probe.serving_failures": config.probe.serving_failures,
        "probe.eager_fallback_lines": config.probe.eager_fallback_lines,
        "paths.log_max_bytes": config.paths.log_max_bytes,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{source}: {key} must be > 0, got {value}")
    if config.probe.serving_interval_s < 0:
        raise ConfigError(f"{source}: probe.serving_interval_s must be >= 0 (0: no probes while serving)")
    if config.policy.backoff_max_s < config.policy.backoff_initial_s:
        raise ConfigError(f"{source}: policy.backoff_max_s must be >= policy.backoff_initial_s")
    retention = {"incidents.keep": config.incidents.keep, "incidents.max_age_days": config.incidents.max_age_days}
    for key, value in retention.items():
        if value < 0:
            raise ConfigError(f"{source}: {key} must be >= 0 (0: no limit), got {value:g}")
    if not 0 < config.probe.accept_baseline_fraction <= 1:
        raise ConfigError(f"{source}: probe.accept_baseline_fraction must be in (0, 1]")
    from .ops.notify import check_hooks

    hooks = config.notify
    problem = check_hooks(hooks.webhook, hooks.command, hooks.timeout_s, hooks.retries,
                          hooks.retry_delay_s, hooks.events)
    if problem:
        raise ConfigError(f"{source}: {problem}")
