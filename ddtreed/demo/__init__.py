"""The demo: an SGLang-like DDTree service with the founding width bug, and its ddtreed config.

`prepare(demo_dir)` installs the demo engine into `demo_dir/site-packages/` and writes a ddtreed
config that launches `python -m ddtreed.demo.server` against it. Importing this package never
imports torch: only the service's rank processes (`ddtreed.demo.workload`) do.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from .engine_install import ENGINE_NAME, install_engine

__all__ = ["prepare", "demo_argv", "ENGINE_NAME", "REPO_ROOT"]

# The directory holding the `ddtreed` package: the service imports ddtreed.demo from there.
REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def prepare(demo_dir: str | Path, *, budget: int = 32, block_size: int = 8, tp: int = 2,
            device: str = "auto", port: int | None = None, fault: str | None = None,
            algorithm: str = "DDTREE", garbage_above_budget: int | None = None,
            collapse_acceptance: bool = False, load_seconds: float = 2.0,
            policy_mode: str = "auto", extra_args: tuple[str, ...] = (),
            state_dir: str | Path | None = None) -> Path:
    """Install a fresh (unpatched) engine, write `demo_dir/ddtreed.toml`, return its path.

    The incident database goes to `state_dir` (default `demo_dir/state`).
    """
    demo_dir = Path(demo_dir).resolve()
    state_dir = Path(state_dir).resolve() if state_dir is not None else demo_dir / "state"
    site_packages = demo_dir / "site-packages"
    install_engine(site_packages)
    target, draft = _model_dirs(demo_dir, block_size)
    port = port or free_port()
    argv = demo_argv(target, draft, port=port, budget=budget, block_size=block_size, tp=tp,
                     device=device, fault=fault, algorithm=algorithm,
                     garbage_above_budget=garbage_above_budget,
                     collapse_acceptance=collapse_acceptance, load_seconds=load_seconds)
    config = {
        "service": {
            "argv": argv + list(extra_args),
            "python": sys.executable,
            "env": {"PYTHONPATH": f"{site_packages}:{REPO_ROOT}", "PYTHONUNBUFFERED": "1"},
            "cwd": str(demo_dir),
            "host": "127.0.0.1",
            "port": port,
            "site_packages": str(site_packages),
        },
        "paths": {"log_dir": str(demo_dir / "logs"), "state_dir": str(state_dir),
                  "log_max_bytes": 8 * 1024 * 1024, "log_backups": 3},
        # A demo should close its loop in well under a minute: short grace, backoff and probes.
        "policy": {"mode": policy_mode, "stop_grace_s": 3.0, "backoff_initial_s": 0.2,
                   "backoff_max_s": 2.0, "max_restarts": 5, "restart_window_s": 300.0},
        "probe": {"startup_timeout_s": 90.0, "health_timeout_s": 10.0, "generate_timeout_s": 30.0,
                  "generate_max_new_tokens": 16, "verify_window_s": 3.0, "poll_interval_s": 0.2},
    }
    path = demo_dir / "ddtreed.toml"
    path.write_text(to_toml(config))
    return path


def demo_argv(target: Path, draft: Path, *, port: int, budget: int, block_size: int, tp: int,
              device: str, fault: str | None, algorithm: str, garbage_above_budget: int | None,
              collapse_acceptance: bool, load_seconds: float) -> list[str]:
    """The service's launch command, flag for flag as one would launch SGLang."""
    argv = [sys.executable, "-m", "ddtreed.demo.server", "--model-path", str(target),
            "--tp-size", str(tp), "--speculative-algorithm", algorithm,
            "--speculative-draft-model-path", str(draft),
            "--speculative-num-draft-tokens", str(block_size)]
    if algorithm.upper() == "DDTREE":
        argv += ["--speculative-ddtree-budget", str(budget)]
    # A full tree (budget > block - 1) needs the triton backend, as the DDTree server demands.
    argv += ["--page-size", "1", "--attention-backend", "triton", "--host", "127.0.0.1", "--port", str(port),
             "--device", device, "--load-seconds", str(load_seconds)]
    if fault and fault != "none":
        argv += ["--fault", fault]
    if fault == "oom-at-capture":  # capture memory grows with the batch sizes captured
        argv += ["--cuda-graph-max-bs", "8"]
    if garbage_above_budget is not None:
        argv += ["--garbage-above-budget", str(garbage_above_budget)]
    if collapse_acceptance:
        argv.append("--collapse-acceptance")
    return argv


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def to_toml(tables: dict[str, dict]) -> str:
    """The small TOML subset the config needs: tables of strings, numbers, bools, lists, inline tables."""
    lines = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in table.items())
        lines.append("")
    return "\n".join(lines)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _model_dirs(demo_dir: Path, block_size: int) -> tuple[Path, Path]:
    """Stand-in model directories with the config.json files SGLang (and ddtreed) read."""
    target, draft = demo_dir / "models" / "demo-target", demo_dir / "models" / "demo-draft"
    for path, config in ((target, {"architectures": ["DemoBigramForCausalLM"], "vocab_size": 64}),
                         (draft, {"architectures": ["DFlashDraftModel"], "block_size": block_size,
                                  "dflash_config": {"block_size": block_size}})):
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return target, draft
