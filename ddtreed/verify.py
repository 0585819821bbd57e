"""Is the service healthy after a (re)start? Startup milestones, probes, acceptance, a window.

A fix is kept only when all of these hold: the service reaches readiness within the startup
budget, `/health_generate` answers, a real greedy generation succeeds, the acceptance length has
not collapsed (floor, and a fraction of the learned baseline), and no crash within the window.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from .config import ProbeConfig
from .records import Crash, ExitStatus, HealthResult


def flatten(groups: list[tuple[Crash, ...]]) -> tuple[Crash, ...]:
    """Every crash handed out in one turn: one failure of the service."""
    return tuple(crash for group in groups for crash in group)

if TYPE_CHECKING:
    from .daemon import Daemon

log = structlog.get_logger(__name__)

PROGRESS_EVERY_S = 10.0  # a 10-minute model load should show signs of life, not flood the log
CRASH_SETTLE_S = 2.0  # after a failed probe, the ranks' tracebacks arrive within this


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str
    crashes: tuple[Crash, ...] = ()
    exit_status: ExitStatus | None = None
    accept_length: float | None = None
    stage: str = ""


class Verifier:
    def __init__(self, daemon: "Daemon", probe: ProbeConfig, store):
        self.daemon = daemon
        self.probe = probe
        self.store = store

    def verify(self, first_start: bool) -> Verdict:
        for step in (self._startup, self._health, self._generate):
            verdict = step()
            if not verdict.ok:
                return verdict
            generated = verdict
        verdict = self._acceptance(generated)
        if verdict.ok and not first_start:
            verdict = self._window(verdict)
        if verdict.ok:
            verdict = self._canary(verdict)
        return verdict

    # ---- stages ----

    def _startup(self) -> Verdict:
        daemon = self.daemon
        started = time.monotonic()
        deadline = started + self.probe.startup_timeout_s
        next_progress = started + PROGRESS_EVERY_S
        prober = self.daemon.prober()
        next_health_probe = started + 2.0
        while time.monotonic() < deadline:
            groups = daemon.pump(self.probe.poll_interval_s)
            if groups:
                return Verdict(False, "crashed during startup", flatten(groups), daemon.supervisor.poll(),
                               stage="startup")
            exit_status = daemon.supervisor.poll()
            if exit_status is not None:
                crashes = daemon.drain_logs()
                return Verdict(False, f"service {exit_status.describe()} during startup", crashes, exit_status,
                               stage="startup")
            if daemon.milestones.ready:
                return Verdict(True, "ready", stage="startup")
            now = time.monotonic()
            if now >= next_health_probe:  # logs may be elsewhere: readiness by HTTP counts too
                next_health_probe = now + 5.0
                if prober.health(time.monotonic() + 1.0).ok:
                    return Verdict(True, "ready (health probe)", stage="startup")
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                log.info("waiting_for_startup", elapsed_s=round(now - started),
                         budget_s=self.probe.startup_timeout_s, progress=daemon.milestones.progress_text())
        return Verdict(False, f"not ready within {self.probe.startup_timeout_s:.0f}s", stage="startup")

    def _health(self) -> Verdict:
        result = self.daemon.prober().health(time.monotonic() + self.probe.health_timeout_s)
        return self._from_probe(result)

    def _generate(self) -> Verdict:
        result = self.daemon.prober().generate(self.probe.generate_prompt, self.probe.generate_max_new_tokens,
                                         time.monotonic() + self.probe.generate_timeout_s)
        return self._from_probe(result)

    def _acceptance(self, generated: Verdict) -> Verdict:
        accept = generated.accept_length
        if accept is None or not self.daemon.context.speculative_algorithm:
            return generated
        floor = self.probe.min_accept_length
        if floor is not None and accept < floor:
            return Verdict(False, f"acceptance length {accept:.2f} below the floor {floor:.2f}",
                           accept_length=accept, stage="acceptance")
        key = baseline_key(self.daemon.context)
        baseline = self.store.baseline(key)
        if baseline is not None and accept < baseline * self.probe.accept_baseline_fraction:
            return Verdict(False, f"acceptance length {accept:.2f} collapsed below "
                                  f"{self.probe.accept_baseline_fraction:.0%} of the baseline {baseline:.2f}",
                           accept_length=accept, stage="acceptance")
        self.store.add_accept_sample(key, accept)
        return generated

    def _window(self, verdict: Verdict) -> Verdict:
        """Watch for recurrence; a second generation at the end proves it still serves."""
        daemon = self.daemon
        deadline = time.monotonic() + self.probe.verify_window_s
        while time.monotonic() < deadline:
            groups = daemon.pump(self.probe.poll_interval_s)
            if groups:
                return Verdict(False, "crashed again within the verification window", flatten(groups),
                               daemon.supervisor.poll(), stage="window")
            exit_status = daemon.supervisor.poll()
            if exit_status is not None:
                return Verdict(False, f"service {exit_status.describe()} within the verification window",
                               daemon.drain_logs(), exit_status, stage="window")
        return verdict

    def _canary(self, verdict: Verdict) -> Verdict:
        return self.daemon.canary_check(verdict)

    # ---- helpers ----

    def _from_probe(self, result: HealthResult) -> Verdict:
        if result.ok:
            return Verdict(True, result.detail, accept_length=result.accept_length, stage=result.stage)
        daemon = self.daemon
        deadline = time.monotonic() + CRASH_SETTLE_S
        groups: list[tuple[Crash, ...]] = []
        while time.monotonic() < deadline and not groups:  # a failed request usually means a crash
            groups = daemon.pump(0.1)
            if daemon.supervisor.poll() is not None:
                break
        exit_status = daemon.supervisor.poll()
        if not groups and exit_status is not None:
            groups = [daemon.drain_logs()]
        crashes = flatten(groups)
        return Verdict(False, f"{result.stage} probe failed: {result.detail}", crashes, exit_status,
                       stage=result.stage)


def baseline_key(context) -> str:
    """Acceptance baselines are per model, draft model and speculative flags."""
    parts = {
        "model": context.model_path, "draft": context.draft_model_path,
        "algorithm": context.speculative_algorithm, "block": context.block_size,
        "budget": context.ddtree_budget,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
