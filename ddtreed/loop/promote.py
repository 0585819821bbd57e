"""Promotion: try the configuration a degradation step replaced, and keep it only if it verifies.

The daemon remembers a verified flag/env ladder step in the incident store (`Store.degraded`).
Once a precise fix exists (a patch applied, a newer sglang, a new rule), `promote` undoes those
steps, launches the service, verifies it exactly as the daemon verifies a fix (readiness, probes,
a real generation, acceptance, the window), and either keeps the better launch or puts the
degradation back. It uses a Daemon's public API (`revert`, `start_service`, `verify_start`, `attempt`, `close`), so it
runs while the daemon is stopped; its timeout is a stop request through the daemon's queue.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import structlog

from ..service import state_lock
from ..config import Config
from .daemon import Daemon
from ..incidents import Store, database_path
from .lifecycle import Stopping
from ..records import Application, Verdict
from .wiring import build

log = structlog.get_logger(__name__)

SLACK_S = 60.0  # beyond the probe budgets: stop, port release, process start


class PromoteError(Exception):
    """Promotion could not even be tried; one line for the user."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class PromoteResult:
    promoted: bool
    detail: str
    undone: list[str] = field(default_factory=list)  # degradation steps taken back for the trial
    restored: list[str] = field(default_factory=list)  # steps put back after a failed trial
    argv: list[str] = field(default_factory=list)  # the launch in force afterwards
    accept_length: float | None = None

    def text(self) -> str:
        head = "promoted" if self.promoted else "not promoted"
        lines = [f"{head}: {self.detail}", f"  trial without: {', '.join(self.undone)}"]
        if self.restored:
            lines.append(f"  degradation restored: {', '.join(self.restored)}")
        lines.append("  launch now: " + " ".join(self.argv))
        return "\n".join(lines)


def promote(config: Config, *, host=None, timeout: float | None = None) -> PromoteResult:
    """Undo the remembered degradation, restart, verify; keep the better launch only if it holds."""
    state_dir = config.paths.state_dir
    _refuse_while_supervised(state_dir)
    if not database_path(state_dir).exists():
        raise PromoteError(f"{database_path(state_dir)}: no incident database: nothing was degraded")
    store = Store(database_path(state_dir))
    degraded = store.degraded(config.source)
    if degraded is None:
        raise PromoteError(f"{config.source}: not degraded: no ladder step is remembered for this service")
    daemon = Daemon(config, wiring=build(config, host=host, store=store))
    steps = sorted((a for a in daemon.engine.status() if a.launch is not None), key=lambda a: a.applied_at)
    if not steps:
        store.clear_degraded(config.source)
        raise PromoteError(f"{config.source}: the remembered step {degraded['step_id']} is no longer applied "
                           "(reverted by hand?); cleared the stale record")
    daemon.launch.adopt(steps[-1].launch)
    for application in reversed(steps):
        daemon.revert(application)
    undone = [application.remediation_id for application in steps]
    log.info("promotion_trial", undone=undone, argv=daemon.argv)
    timer = threading.Timer(timeout or _budget(config), daemon.request_stop)  # through the loop's queue
    timer.start()
    try:
        verdict = trial(daemon)
        if verdict.ok:
            store.clear_degraded(config.source)
            log.info("promotion_kept", undone=undone, accept_length=verdict.accept_length)
            return PromoteResult(True, verdict.detail, undone, [], list(daemon.argv), verdict.accept_length)
        restored = _restore(daemon, steps)
        log.warning("promotion_rejected", detail=verdict.detail, restored=restored)
        return PromoteResult(False, verdict.detail, undone, restored, list(daemon.argv), verdict.accept_length)
    finally:
        timer.cancel()
        daemon.close()


def trial(daemon: Daemon) -> Verdict:
    """Start the service as launched now, verify it like a fix (window included), stop it."""
    try:
        if not daemon.start_service():
            return Verdict(False, "restart budget spent")
        daemon.lifecycle.enter("verifying", "trial: verifying")
        return daemon.verify_start(window=True)
    except Stopping:
        return Verdict(False, "stopped before the trial finished (timeout or signal)")
    finally:
        daemon.stop_service("trial over")


def _restore(daemon: Daemon, steps: list[Application]) -> list[str]:
    """Put the degradation back, step by step, as verified applications (it was verified before)."""
    incidents = {row["application_id"]: row["incident_id"] for row in daemon.store.applications()}
    restored = []
    for previous in steps:
        result = daemon.attempt(previous.remediation_id, incidents.get(previous.application_id))
        if result.outcome != "applied":
            log.error("promotion_restore_failed", remediation=previous.remediation_id, reason=result.detail)
            continue
        daemon.store.mark_application(result.application.application_id, "verified")
        restored.append(previous.remediation_id)
    return restored


def _refuse_while_supervised(state_dir: str) -> None:
    """Two supervisors of one service fight over its port: promotion wants the daemon stopped."""
    holder = state_lock.holder(state_dir)
    if holder is not None and holder != os.getpid():
        raise PromoteError(f"ddtreed (pid {holder}, {state_lock.lock_path(state_dir)}) supervises this service: "
                           "stop it, promote, then start it again")
    pid_file = Path(state_dir) / "ddtreed.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    if pid != os.getpid() and psutil.pid_exists(pid):
        raise PromoteError(f"ddtreed (pid {pid}, {pid_file}) supervises this service: stop it, promote, "
                           "then start it again")


def _budget(config: Config) -> float:
    probe = config.probe
    return (probe.startup_timeout_s + probe.health_timeout_s + probe.generate_timeout_s
            + probe.verify_window_s + config.policy.stop_grace_s + SLACK_S)
