"""Shared set-ups for the daemon loop tests: demo configs, a crash-loop config, store readers."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import tomllib
from dataclasses import replace
from pathlib import Path

from ddtreed.cli.run_cmd import stop_on
from ddtreed.config import Config, from_mapping, load
from ddtreed.loop.daemon import Daemon
from ddtreed.demo import free_port, prepare, to_toml
from ddtreed.demo.engine_install import install_engine
from ddtreed.incidents import Store
from ddtreed.records import Healthy, Outcome

ROOT = Path(__file__).resolve().parent.parent
CRASH_LOOP = ROOT / "tests" / "programs" / "sglang_crash_loop.py"
RUNNER = Path("ddtreed_demo_engine") / "cuda_graph_runner.py"


def demo_config(directory: Path, *, preflight: bool = False, policy: dict | None = None,
                probe: dict | None = None, **options) -> Config:
    """The demo service (one rank, CPU, short load) under a config tweaked for the test."""
    options = {"tp": 1, "device": "cpu", "load_seconds": 0.3, **options}
    config = load(prepare(directory, **options))
    return replace(config, preflight=replace(config.preflight, enabled=preflight),
                   policy=replace(config.policy, **(policy or {})),
                   probe=replace(config.probe, **(probe or {})))


class Run:
    """A finished daemon with the outcomes it emitted (attribute reads go to the daemon)."""

    def __init__(self, daemon: Daemon):
        self.daemon = daemon
        self.outcomes: list[Outcome] = []
        daemon.subscribe(lambda event: self.outcomes.append(event) if isinstance(event, Outcome) else None)

    def __getattr__(self, name: str):
        return getattr(self.daemon, name)


def run_daemon(config: Config, timeout: float = 150.0, *, stop_after_incident: bool = False,
               stop_when_healthy: bool = False, **options) -> tuple[Run, int]:
    """The real loop in this process: stopped through its queue after one incident / once healthy,
    or when `timeout` passes at the latest."""
    daemon = Daemon(config, **options)
    run = Run(daemon)
    if stop_after_incident or stop_when_healthy:
        stop_on(daemon, Outcome if stop_after_incident else Healthy)
    timer = threading.Timer(timeout, daemon.request_stop)
    timer.start()
    try:
        code = daemon.run()
    finally:
        timer.cancel()
    return run, code


def runner_path(config: Config) -> Path:
    return Path(config.service.site_packages) / RUNNER


def tree_hashes(directory: str | Path) -> dict[str, str]:
    """sha256 of every file below `directory` (byte-compiled caches left out: Python rewrites them)."""
    root = Path(directory)
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file() and "__pycache__" not in path.parts}


def steps_of(store: Store, incident_id: int) -> list[str]:
    return [step["step"] for step in store.get(incident_id)["steps"]]


def crash_loop_config(directory: Path, *, max_restarts: int = 3, **policy) -> Path:
    """A config whose service dies with the founding traceback on every start, whatever its flags.

    The demo engine is installed as its site-packages, so the width patch applies (and then fails).
    """
    directory.mkdir(parents=True, exist_ok=True)
    site_packages = directory / "site-packages"
    install_engine(site_packages)
    argv = [sys.executable, str(CRASH_LOOP), "--model-path", str(directory / "target"),
            "--speculative-algorithm", "DDTREE", "--speculative-num-draft-tokens", "8",
            "--speculative-ddtree-budget", "32", "--tp-size", "2", "--port", str(free_port())]
    tables = {
        "service": {"argv": argv, "python": sys.executable, "site_packages": str(site_packages),
                    "env": {"CRASH_LOOP_STARTS": str(directory / "starts.txt")}, "cwd": str(directory)},
        "paths": {"log_dir": str(directory / "logs"), "state_dir": str(directory / "state")},
        "policy": {"mode": "auto", "max_restarts": max_restarts, "restart_window_s": 300.0,
                   "backoff_initial_s": 0.1, "backoff_max_s": 0.4, "stop_grace_s": 2.0, **policy},
        "probe": {"startup_timeout_s": 30.0, "verify_window_s": 1.0, "poll_interval_s": 0.1},
        "preflight": {"enabled": False},
    }
    path = directory / "ddtreed.toml"
    path.write_text(to_toml(tables))
    from_mapping(tomllib.loads(path.read_text()))  # a bad table fails here, not in the daemon
    return path


def starts(directory: Path) -> list[str]:
    path = directory / "starts.txt"
    return path.read_text().splitlines() if path.exists() else []


def ddtreed(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """The CLI as a user runs it."""
    return subprocess.run([sys.executable, "-m", "ddtreed", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})
