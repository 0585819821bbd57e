"""The one module that wires the stages together: the supervision loop, top to bottom.

    launch → logs → tracebacks → signature → rules → remediation → restart → health → incidents

Signal handlers only enqueue; the loop acts on them between steps (`pump`).
"""

from __future__ import annotations

import os
import queue
import signal
import time
from dataclasses import dataclass, replace

import structlog

from . import context as context_stage
from .config import Config, ConfigError, load
from .canary import Canary, PeriodicCanary, canary_crash
from .health import MilestoneTracker, Prober
from .host import Host, LocalHost
from .incidents import Store, database_path
from .incidents.durable import DurableStore
from .launch import Supervisor
from .logsetup import incident_context
from .metrics import start_metrics
from .notify import Notifier
from .paths import shipped
from .preflight_gate import PreflightGate
from .recovery import recover, verified_launch
from .records import Application, Crash, ExitStatus, ServiceContext
from .remediation import ApplyError, Engine, load_remediations
from .restart import RestartBudget
from .rules import load_rules
from .status import DaemonStatus, StatusBoard
from .tracebacks import Assembler
from .verify import Verdict, Verifier, flatten

log = structlog.get_logger(__name__)

EXIT_OK = 0
EXIT_GAVE_UP = 3
DRAIN_QUIET_S = 0.2  # after the service exits, its logs are complete once this long quiet
DRAIN_MAX_S = 3.0  # ...or after this long at most (a remote tail can lag)


class Stopping(Exception):
    """Raised inside a wait when SIGTERM/SIGINT arrived: unwind to a clean stop."""


@dataclass
class Outcome:
    """What the loop concluded about one incident (for `ddtreed demo` and tests)."""

    incident_id: int
    status: str


class Daemon:
    def __init__(self, config: Config, *, host: Host | None = None, store: Store | None = None,
                 notifier: Notifier | None = None, stop_after_incident: bool = False,
                 stop_when_healthy: bool = False, deadline: float | None = None):
        self.config = config
        if host is None and config.service.remote is not None:
            from .fleet import host_for  # the SshHost of service.remote (imports paramiko)

            host = host_for(config)
        host = host or LocalHost()
        self.host = host
        self.raw_store = store or Store(database_path(config.paths.state_dir))
        self.store = DurableStore(self.raw_store, self._sleep)  # a full disk waits, it does not kill the loop
        # unset: the SGLang tree must not inherit NOTIFY_SOCKET / WATCHDOG_* and talk to systemd
        self.notifier = notifier or Notifier.from_environment(unset=True)
        self.stop_after_incident = stop_after_incident  # demo and tests: one incident, then stop
        self.stop_when_healthy = stop_when_healthy
        self.deadline = deadline  # time.monotonic() after which the loop stops (demo, tests)
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.rules, self.catalog = _load_catalogs(config)
        self.engine = Engine(self.host, config.paths.state_dir, self.catalog)
        self.argv = list(config.service.argv)
        self.env = dict(config.service.env)
        kept = verified_launch(self.engine, self.store)
        if kept is not None:  # a verified flag/env fix outlives ddtreed
            self.argv, self.env = list(kept.argv), dict(kept.env)
        self.budget = RestartBudget.from_policy(config.policy)
        self._status_write_failed = False
        self.board = _status_board(config, self.notifier)
        self.outcomes: list[Outcome] = []
        self.supervisor: Supervisor | None = None
        self.follower = None
        self.assembler = Assembler(eager=True)
        self.milestones = MilestoneTracker()
        self.context: ServiceContext = self._context()
        self.canary, self.periodic_canary = _canary(self.store, config)
        self.metrics = None
        self.reloads = 0  # SIGHUPs handled; a blocked launch waits for the next one
        self.prevented_pending: list[int] = []  # preflight incidents awaiting a healthy start

    # ---- signals: handlers enqueue, the loop acts -------------------------------------------

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, lambda number, _frame: self.signals.put(number))

    def _handle_signals(self) -> None:
        while not self.signals.empty():
            signum = self.signals.get()
            if signum in (signal.SIGTERM, signal.SIGINT):
                log.info("stop_requested", signal=signal.Signals(signum).name)
                raise Stopping()
            if signum == signal.SIGHUP:
                self.reload()
            elif signum == signal.SIGUSR1:
                log.info("state_dump", **self.board.current.to_dict(), argv=self.argv,
                         budget_starts=self.budget.starts_in_window)

    def reload(self) -> None:
        """SIGHUP: reload config, rules and remediations; a bad new file keeps the old set."""
        self.notifier.reloading()
        try:
            config = load(self.config.source) if os.path.exists(self.config.source) else self.config
            config = replace(config, paths=replace(config.paths, state_dir=self.config.paths.state_dir))
            if (config.service.remote, config.service.inventory) != (self.config.service.remote,
                                                                    self.config.service.inventory):
                raise ConfigError(f"{config.source}: service.remote/inventory cannot change on reload "
                                  "(the service runs there now); restart ddtreed to move it")
            rules, catalog = _load_catalogs(config)
        except (ConfigError, ValueError, OSError) as error:
            log.error("reload_rejected", error=str(error),
                      hint="the previous config, rules and remediations stay in use")
        else:
            self.config, self.rules, self.catalog = config, rules, catalog
            self.engine = Engine(self.host, config.paths.state_dir, catalog)
            self.budget = RestartBudget.from_policy(config.policy)  # an operator's reload is a fresh start
            log.info("reloaded", rules=len(rules), remediations=len(list(catalog)))
        self.reloads += 1
        self.notifier.ready()

    # ---- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until SIGTERM (exit 0) or until the restart budget is spent (exit 3)."""
        self.notifier.ready(status="ddtreed up; launching the service")  # systemd must not wait for a 10-minute load
        self.metrics = start_metrics(self.config.metrics.listen, self._metrics_snapshot)
        recover(self.engine, self.store, self.host, self.config.paths.state_dir)
        try:
            PreflightGate(self).run()
            if not self._start_service():
                return EXIT_GAVE_UP
            while True:
                crashes, exit_status = self._serve()
                if not self._handle_crash(crashes, exit_status):
                    return EXIT_GAVE_UP
                if self.stop_after_incident:
                    return EXIT_OK
        except Stopping:
            return EXIT_OK
        finally:
            self._shutdown()

    def _serve(self) -> tuple[tuple[Crash, ...], ExitStatus | None]:
        """Wait for readiness and verify, then follow the service until it fails."""
        verdict = self._verifier().verify(first_start=True)
        if not verdict.ok:
            return verdict.crashes or self._probe_failure(verdict), verdict.exit_status
        self._healthy(verdict)
        PreflightGate(self).confirm(verdict)
        if self.stop_when_healthy:
            raise Stopping()
        return self._watch()

    def _watch(self) -> tuple[tuple[Crash, ...], ExitStatus | None]:
        while True:
            groups = self.pump(0.2)
            if groups:
                return flatten(groups), self.supervisor.poll()
            exit_status = self.supervisor.poll()
            if exit_status is not None:
                return self.drain_logs(), exit_status
            if self.periodic_canary is not None and self.periodic_canary.due():
                result = self.periodic_canary.run_if_due(self.prober(), self.context)
                if result is not None:
                    self._show_canary(result)
                    if result.category is not None:  # silent corruption or collapse: an incident
                        return (canary_crash(result),), None

    # ---- the output canary ------------------------------------------------------------------

    def canary_check(self, verdict: Verdict) -> Verdict:
        """After every (re)start: greedy outputs against the goldens, acceptance against baseline."""
        if self.canary is None:
            return verdict
        self.context = self._context()  # a ladder step changed the algorithm or budget
        result = self.canary.check(self.prober(), self.context)
        self.periodic_canary.reset()
        self._show_canary(result)
        if result.passed:
            return verdict
        if result.category is None:  # the requests themselves failed: a probe failure
            return Verdict(False, f"canary could not run: {result.detail}", stage="canary",
                           accept_length=verdict.accept_length)
        return Verdict(False, f"canary failed ({result.category}): {result.detail}", (canary_crash(result),),
                       accept_length=result.accept_length, stage="canary")

    def _show_canary(self, result) -> None:
        self._publish(canary={"last_run_at": result.at, "passed": result.passed, "detail": result.detail})

    def prober(self) -> Prober:
        return Prober(self.host.http_base_url(self.config.service.host, self.context.port))

    # ---- one incident -----------------------------------------------------------------------

    def _handle_crash(self, crashes: tuple[Crash, ...], exit_status: ExitStatus | None) -> bool:
        """Diagnose, record, remediate. False when the service cannot be relaunched any more."""
        self._set_state("diagnosing", "service failed: diagnosing")
        if not crashes:
            crashes = (self._synthetic_crash(exit_status),)
        diagnosis = self.rules.diagnose(crashes, self.context)
        # Recorded before anything else: the first complete traceback is an incident at once.
        incident_id = self.store.open_incident(
            "canary" if crashes[0].kind == "canary" else "crash", crashes, diagnosis.signature,
            diagnosis.match, self.context,
            detected_at=min((c.detected_at for c in crashes if c.detected_at), default=None))
        with incident_context(incident_id):
            self._stop_service("crash")
            late = self.drain_logs()
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
            status = self._remediate(incident_id, diagnosis)
            self.outcomes.append(Outcome(incident_id, status))
            self._publish(current_incident_id=None)
        return status != "gave-up"

    def _remediate(self, incident_id: int, diagnosis) -> str:
        fingerprint = diagnosis.signature.fingerprint
        mode = self.config.policy.mode
        remediations = list(diagnosis.match.remediations)[: self.config.policy.max_remediations_per_incident]
        if self._recurred_after_verified_fix(incident_id, fingerprint):
            return self._escalate(incident_id, fingerprint, "the same crash came back after its fix was verified")
        if mode == "off" or not remediations:
            return self._relaunch_unchanged(incident_id, "policy off" if mode == "off" else "no remediation known")
        if self.store.is_frozen(fingerprint):
            return self._relaunch_unchanged(incident_id, "auto-remediation is frozen for this signature "
                                                         f"(ddtreed remediate unfreeze {fingerprint})")
        if mode == "advise":
            self._advise(incident_id, remediations)
            return self._relaunch_unchanged(incident_id, "policy advise: nothing applied", status="advised")
        for remediation_id in remediations:
            result = self._try_remediation(incident_id, remediation_id)
            if result is not None:
                return result
        return self._escalate(incident_id, fingerprint, "no remediation left to try")

    def _advise(self, incident_id: int, remediations: list[str]) -> None:
        for remediation_id in remediations:
            plan = self.engine.plan(remediation_id, self.context, env=self.env)
            self.store.add_step(incident_id, "advised", f"would apply {remediation_id}: {plan.reason}",
                                {"applicable": plan.applicable, "diff": plan.diff})

    def _try_remediation(self, incident_id: int, remediation_id: str) -> str | None:
        """Apply, restart, verify: "resolved" when it held, None after reverting one that did not."""
        plan = self.engine.plan(remediation_id, self.context, env=self.env)
        if not plan.applicable:
            self.store.add_step(incident_id, "skipped", f"{remediation_id}: {plan.reason}")
            return None
        self._set_state("remediating", f"incident {incident_id}: applying {remediation_id}")
        try:
            application = self.engine.apply(plan, incident_id=incident_id)
        except (ApplyError, OSError) as error:  # refused at write time, or no room for the backup
            self.store.add_step(incident_id, "apply-failed", f"{remediation_id}: {error}")
            log.error("remediation_apply_failed", remediation=remediation_id, error=str(error))
            return None
        self.store.record_application(incident_id, application)
        self.store.set_remediation(incident_id, remediation_id, application.application_id)
        self.store.add_step(incident_id, "applied", application.summary,
                            {"application_id": application.application_id, "diff": plan.diff,
                             "files": [vars(change) for change in application.files]})
        self._adopt(application)
        verdict = self._restart_and_verify(incident_id)
        if verdict.ok:
            self.store.mark_application(application.application_id, "verified")
            self.store.add_step(incident_id, "verified", verdict.detail, {"accept_length": verdict.accept_length})
            self.store.finish(incident_id, "resolved", f"{remediation_id} held: {verdict.detail}")
            self._remember_degraded(application)
            self._healthy(verdict)
            log.info("incident_resolved", remediation=remediation_id)
            return "resolved"
        self._stop_service("the fix did not hold")
        self._revert(application)
        self.store.add_step(incident_id, "reverted", f"{remediation_id} did not hold: {verdict.detail}")
        log.warning("remediation_reverted", remediation=remediation_id, detail=verdict.detail)
        return None

    def _escalate(self, incident_id: int, fingerprint: str, reason: str) -> str:
        """Nothing left to try: freeze the signature, tell a person, relaunch the last healthy config."""
        self.store.freeze(fingerprint, reason, incident_id)
        self.store.add_step(incident_id, "escalated", f"{reason}; auto-remediation frozen for {fingerprint}")
        self.store.finish(incident_id, "escalated", reason)
        self._set_state("escalated", f"escalated: needs a person (incident {incident_id})")
        log.error("incident_escalated", reason=reason, hint=f"ddtreed incidents show {incident_id}")
        if self.stop_after_incident:
            return "escalated"
        return "escalated" if self._start_service() else "gave-up"

    def _relaunch_unchanged(self, incident_id: int, reason: str, status: str = "open") -> str:
        self.store.add_step(incident_id, "not-remediated", reason)
        self.store.finish(incident_id, status, reason)
        if self.stop_after_incident:
            return status
        return status if self._start_service() else "gave-up"

    def _recurred_after_verified_fix(self, incident_id: int, fingerprint: str) -> bool:
        previous = self.store.verified_fix_for(fingerprint)
        if previous is None:
            return False
        self.store.add_step(incident_id, "recurred", f"the verified fix {previous['remediation_id']} "
                                                     f"(incident {previous['incident_id']}) did not stick")
        application = next((a for a in self.engine.status() if a.application_id == previous["application_id"]), None)
        if application is not None:
            self._revert(application)
        else:  # undone outside ddtreed (a reinstall, `remediate revert`): record it, or it recurs forever
            self.store.mark_application(previous["application_id"], "reverted")
        return True

    def _revert(self, application: Application) -> None:
        previous = self.engine.revert(application.application_id)
        self.store.mark_application(application.application_id, "reverted")
        if previous is not None:  # an args/env change: back to the launch it replaced
            self.argv, self.env = list(previous.argv), dict(previous.env)
        self.context = self._context()

    def _adopt(self, application: Application) -> None:
        if application.launch is not None:
            self.argv, self.env = list(application.launch.argv), dict(application.launch.env)
        self.context = self._context()

    def _remember_degraded(self, application: Application) -> None:
        """A flag step of a degradation ladder is remembered, so `status` shows it and promote can undo it."""
        if application.kind == "patch":
            return
        self.store.set_degraded(self._service_key(), 1, application.remediation_id)
        self._publish(degraded={"remediations": [application.remediation_id], "since": time.time()})

    # ---- restart and verify -----------------------------------------------------------------

    def _restart_and_verify(self, incident_id: int) -> Verdict:
        self._set_state("restarting", f"incident {incident_id}: restarting")
        self.store.add_step(incident_id, "restarting", " ".join(self.argv))
        if not self._start_service(backoff=False):
            return Verdict(ok=False, detail="restart budget spent")
        self.store.add_step(incident_id, "restarted", f"pid {self.supervisor.pid}", {"argv": self.argv})
        self._set_state("verifying", f"incident {incident_id}: verifying")
        verdict = self._verifier().verify(first_start=False)
        self.store.add_step(incident_id, "healthy" if verdict.ok else "failed", verdict.detail,
                            {"accept_length": verdict.accept_length, "stage": verdict.stage})
        return verdict

    def _verifier(self) -> Verifier:
        return Verifier(self, self.config.probe, self.store)

    def _healthy(self, verdict: Verdict) -> None:
        accept = verdict.accept_length
        text = "serving" + (f", accept len {accept:.2f}" if accept is not None else "")
        self._publish(last_healthy_at=time.time(), last_accept_length=accept)
        self._set_state("running", text)

    def _probe_failure(self, verdict: Verdict) -> tuple[Crash, ...]:
        """A failed probe without any traceback still becomes an incident, worded by its stage."""
        return (Crash(kind="probe-failed", exception=None, message=verdict.detail, detected_at=time.time()),)

    # ---- service lifecycle ------------------------------------------------------------------

    def _start_service(self, backoff: bool = True) -> bool:
        """Launch under the restart budget; False when it is spent.

        `backoff=False` after a fix was applied: that restart tests a change, it is not a blind
        retry, so it goes at once (it still counts against the budget).
        """
        delay = self.budget.next_delay()
        if delay is None:
            self._set_state("escalated", "escalated: restart budget spent, needs a person")
            log.error("restart_budget_spent", max_restarts=self.config.policy.max_restarts,
                      hint="fix the cause, then send SIGHUP or restart ddtreed")
            return False
        if backoff and delay > 0 and self.budget.starts_in_window > 0:
            self._set_state("backoff", f"backing off {delay:.1f}s before restart")
            self._sleep(delay)
        self.budget.record_start()
        self.context = self._context()
        self.supervisor = Supervisor(self.host, self.config, self.argv, self.env)
        self.assembler, self.milestones = Assembler(eager=True), MilestoneTracker()
        if self.follower is not None:
            self.follower.close()
        process = self.supervisor.start()
        # Follow from the start of the fresh (just rotated) files: nothing of this run is missed.
        self.follower = self.host.open_follower(self.supervisor.log_paths + list(self.config.paths.extra_logs))
        restarts = self.board.current.restarts + (1 if self.board.current.service_started_at else 0)
        self._publish(service_pid=process.pid, service_started_at=time.time(), restarts=restarts,
                      service_token=self.supervisor.token)
        self._set_state("starting", "service starting")
        return True

    def _stop_service(self, reason: str) -> ExitStatus | None:
        if self.supervisor is None or self.supervisor.process is None:
            return None
        exit_status = self.supervisor.stop(reason)
        self._publish(service_pid=None)
        return exit_status

    def _shutdown(self) -> None:
        self.notifier.stopping()
        try:
            self._set_state("stopping", "stopping the service")
            self._stop_service("ddtreed stopping")
        finally:
            if self.follower is not None:
                self.follower.close()
            if self.metrics is not None:
                self.metrics.close()
            close_host = getattr(self.host, "close", None)  # an SshHost holds a connection and a tunnel
            if close_host is not None:
                close_host()
            self._set_state("stopped", "stopped")

    # ---- pumping: logs, signals, watchdog ---------------------------------------------------

    def pump(self, timeout: float) -> list[tuple[Crash, ...]]:
        """One turn: signals, new log lines → assembler and milestones, watchdog ping."""
        self._handle_signals()
        self.notifier.watchdog()
        if self.deadline is not None and time.monotonic() > self.deadline:
            log.error("deadline_reached", hint="the loop did not close in time")
            raise Stopping()
        if self.follower is None:
            self._sleep(timeout)
            return []
        self.follower.wait(timeout)
        for chunk in self.follower.read():
            self.assembler.feed(chunk)
            if self.milestones.feed(chunk) and self.board.current.state in ("starting", "verifying"):
                self._set_state(self.board.current.state, self.milestones.progress_text())
        return self.assembler.take(time.time())

    def drain_logs(self) -> tuple[Crash, ...]:
        """Read until the logs stay quiet (nothing more can come), then take every pending crash.

        No settle window: the process that wrote them has exited, so waiting cannot complete a
        traceback, it can only delay the relaunch.
        """
        if self.follower is None:
            return flatten(self.assembler.take(time.time(), final=True))
        quiet_since = time.monotonic()
        deadline = quiet_since + DRAIN_MAX_S
        while (now := time.monotonic()) < deadline and now - quiet_since < DRAIN_QUIET_S:
            chunks = self.follower.read()
            for chunk in chunks:
                self.assembler.feed(chunk)
            if chunks:
                quiet_since = time.monotonic()
            else:
                self.follower.wait(DRAIN_QUIET_S / 4)
        return flatten(self.assembler.take(time.time(), final=True))

    def _synthetic_crash(self, exit_status: ExitStatus | None) -> Crash:
        detail = exit_status.describe() if exit_status else "stopped responding"
        return Crash(kind="killed", exception=None, message=f"service {detail} without a traceback",
                     exit_code=exit_status.code if exit_status else None, detected_at=time.time())

    def _sleep(self, seconds: float) -> None:
        self._sleep_until(lambda: False, seconds)

    def _sleep_until(self, condition, seconds: float) -> None:
        """Wait up to `seconds` for `condition()`, still answering signals and the watchdog."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not condition():
            self._handle_signals()
            self.notifier.watchdog()
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise Stopping()
            time.sleep(min(left, 0.2))

    # ---- small helpers ----------------------------------------------------------------------

    def _context(self) -> ServiceContext:
        config = replace(self.config, service=replace(self.config.service, argv=tuple(self.argv)))
        return context_stage.service_context(config, self.host)

    def _service_key(self) -> str:
        return self.config.source

    def _set_state(self, state: str, text: str) -> None:
        self._publish(state=state, status_text=text)

    def _publish(self, **changes) -> None:
        """Update the status snapshot; a full or read-only state dir is reported, not fatal."""
        try:
            self.board.update(**changes)
            self._status_write_failed = False
        except OSError as error:
            self.board.current = replace(self.board.current, **changes)
            if "status_text" in changes:
                self.notifier.status(changes["status_text"])
            if not self._status_write_failed:  # once per streak, not once per state change
                log.error("status_write_failed", error=str(error),
                          hint="the state dir is full or read-only; ddtreed keeps running")
            self._status_write_failed = True

    def _metrics_snapshot(self):
        return self.board.current, self.raw_store.counts()  # the metrics thread never retries or sleeps


def _status_board(config: Config, notifier: Notifier) -> StatusBoard:
    try:
        return StatusBoard.start(config.paths.state_dir, config.source, notifier.status)
    except OSError as error:  # a full state dir at start: run anyway, report it
        log.error("status_write_failed", error=str(error), hint="the state dir is full or read-only")
        return StatusBoard(config.paths.state_dir, DaemonStatus(pid=os.getpid(), state="starting",
                                                                config=config.source), notifier.status)


def _canary(store: Store, config: Config):
    """The canary and its periodic schedule, or (None, None) when [canary] is disabled."""
    if not config.canary.enabled:
        return None, None
    canary = Canary(store, config.canary)
    return canary, PeriodicCanary(canary)


def _load_catalogs(config: Config):
    """Rules and remediations as the daemon uses them; errors name file, line and field."""
    rules = load_rules(config.paths.rules_dirs or (shipped("rules"),))
    catalog = load_remediations(config.paths.remediations_dirs or (shipped("remediations"),))
    return rules, catalog
