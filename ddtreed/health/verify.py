"""Is the service healthy after a (re)start? Startup milestones, probes, acceptance, a window.

A stage with inputs and a typed result: `verify(feed, prober, clock, probe, context, baselines)`
returns a `Verdict`. A fix is kept only when all of these hold: the service reaches readiness
within the startup budget, `/health_generate` answers, a real greedy generation succeeds, the
acceptance length has not collapsed (floor, and a fraction of the learned baseline), no crash
within the window, and the output canary (when given) passes.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable, Protocol

import structlog

from ..ops import progress
from ..clock import Clock
from ..config import ProbeConfig
from ..incidents.state import baseline_key as store_baseline_key
from ..records import Crash, ExitStatus, HealthResult, ServiceContext, Verdict

log = structlog.get_logger(__name__)

__all__ = ["Baselines", "LogFeed", "Verdict", "baseline_key", "flatten", "verify"]

PROGRESS_EVERY_S = progress.PROGRESS_EVERY_S  # a 10-minute load shows signs of life every few seconds
CRASH_SETTLE_S = 2.0  # after a failed probe, the ranks' tracebacks arrive within this
HEALTH_PROBE_FIRST_S = 2.0  # logs may be elsewhere: readiness by HTTP counts too, from then on
HEALTH_PROBE_EVERY_S = 5.0
PROBE_TURN_S = 0.2  # how often a waiting probe lets the loop answer signals
CANARY_RUNS = 3  # a canary cut by lost members without crash text runs this many times at most


class LogFeed(Protocol):
    """The running service as verification sees it (ddtreed.service.service_run.ServiceRun)."""

    @property
    def ready(self) -> bool: ...

    def progress_text(self) -> str: ...

    def pump(self, timeout: float) -> list[tuple[Crash, ...]]: ...

    def poll(self) -> ExitStatus | None: ...

    def drain(self) -> tuple[Crash, ...]: ...

    def turn(self) -> None:
        """Answer signals now (raises the loop's `Stopping` on a stop request)."""
        ...


def bind_failure(feed) -> Crash | None:
    """The service's HTTP server failed to bind its port (real 0.5.16 logs it, then prints a false
    ready line): a port-in-use crash, whatever answers on the port afterwards."""
    text = getattr(feed, "bind_error", None)
    if not text:
        return None
    message = text.split("ERROR:", 1)[-1].strip()
    return Crash(kind="traceback", exception="OSError", message=message, source="service log",
                 excerpt=(text,))


class Prober(Protocol):
    def health(self, deadline: float) -> HealthResult: ...

    def generate(self, prompt: str, max_new_tokens: int, deadline: float) -> HealthResult: ...


class Baselines(Protocol):
    def baseline(self, key: str) -> float | None: ...

    def add_accept_sample(self, key: str, accept_length: float) -> None: ...


def flatten(groups: list[tuple[Crash, ...]]) -> tuple[Crash, ...]:
    """Every crash handed out in one turn: one failure of the service."""
    return tuple(crash for group in groups for crash in group)


def baseline_key(context: ServiceContext) -> str:
    """Acceptance baselines are per model, draft model and speculative flags."""
    return store_baseline_key(context.model_path, context.draft_model_path, {
        "algorithm": context.speculative_algorithm, "block": context.block_size,
        "budget": context.ddtree_budget})


Report = Callable[[dict[str, Any]], None]


def verify(feed: LogFeed, prober: Prober, clock: Clock, probe: ProbeConfig, context: ServiceContext,
           baselines: Baselines, *, window: bool, canary: Callable[[Verdict], Verdict] | None = None,
           report: Report | None = None, on_healthy: Callable[[Verdict], None] | None = None,
           not_a_crash: Callable[[tuple[Crash, ...]], bool] | None = None) -> Verdict:
    """Startup, health, generate, acceptance, then (`window`) the verification window, then the canary.

    `report(progress)` receives the startup progress and the recurrence watch (`ddtreed.ops.progress`)
    every few seconds; `on_healthy(verdict)` is called the moment the probes passed, before the
    window, so the incident's `healthy` step has the time the service was healthy.
    `not_a_crash(crashes)` judges crash text read in the window (the loop's `observed`: True when
    the service stayed up and healthy, the text then no recurrence); without it every one is.
    """
    stages = _Stages(feed, prober, clock, probe, report or (lambda shown: None), not_a_crash)
    for stage in (stages.startup, stages.health, stages.generate):
        verdict = stage()
        if not verdict.ok:
            return verdict
    verdict = acceptance(verdict, context, probe, baselines)
    if verdict.ok and on_healthy is not None:
        on_healthy(verdict)
    if verdict.ok and window:
        verdict = stages.window(verdict)
    if verdict.ok and canary is not None:
        verdict = stages.canary(lambda: canary(verdict))  # cut by a death: the death's text
    return verdict


def acceptance(generated: Verdict, context: ServiceContext, probe: ProbeConfig, baselines: Baselines) -> Verdict:
    """The acceptance length against its floor and the learned baseline; a healthy one is learned."""
    accept = generated.accept_length
    if accept is None or not context.speculative_algorithm:
        return generated
    floor = probe.min_accept_length
    if floor is not None and accept < floor:
        return Verdict(False, f"acceptance length {accept:.2f} below the floor {floor:.2f}",
                       accept_length=accept, stage="acceptance")
    key = baseline_key(context)
    baseline = baselines.baseline(key)
    if baseline is not None and accept < baseline * probe.accept_baseline_fraction:
        return Verdict(False, f"acceptance length {accept:.2f} collapsed below "
                              f"{probe.accept_baseline_fraction:.0%} of the baseline {baseline:.2f}",
                       accept_length=accept, stage="acceptance")
    baselines.add_accept_sample(key, accept)
    return generated


class _Stages:
    def __init__(self, feed: LogFeed, prober: Prober, clock: Clock, probe: ProbeConfig, report: Report,
                 not_a_crash: Callable[[tuple[Crash, ...]], bool] | None = None):
        self.feed, self.prober, self.clock, self.probe = feed, prober, clock, probe
        self.report = report
        self.not_a_crash = not_a_crash or (lambda crashes: False)

    def startup(self) -> Verdict:
        feed, clock = self.feed, self.clock
        started = clock.monotonic()
        deadline = started + self.probe.startup_timeout_s
        next_progress = started  # the first report at once: `status` shows the phase from the start
        next_health_probe = started + HEALTH_PROBE_FIRST_S
        while clock.monotonic() < deadline:
            groups = feed.pump(self.probe.poll_interval_s)
            if groups:
                return Verdict(False, "crashed during startup", flatten(groups), feed.poll(), stage="startup")
            exit_status = feed.poll()
            if exit_status is not None:
                return Verdict(False, f"service {exit_status.describe()} during startup", feed.drain(),
                               exit_status, stage="startup")
            bound = bind_failure(feed)
            if bound is not None:  # the ready line that may follow is not this process' readiness
                return Verdict(False, f"the HTTP server could not bind its port: {bound.message}", (bound,),
                               feed.poll(), stage="startup")
            if feed.ready:
                return Verdict(True, "ready", stage="startup")
            now = clock.monotonic()
            if now >= next_health_probe:
                next_health_probe = now + HEALTH_PROBE_EVERY_S
                # a 200 from a port another process holds is not this launch's readiness
                owns = getattr(feed, "owns_port", lambda: None)()
                if owns is not False and self.prober.health(clock.monotonic() + 1.0).ok:
                    return Verdict(True, "ready (health probe)", stage="startup")
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                shown = progress.startup(feed.progress_text(), now - started, self.probe.startup_timeout_s)
                log.info("startup_progress", phase=shown["phase"], elapsed_s=round(now - started),
                         budget_s=self.probe.startup_timeout_s)
                self.report(shown)
        return Verdict(False, f"not ready within {self.probe.startup_timeout_s:.0f}s", stage="startup")

    def health(self) -> Verdict:
        deadline = self.clock.monotonic() + self.probe.health_timeout_s
        return self._probed(lambda: self.prober.health(deadline))

    def generate(self) -> Verdict:
        probe = self.probe
        deadline = self.clock.monotonic() + probe.generate_timeout_s
        return self._probed(
            lambda: self.prober.generate(probe.generate_prompt, probe.generate_max_new_tokens, deadline))

    def _probed(self, request: Callable[[], HealthResult]) -> Verdict:
        """The probe's verdict. A probe the service's death cut short (its exit, a member of its
        session gone: `ServiceRun.death`) fails at once, and the settle that follows reads what
        the service wrote: the incident is the death, read within a second of it, not a
        generation that waited out its timeout. A lost member that leaves neither crash text nor
        an exit in that settle is no failure by itself (the project's rule: a loss confirms crash
        text, it does not stand in for it): the probe is sent again under the same deadline."""
        while True:
            cuts = getattr(self.feed, "member_cuts", 0)
            verdict = self._from_probe(self._answering(request))
            if verdict.ok or verdict.crashes or verdict.exit_status is not None \
                    or getattr(self.feed, "member_cuts", 0) == cuts:
                return verdict
            log.warning("probe.sent_again", stage=verdict.stage, detail=verdict.detail,
                        hint="a member left the session without a crash line: the same probe, the same deadline")

    def canary(self, run: Callable[[], Verdict]) -> Verdict:
        """The canary's verdict, with what the service wrote when it failed without a crash of its
        own. As for a probe, a run a lost member cut short that left neither crash text nor an
        exit is no failure by itself: the canary runs again, CANARY_RUNS times in all at most
        (each run has its own deadline; each loss cuts one request)."""
        for attempt in range(1, CANARY_RUNS + 1):
            cuts = getattr(self.feed, "member_cuts", 0)
            verdict = self.settled(run())
            if verdict.ok or verdict.crashes or verdict.exit_status is not None \
                    or getattr(self.feed, "member_cuts", 0) == cuts or attempt == CANARY_RUNS:
                break
            log.warning("canary.run_again", detail=verdict.detail,
                        hint="a member left the session without a crash line: the canary runs again")
        return verdict

    def _answering(self, request: Callable[[], HealthResult]) -> HealthResult:
        """Run a probe (up to a minute for a generation) while the loop keeps answering signals."""
        done: list[HealthResult] = []
        worker = threading.Thread(target=lambda: done.append(request()), daemon=True, name="ddtreed-probe")
        worker.start()
        while worker.is_alive():
            self.feed.turn()  # a SIGTERM abandons the request (its thread ends at its deadline)
            worker.join(PROBE_TURN_S)
        return done[0] if done else HealthResult(False, "probe", "the probe raised; see the log")

    def window(self, verdict: Verdict) -> Verdict:
        """Watch for recurrence within the verification window."""
        feed, window_s = self.feed, self.probe.verify_window_s
        deadline = self.clock.monotonic() + window_s
        until = self.clock.time() + window_s
        next_report = self.clock.monotonic()
        while (now := self.clock.monotonic()) < deadline:
            if now >= next_report:
                next_report = now + PROGRESS_EVERY_S
                shown = progress.watching(window_s, until, self.clock.time())
                log.info("watching_for_recurrence", window_s=window_s, left_s=round(deadline - now))
                self.report(shown)
            groups = feed.pump(self.probe.poll_interval_s)
            if groups and not self.not_a_crash(flatten(groups)):  # text the service stayed healthy through
                return Verdict(False, "crashed again within the verification window", flatten(groups),
                               feed.poll(), stage="window")
            exit_status = feed.poll()
            if exit_status is not None:
                return Verdict(False, f"service {exit_status.describe()} within the verification window",
                               feed.drain(), exit_status, stage="window")
        return verdict

    def _from_probe(self, result: HealthResult) -> Verdict:
        if result.ok:
            return Verdict(True, result.detail, accept_length=result.accept_length, stage=result.stage)
        log.warning("verify.probe_failed", stage=result.stage, detail=result.detail,
                    elapsed_s=round(result.elapsed_s, 3))  # "interrupted: …" says why it was cut
        return self.settled(Verdict(False, f"{result.stage} probe failed: {result.detail}", stage=result.stage))

    def settled(self, verdict: Verdict) -> Verdict:
        """A failed verdict with no crash of its own, with what the service wrote within
        CRASH_SETTLE_S (or until it exited): a failed request usually means a crash."""
        if verdict.ok or verdict.crashes:
            return verdict
        feed = self.feed
        deadline = self.clock.monotonic() + CRASH_SETTLE_S
        groups: list[tuple[Crash, ...]] = []
        while self.clock.monotonic() < deadline and not groups:
            groups = feed.pump(0.1)
            if feed.poll() is not None:
                break
        exit_status = feed.poll()
        if not groups and exit_status is not None:
            groups = [feed.drain()]
        return replace(verdict, crashes=flatten(groups), exit_status=exit_status)
