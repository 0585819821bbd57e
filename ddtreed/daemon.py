"""The one module that wires the stages together: the supervision loop and its transitions.

    launch → logs → tracebacks → signature → rules → remediation → restart → health → incidents

Signal handlers only enqueue; the loop acts on them between steps (`_turn`). Every state change
goes through the lifecycle's transition table. The loop emits events (`Outcome`, `Healthy`) to
subscribers; the demo and tests stop it by `request_stop()`, which enqueues like a SIGTERM.
"""

from __future__ import annotations

import os
import queue
import signal
from dataclasses import replace
from typing import Callable

import structlog

from . import context as context_stage
from .canary import canary_crash
from .clock import Clock
from .config import Config, ConfigError, load
from .health import Prober
from .host import Host
from .incidents import Store
from .incidents.durable import DurableStore
from .lifecycle import Lifecycle, Stopping
from .logsetup import incident_context
from .metrics import start_metrics
from .notify import Notifier
from .preflight import run_preflight
from .preflight_gate import BLOCKED_RECHECK_S, confirm, decide
from .records import Application, Crash, ExitStatus, Healthy, Outcome, ServiceContext, Verdict
from .recovery import recover, verified_launch
from .remediation import Attempt, Launch, attempt, revert
from .service_run import ServiceRun
from .status import StatusBoard
from .verify import flatten, verify
from .wiring import Wiring, build, rebuild

log = structlog.get_logger(__name__)

__all__ = ["Daemon", "EXIT_GAVE_UP", "EXIT_OK", "Stopping"]

EXIT_OK = 0
EXIT_GAVE_UP = 3
TURN_S = 0.2  # the longest the loop goes without answering signals and the watchdog


class Daemon:
    def __init__(self, config: Config, *, wiring: Wiring | None = None, host: Host | None = None,
                 store: Store | None = None, notifier: Notifier | None = None, clock: Clock | None = None,
                 prober: Callable[[str], Prober] | None = None):
        self.wiring = wiring or build(config, host=host, store=store, clock=clock, prober=prober)
        self.clock = self.wiring.clock
        self.store = DurableStore(self.wiring.store, self.wait)  # a full disk waits, it does not kill the loop
        # unset: the SGLang tree must not inherit NOTIFY_SOCKET / WATCHDOG_* and talk to systemd
        self.notifier = notifier or Notifier.from_environment(unset=True)
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.launch = Launch(list(config.service.argv), dict(config.service.env))
        self.launch.adopt(verified_launch(self.engine))  # a verified flag/env fix outlives ddtreed
        self.board = StatusBoard.start(config.paths.state_dir, config.source, self.notifier.status)
        self.lifecycle = Lifecycle(lambda state, text: self._publish(state=state, status_text=text))
        self.service: ServiceRun | None = None
        self.context: ServiceContext = self._context()
        self.metrics = None
        self.reloads = 0  # SIGHUPs handled; a blocked launch waits for the next one
        self.prevented_pending: list[int] = []  # preflight incidents awaiting a healthy start
        self._subscribers: list[Callable[[object], None]] = []

    # ---- the public API (CLI, promotion, demo, tests) ------------------------------------------

    config = property(lambda self: self.wiring.config)
    host = property(lambda self: self.wiring.host)
    engine = property(lambda self: self.wiring.engine)
    rules = property(lambda self: self.wiring.rules)
    catalog = property(lambda self: self.wiring.catalog)
    budget = property(lambda self: self.wiring.budget)
    argv = property(lambda self: self.launch.argv)
    env = property(lambda self: self.launch.env)
    follower = property(lambda self: self.service.follower if self.service else None)

    def subscribe(self, callback: Callable[[object], None]) -> None:
        """`callback(event)` for every `Outcome` and `Healthy` the loop emits (called in the loop)."""
        self._subscribers.append(callback)

    def request_stop(self) -> None:
        """Stop as SIGTERM would: safe from any thread or from a subscriber."""
        self.signals.put(signal.SIGTERM)

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, lambda number, _frame: self.signals.put(number))

    def prober(self) -> Prober:
        return self.wiring.prober(self.host.http_base_url(self.config.service.host, self.context.port))

    def attempt(self, remediation_id: str, incident_id: int | None,
                verify_with: Callable[[], Verdict] | None = None) -> Attempt:
        """The one `attempt()`, on this daemon's launch and context."""
        result = attempt(remediation_id, incident_id, engine=self.engine, store=self.store, launch=self.launch,
                         context=self.context, verify=verify_with, on_apply=self._remediating,
                         before_revert=lambda: self._stop_service("the fix did not hold"))
        self.context = self._context()
        return result

    def revert(self, application: Application, incident_id: int | None = None) -> bool:
        done = revert(application, engine=self.engine, store=self.store, launch=self.launch,
                      incident_id=incident_id)
        self.context = self._context()
        return done

    def trial(self) -> Verdict:
        """Start the service as launched now, verify it like a fix (window included), stop it."""
        try:
            if not self._start_service():
                return Verdict(False, "restart budget spent")
            self.lifecycle.enter("verifying", "trial: verifying")
            return self._verify(window=True)
        except Stopping:
            return Verdict(False, "stopped before the trial finished (timeout or signal)")
        finally:
            self._stop_service("trial over")

    # ---- the loop ------------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until a stop (exit 0) or until the restart budget is spent (exit 3)."""
        self.notifier.ready(status="ddtreed up; launching the service")  # systemd must not wait for a 10-minute load
        self.metrics = start_metrics(self.config.metrics.listen, self._metrics_snapshot)
        recover(self.engine, self.store, self.host, self.config.paths.state_dir)
        try:
            self._preflight()
            if not self._relaunch():
                return EXIT_GAVE_UP
            while True:
                outcome = self._handle_crash(*self._serve())
                self._emit(outcome)
                self._turn()  # a stop asked for by a subscriber comes before any relaunch
                if outcome.status != "resolved" and not self._relaunch():  # resolved: it runs fixed
                    return EXIT_GAVE_UP
        except Stopping:
            return EXIT_OK
        finally:
            self.close()

    def _serve(self) -> tuple[tuple[Crash, ...], ExitStatus | None]:
        """Wait for readiness and verify, then follow the service until it fails."""
        verdict = self._verify(window=False)
        if not verdict.ok:
            return verdict.crashes or (probe_crash(verdict, self.clock.time()),), verdict.exit_status
        self._healthy(verdict)
        confirm(self.store, self.prevented_pending, verdict)
        self.prevented_pending.clear()
        return self._watch()

    def _watch(self) -> tuple[tuple[Crash, ...], ExitStatus | None]:
        periodic = self.wiring.periodic_canary
        while True:
            groups = self.service.pump(TURN_S)
            if groups:
                return flatten(groups), self.service.poll()
            exit_status = self.service.poll()
            if exit_status is not None:
                return self.service.drain(), exit_status
            if periodic is not None and periodic.due():
                result = periodic.run_if_due(self.prober(), self.context)
                if result is not None:
                    self._show_canary(result)
                    if result.category is not None:  # silent corruption or collapse: an incident
                        return (canary_crash(result),), None

    def _preflight(self) -> None:
        """Check, then prevent/advise; while a blocking finding stands, wait and re-check."""
        while True:
            self.lifecycle.enter("preflight", "preflight checks")
            findings = run_preflight(self.config, self.context, self.host, self.rules, self.engine,
                                     checks=self.wiring.preflight_checks)
            result = decide(findings, mode=self.config.policy.mode, store=self.store, context=self.context,
                            try_fix=lambda incident_id, remediation_id: self.attempt(remediation_id, incident_id),
                            plan=lambda remediation_id: self.engine.plan(remediation_id, self.context,
                                                                         env=self.launch.env))
            self.prevented_pending += result.prevented
            if not result.blocking:
                return
            reasons = "; ".join(finding.what for finding in result.blocking)
            self.lifecycle.enter("blocked", f"launch blocked by preflight: {reasons}")
            log.error("launch_blocked", findings=[f.check for f in result.blocking],
                      hint="fix the cause and send SIGHUP, or drop the check from [preflight] block_on")
            reloads = self.reloads
            self.wait(BLOCKED_RECHECK_S, lambda: self.reloads != reloads)

    # ---- one incident ----------------------------------------------------------------------------

    def _handle_crash(self, crashes: tuple[Crash, ...], exit_status: ExitStatus | None) -> Outcome:
        """Record, diagnose, remediate: the incident's outcome."""
        self.lifecycle.enter("crashed", "service failed")
        crashes = crashes or (synthetic_crash(exit_status, self.clock.time()),)
        self.lifecycle.enter("diagnosing", "service failed: diagnosing")
        diagnosis = self.rules.diagnose(crashes, self.context)
        # Recorded before anything else: the first complete traceback is an incident at once.
        incident_id = self.store.open_incident(
            "canary" if crashes[0].kind == "canary" else "crash", crashes, diagnosis.signature,
            diagnosis.match, self.context,
            detected_at=min((c.detected_at for c in crashes if c.detected_at), default=None))
        with incident_context(incident_id):
            self._stop_service("crash")
            late = self.service.drain()
            if late:  # other ranks finished their tracebacks while the tree went down
                crashes = crashes + late
                diagnosis = self.rules.diagnose(crashes, self.context)
                self.store.set_diagnosis(incident_id, crashes, diagnosis.signature, diagnosis.match)
            match = diagnosis.match
            log.error("incident_opened", category=match.category, rule=match.rule_id, diagnosis=match.diagnosis)
            self.store.add_step(incident_id, "diagnosed", match.diagnosis or "no rule matched",
                                {"rule_id": match.rule_id, "category": match.category,
                                 "remediations": list(match.remediations)})
            self._publish(current_incident_id=incident_id)
            status = self._remediate(incident_id, diagnosis.signature.fingerprint, list(match.remediations))
            self._publish(current_incident_id=None)
        return Outcome(incident_id, status)

    def _remediate(self, incident_id: int, fingerprint: str, remediations: list[str]) -> str:
        mode = self.config.policy.mode
        remediations = remediations[: self.config.policy.max_remediations_per_incident]
        if self._recurred_after_verified_fix(incident_id, fingerprint):
            return self._escalate(incident_id, fingerprint, "the same crash came back after its fix was verified")
        if mode == "off" or not remediations:
            return self._not_remediated(incident_id, "policy off" if mode == "off" else "no remediation known")
        if self.store.is_frozen(fingerprint):
            return self._not_remediated(incident_id, "auto-remediation is frozen for this signature "
                                                     f"(ddtreed remediate unfreeze {fingerprint})")
        if mode == "advise":
            for remediation_id in remediations:
                plan = self.engine.plan(remediation_id, self.context, env=self.launch.env)
                self.store.add_step(incident_id, "advised", f"would apply {remediation_id}: {plan.reason}",
                                    {"applicable": plan.applicable, "diff": plan.diff})
            return self._not_remediated(incident_id, "policy advise: nothing applied", status="advised")
        for remediation_id in remediations:
            result = self.attempt(remediation_id, incident_id, lambda: self._restart_and_verify(incident_id))
            if result.outcome == "held":
                self.store.finish(incident_id, "resolved", f"{remediation_id} held: {result.detail}")
                self._remember_degraded(result.application)
                self._healthy(result.verdict)
                log.info("incident_resolved", remediation=remediation_id)
                return "resolved"
        return self._escalate(incident_id, fingerprint, "no remediation left to try")

    def _escalate(self, incident_id: int, fingerprint: str, reason: str) -> str:
        """Nothing left to try: freeze the signature and tell a person (the loop relaunches)."""
        self.store.freeze(fingerprint, reason, incident_id)
        self.store.add_step(incident_id, "escalated", f"{reason}; auto-remediation frozen for {fingerprint}")
        self.store.finish(incident_id, "escalated", reason)
        self.lifecycle.enter("escalated", f"escalated: needs a person (incident {incident_id})")
        log.error("incident_escalated", reason=reason, hint=f"ddtreed incidents show {incident_id}")
        return "escalated"

    def _not_remediated(self, incident_id: int, reason: str, status: str = "open") -> str:
        self.store.add_step(incident_id, "not-remediated", reason)
        self.store.finish(incident_id, status, reason)
        return status

    def _recurred_after_verified_fix(self, incident_id: int, fingerprint: str) -> bool:
        previous = self.store.verified_fix_for(fingerprint)
        if previous is None:
            return False
        self.store.add_step(incident_id, "recurred", f"the verified fix {previous['remediation_id']} "
                                                     f"(incident {previous['incident_id']}) did not stick")
        application = next((a for a in self.engine.status() if a.application_id == previous["application_id"]), None)
        if application is not None:
            self.revert(application, incident_id)
        else:  # undone outside ddtreed (a reinstall, `remediate revert`): record it, or it recurs forever
            self.store.mark_application(previous["application_id"], "reverted")
        return True

    def _remember_degraded(self, application: Application) -> None:
        """A flag step of a degradation ladder is remembered, so `status` shows it and promote can undo it."""
        if application.kind == "patch":
            return
        self.store.set_degraded(self.config.source, 1, application.remediation_id)
        self._publish(degraded={"remediations": [application.remediation_id], "since": self.clock.time()})

    # ---- restart and verify --------------------------------------------------------------------

    def _restart_and_verify(self, incident_id: int) -> Verdict:
        self.lifecycle.enter("restarting", f"incident {incident_id}: restarting")
        self.store.add_step(incident_id, "restarting", " ".join(self.launch.argv))
        if not self._start_service(backoff=False):
            return Verdict(ok=False, detail="restart budget spent")
        self.store.add_step(incident_id, "restarted", f"pid {self.service.pid}", {"argv": self.launch.argv})
        self.lifecycle.enter("verifying", f"incident {incident_id}: verifying")
        verdict = self._verify(window=True)
        self.store.add_step(incident_id, "healthy" if verdict.ok else "failed", verdict.detail,
                            {"accept_length": verdict.accept_length, "stage": verdict.stage})
        return verdict

    def _verify(self, window: bool) -> Verdict:
        canary = self._canary_check if self.wiring.canary is not None else None
        return verify(self.service, self.prober(), self.clock, self.config.probe, self.context, self.store,
                      window=window, canary=canary)

    def _canary_check(self, verdict: Verdict) -> Verdict:
        """After every (re)start: greedy outputs against the goldens, acceptance against baseline."""
        self.context = self._context()  # a ladder step changed the algorithm or budget
        result = self.wiring.canary.check(self.prober(), self.context)
        self.wiring.periodic_canary.reset()
        self._show_canary(result)
        return canary_verdict(result, verdict)

    def _healthy(self, verdict: Verdict) -> None:
        accept = verdict.accept_length
        self._publish(last_healthy_at=self.clock.time(), last_accept_length=accept)
        self.lifecycle.enter("running", "serving" + (f", accept len {accept:.2f}" if accept is not None else ""))
        self._emit(Healthy(verdict))

    # ---- service lifecycle -----------------------------------------------------------------------

    def _relaunch(self) -> bool:
        """(Re)start under the restart budget; False (escalated) when it is spent."""
        if self._start_service():
            return True
        self.lifecycle.enter("escalated", "escalated: restart budget spent, needs a person")
        log.error("restart_budget_spent", max_restarts=self.config.policy.max_restarts,
                  hint="fix the cause, then send SIGHUP or restart ddtreed")
        return False

    def _start_service(self, backoff: bool = True) -> bool:
        """Launch; False when the restart budget is spent. `backoff=False` after a fix was applied:
        that restart tests a change, it is not a blind retry (it still counts against the budget)."""
        delay = self.budget.next_delay()
        if delay is None:
            return False
        if backoff and delay > 0 and self.budget.starts_in_window > 0:
            self.lifecycle.enter("backoff", f"backing off {delay:.1f}s before restart")
            self.wait(delay)
        self.budget.record_start()
        self.context = self._context()
        if self.service is not None:
            self.service.close()
        self.service = ServiceRun(self.host, self.config, self.launch.argv, self.launch.env, self.clock,
                                  on_turn=self._turn, on_progress=self._progress)
        pid = self.service.start()
        restarts = self.board.current.restarts + (1 if self.board.current.service_started_at else 0)
        self._publish(service_pid=pid, service_started_at=self.clock.time(), restarts=restarts,
                      service_token=self.service.token)
        self.lifecycle.enter("starting", "service starting")
        return True

    def _stop_service(self, reason: str) -> ExitStatus | None:
        if self.service is None:
            return None
        exit_status = self.service.stop(reason)
        self._publish(service_pid=None)
        return exit_status

    def close(self) -> None:
        """Stop the service and release everything; the daemon ends `stopped`."""
        self.notifier.stopping()
        try:
            self.lifecycle.enter("stopping", "stopping the service")
            self._stop_service("ddtreed stopping")
        finally:
            if self.service is not None:
                self.service.close()
            if self.metrics is not None:
                self.metrics.close()
            self.host.close()  # an SshHost holds a connection and a tunnel
            self.lifecycle.enter("stopped", "stopped")

    # ---- turns and waits: signals, watchdog ------------------------------------------------------

    def _turn(self) -> None:
        """Between steps: act on queued signals (a stop raises Stopping), ping the watchdog."""
        while not self.signals.empty():
            signum = self.signals.get()
            if signum in (signal.SIGTERM, signal.SIGINT):
                log.info("stop_requested", signal=signal.Signals(signum).name)
                raise Stopping()
            if signum == signal.SIGHUP:
                self.reload()
            elif signum == signal.SIGUSR1:
                log.info("state_dump", **self.board.current.to_dict(), argv=self.launch.argv,
                         budget_starts=self.budget.starts_in_window, states=self.lifecycle.history[-20:])
        self.notifier.watchdog()

    def wait(self, seconds: float, condition: Callable[[], bool] = lambda: False) -> None:
        """Wait up to `seconds` for `condition()`, still answering signals and the watchdog."""
        deadline = self.clock.monotonic() + seconds
        while (left := deadline - self.clock.monotonic()) > 0 and not condition():
            self._turn()
            self.clock.sleep(min(left, TURN_S))

    def reload(self) -> None:
        """SIGHUP: rebuild the wiring from the config file; a bad new file keeps the old one."""
        self.notifier.reloading()
        try:
            config = load(self.config.source) if os.path.exists(self.config.source) else self.config
            config = replace(config, paths=replace(config.paths, state_dir=self.config.paths.state_dir))
            if (config.service.remote, config.service.inventory) != (self.config.service.remote,
                                                                    self.config.service.inventory):
                raise ConfigError(f"{config.source}: service.remote/inventory cannot change on reload "
                                  "(the service runs there now); restart ddtreed to move it")
            wiring = rebuild(self.wiring, config)
        except (ConfigError, ValueError, OSError) as error:
            log.error("reload_rejected", error=str(error),
                      hint="the previous config, rules and remediations stay in use")
        else:
            before = self.config.service
            self.wiring = wiring
            if (tuple(config.service.argv), dict(config.service.env)) != (tuple(before.argv), dict(before.env)):
                self.launch = Launch(list(config.service.argv), dict(config.service.env))
                log.info("launch_reloaded", argv=self.launch.argv, hint="used from the next (re)start")
            log.info("reloaded", rules=len(wiring.rules), remediations=len(list(wiring.catalog)))
        self.reloads += 1
        self.notifier.ready()

    # ---- small helpers ---------------------------------------------------------------------------

    def _emit(self, event: object) -> None:
        for callback in list(self._subscribers):
            callback(event)

    def _remediating(self, remediation_id: str) -> None:
        self.lifecycle.enter("remediating", f"applying {remediation_id}")

    def _progress(self, text: str) -> None:
        if self.lifecycle.state in ("starting", "verifying"):
            self.lifecycle.enter(self.lifecycle.state, text)

    def _show_canary(self, result) -> None:
        self._publish(canary={"last_run_at": result.at, "passed": result.passed, "detail": result.detail})

    def _context(self) -> ServiceContext:
        config = replace(self.config, service=replace(self.config.service, argv=tuple(self.launch.argv)))
        return context_stage.service_context(config, self.host)

    def _publish(self, **changes) -> None:
        self.board.publish(**changes)

    def _metrics_snapshot(self):
        return self.board.current, self.wiring.store.counts()  # the metrics thread never retries or sleeps


def synthetic_crash(exit_status: ExitStatus | None, now: float) -> Crash:
    """A service that ended without any traceback still becomes an incident."""
    detail = exit_status.describe() if exit_status else "stopped responding"
    return Crash(kind="killed", exception=None, message=f"service {detail} without a traceback",
                 exit_code=exit_status.code if exit_status else None, detected_at=now)


def probe_crash(verdict: Verdict, now: float) -> Crash:
    """A failed probe without any traceback, worded by its stage (rules may name `probe-failed`)."""
    return Crash(kind="probe-failed", exception=None, message=verdict.detail, detected_at=now)


def canary_verdict(result, verdict: Verdict) -> Verdict:
    """A canary result as the verdict of the start it checked."""
    if result.passed:
        return verdict
    if result.category is None:  # the requests themselves failed: a probe failure
        return Verdict(False, f"canary could not run: {result.detail}", stage="canary",
                       accept_length=verdict.accept_length)
    return Verdict(False, f"canary failed ({result.category}): {result.detail}", (canary_crash(result),),
                   accept_length=result.accept_length, stage="canary")
