"""The one module that wires the stages together: the supervision loop, top to bottom.

    launch → logs → tracebacks → signature → rules → remediation → restart → health → incidents

Signal handlers only enqueue; the loop acts on them between steps (`_pump`).
"""

from __future__ import annotations

import os
import queue
import signal
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import structlog

from . import context as context_stage
from .config import Config
from .host import Host, LocalHost
from .incidents import Store
from .launch import Supervisor
from .records import Application, Crash, ExitStatus, HealthResult, ServiceContext
from .remediation import Engine, load_remediations
from .restart import RestartBudget
from .rules import load_rules
from .paths import shipped
from .tracebacks import Assembler
from .health import MilestoneTracker, Prober
from .verify import Verifier, Verdict
from .notify import Notifier
from .status import DaemonStatus, write_status

log = structlog.get_logger(__name__)

EXIT_OK = 0
EXIT_GAVE_UP = 3


class Stopping(Exception):
    """Raised inside a wait when SIGTERM/SIGINT arrived: unwind to a clean stop."""


@dataclass
class Launch:
    """The service's current launch configuration (changed by args/env remediations)."""

    argv: list[str]
    env: dict[str, str]
    applications: list[Application] = field(default_factory=list)


@dataclass
class Outcome:
    """What the loop concluded about one incident (for `ddtreed demo` and tests)."""

    incident_id: int
    status: str


class Daemon:
    def __init__(self, config: Config, *, host: Host | None = None, store: Store | None = None,
                 notifier: Notifier | None = None, stop_after_incident: bool = False,
                 stop_when_healthy: bool = False, exit_on_give_up: bool = False,
                 deadline: float | None = None):
        self.config = config
        self.host = host or LocalHost()
        self.store = store or Store(config.database)
        self.notifier = notifier or Notifier.from_environment()
        self.stop_after_incident = stop_after_incident
        self.stop_when_healthy = stop_when_healthy
        self.exit_on_give_up = exit_on_give_up
        self.deadline = deadline  # time.monotonic() after which the loop stops (demo, tests)
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.rules = load_rules(config.paths.rules_dirs or (shipped("rules"),))
        self.catalog = load_remediations(config.paths.remediations_dirs or (shipped("remediations"),))
        self.engine = Engine(self.host, config.paths.state_dir, self.catalog)
        self.launch = Launch(list(config.service.argv), self._base_env())
        self.budget = RestartBudget(config.policy.max_restarts, config.policy.restart_window_s,
                                    config.policy.backoff_initial_s, config.policy.backoff_max_s)
        self.status = DaemonStatus(pid=os.getpid(), state="starting", config=config.source)
        self.outcomes: list[Outcome] = []
        self.supervisor: Supervisor | None = None
        self.follower = None
        self.assembler = Assembler()
        self.milestones = MilestoneTracker()
        self.context: ServiceContext = self._context()

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
                log.info("state_dump", **self.status.to_dict())

    def reload(self) -> None:
        """SIGHUP: reload config, rules and remediations; a bad new file keeps the old set."""
        from .config import ConfigError, load

        self.notifier.reloading()
        try:
            config = load(self.config.source) if os.path.exists(self.config.source) else self.config
            rules = load_rules(config.paths.rules_dirs or (shipped("rules"),))
            catalog = load_remediations(config.paths.remediations_dirs or (shipped("remediations"),))
        except (ConfigError, ValueError, OSError) as error:
            log.error("reload_rejected", error=str(error), hint="the previous config, rules and remediations stay in use")
        else:
            self.config, self.rules, self.catalog = config, rules, catalog
            self.engine = Engine(self.host, config.paths.state_dir, catalog)
            log.info("reloaded", rules=len(rules.rules), remediations=len(catalog.ids()))
        self.notifier.ready()

    # ---- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until SIGTERM (exit 0) or until the restart budget is spent."""
        self.notifier.ready()  # up now; the model load is the service's business, not systemd's
        for sentence in self.engine.reconcile():
            log.warning("reconciled", detail=sentence)
        try:
            self._preflight()
            self._start_service()
            while True:
                crashes, exit_status = self._serve()
                if self._handle_crash(crashes, exit_status) is False:
                    return EXIT_GAVE_UP
                if self.stop_after_incident and self.outcomes:
                    return EXIT_OK
        except Stopping:
            return EXIT_OK
        finally:
            self._shutdown()

    def _serve(self) -> tuple[tuple[Crash, ...], ExitStatus | None]:
        """Wait for readiness, verify, then follow the service until it crashes."""
        verdict = self._verifier().verify(first_start=True)
        if not verdict.ok:
            return verdict.crashes, verdict.exit_status
        self._healthy(verdict)
        if self.stop_when_healthy:
            raise Stopping()
        return self._watch()

    def _watch(self) -> tuple[tuple[Crash, ...], ExitStatus | None]:
        while True:
            groups = self.pump(0.2)
            if groups:
                return groups[0], self.supervisor.poll() if self.supervisor else None
            exit_status = self.supervisor.poll() if self.supervisor else None
            if exit_status is not None:
                return self._collect_after_exit(exit_status), exit_status

    # ---- one incident -----------------------------------------------------------------------

    def _handle_crash(self, crashes: tuple[Crash, ...], exit_status: ExitStatus | None) -> bool:
        self._set_state("diagnosing", "service crashed: diagnosing")
        self._stop_service("crash")
        if not crashes:
            crashes = (self._synthetic_crash(exit_status),)
        diagnosis = self.rules.diagnose(crashes, self.context)
        incident_id = self.store.open_incident(
            source="crash", crashes=crashes, signature=diagnosis.signature, match=diagnosis.match,
            context=self.context, detected_at=crashes[0].detected_at or time.time())
        with structlog.contextvars.bound_contextvars(incident_id=incident_id):
            log.error("incident_opened", category=diagnosis.match.category, rule=diagnosis.match.rule_id,
                      diagnosis=diagnosis.match.diagnosis)
            self.store.add_step(incident_id, "diagnosed", diagnosis.match.diagnosis,
                                {"rule_id": diagnosis.match.rule_id, "category": diagnosis.match.category})
            self.status.current_incident_id = incident_id
            status = self._remediate(incident_id, diagnosis)
            self.outcomes.append(Outcome(incident_id, status))
            self.status.current_incident_id = None
        return status != "gave-up"

    def _remediate(self, incident_id: int, diagnosis) -> str:
        fingerprint = diagnosis.signature.fingerprint
        mode = self.config.policy.mode
        remediations = list(diagnosis.match.remediations)[: self.config.policy.max_remediations_per_incident]
        if self._recurred_after_verified_fix(incident_id, fingerprint):
            return self._escalate(incident_id, fingerprint, "the same crash came back after its fix was verified")
        if mode == "off" or not remediations:
            return self._restart_unchanged(incident_id, "policy off" if mode == "off" else "no remediation known")
        if self.store.is_frozen(fingerprint):
            return self._restart_unchanged(incident_id, "auto-remediation is frozen for this signature")
        if mode == "advise":
            for remediation_id in remediations:
                plan = self.engine.plan(remediation_id, self.context)
                self.store.add_step(incident_id, "advised", f"would apply {remediation_id}",
                                    {"applicable": plan.applicable, "reason": plan.reason, "diff": plan.diff})
            self.store.finish(incident_id, "advised", "policy advise: nothing applied")
            return self._restart_unchanged(incident_id, None, finish=False)
        for remediation_id in remediations:
            result = self._try_remediation(incident_id, remediation_id)
            if result is not None:
                return result
        return self._escalate(incident_id, fingerprint, "no remediation left to try")

    def _try_remediation(self, incident_id: int, remediation_id: str) -> str | None:
        """Apply, restart, verify; keep on success ("resolved"), revert on failure (None)."""
        plan = self.engine.plan(remediation_id, self.context)
        if not plan.applicable:
            self.store.add_step(incident_id, "skipped", f"{remediation_id}: {plan.reason}")
            return None
        self._set_state("remediating", f"incident {incident_id}: applying {remediation_id}")
        application = self.engine.apply(plan, incident_id=incident_id)
        self.store.record_application(incident_id, application)
        self.store.add_step(incident_id, "applied", application.summary,
                            {"application_id": application.application_id,
                             "files": [vars(change) for change in application.files]})
        self._adopt(application)
        verdict = self._restart_and_verify(incident_id)
        if verdict.ok:
            self.store.set_remediation(incident_id, remediation_id, application.application_id)
            self.store.mark_application(application.application_id, "verified")
            self.store.finish(incident_id, "resolved", f"{remediation_id} held: {verdict.detail}")
            self._healthy(verdict)
            log.info("incident_resolved", remediation=remediation_id)
            return "resolved"
        self._stop_service("fix did not hold")
        self.engine.revert(application.application_id)
        self.store.mark_application(application.application_id, "reverted")
        self._unadopt(application)
        self.store.add_step(incident_id, "reverted", f"{remediation_id} did not hold: {verdict.detail}")
        log.warning("remediation_reverted", remediation=remediation_id, detail=verdict.detail)
        return None

    def _escalate(self, incident_id: int, fingerprint: str, reason: str) -> str:
        self.store.freeze(fingerprint, reason)
        self.store.add_step(incident_id, "escalated", f"{reason}; auto-remediation frozen for {fingerprint}")
        self.store.finish(incident_id, "escalated", reason)
        self._set_state("escalated", f"escalated: needs a person (incident {incident_id})")
        log.error("incident_escalated", reason=reason, hint=f"ddtreed incidents show {incident_id}")
        if self.stop_after_incident:
            return "escalated"
        return "escalated" if self._relaunch(incident_id) else "gave-up"

    def _restart_unchanged(self, incident_id: int, reason: str | None, finish: bool = True) -> str:
        if finish:
            self.store.add_step(incident_id, "not-remediated", reason or "")
            self.store.finish(incident_id, "open", reason or "")
        if self.stop_after_incident:
            return "open"
        return "open" if self._relaunch(incident_id) else "gave-up"

    def _recurred_after_verified_fix(self, incident_id: int, fingerprint: str) -> bool:
        previous = self.store.verified_fix_for(fingerprint)
        if previous is None:
            return False
        self.store.add_step(incident_id, "recurred", f"fix {previous['remediation_id']} had been verified")
        self.engine.revert(previous["application_id"])
        self.store.mark_application(previous["application_id"], "reverted")
        return True

    # ---- restart and verify -----------------------------------------------------------------

    def _restart_and_verify(self, incident_id: int):
        self._set_state("restarting", f"incident {incident_id}: restarting")
        self.store.add_step(incident_id, "restarting", "")
        if not self._start_service():
            return Verdict(ok=False, detail="restart budget spent")
        self.store.add_step(incident_id, "restarted", f"pid {self.supervisor.process.pid}")
        self._set_state("verifying", f"incident {incident_id}: verifying")
        verdict = self._verifier().verify(first_start=False)
        self.store.add_step(incident_id, "healthy" if verdict.ok else "failed", verdict.detail,
                            {"accept_length": verdict.accept_length})
        return verdict

    def _relaunch(self, incident_id: int) -> bool:
        return self._start_service()

    def _verifier(self) -> Verifier:
        return Verifier(self, self.config.probe, self.store)

    def _healthy(self, verdict) -> None:
        self.status.last_healthy_at = time.time()
        self.status.last_accept_length = verdict.accept_length
        text = "serving" + (f", accept len {verdict.accept_length:.2f}" if verdict.accept_length else "")
        self._set_state("running", text)

    # ---- service lifecycle ------------------------------------------------------------------

    def _start_service(self) -> bool:
        delay = self.budget.next_delay()
        if delay is None:
            self._set_state("escalated", "escalated: restart budget spent, needs a person")
            log.error("restart_budget_spent", max_restarts=self.config.policy.max_restarts,
                      hint="fix the cause, then `systemctl restart ddtreed` or send SIGHUP")
            return False
        if delay > 0:
            self._set_state("backoff", f"backing off {delay:.1f}s before restart")
            self._sleep(delay)
        self.budget.record_start()
        self.context = self._context()
        self.supervisor = Supervisor(self.host, self.config, self.launch.argv, self.launch.env)
        self.assembler = Assembler()
        self.milestones = MilestoneTracker()
        process = self.supervisor.start()
        if self.follower is not None:
            self.follower.close()
        self.follower = self.host.open_follower(self.supervisor.log_paths + list(self.config.paths.extra_logs))
        self.status.service_pid = process.pid
        self.status.service_started_at = time.time()
        self.status.restarts = self.budget.starts - 1
        self._set_state("starting", "service starting")
        log.info("service_started", pid=process.pid, argv=self.launch.argv)
        return True

    def _stop_service(self, reason: str) -> ExitStatus | None:
        if self.supervisor is None:
            return None
        exit_status = self.supervisor.stop(reason)
        self.status.service_pid = None
        return exit_status

    def _shutdown(self) -> None:
        self.notifier.stopping()
        self._set_state("stopping", "stopping the service")
        try:
            self._stop_service("ddtreed stopping")
        finally:
            if self.follower is not None:
                self.follower.close()
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
            for milestone in self.milestones.feed(chunk):
                log.info("startup_milestone", milestone=milestone.name)
                if self.status.state == "starting" or self.status.state == "verifying":
                    self._set_state(self.status.state, self.milestones.progress_text())
        return self.assembler.take(time.time())

    def _collect_after_exit(self, exit_status: ExitStatus) -> tuple[Crash, ...]:
        """The service is gone: read what it printed last, then flush the assembler."""
        deadline = time.monotonic() + 1.0
        groups: list[tuple[Crash, ...]] = []
        while time.monotonic() < deadline and not groups:
            groups = self.pump(0.1)
        groups = groups or self.assembler.take(time.time(), final=True)
        return groups[0] if groups else ()

    def _synthetic_crash(self, exit_status: ExitStatus | None) -> Crash:
        detail = exit_status.describe() if exit_status else "stopped responding"
        return Crash(kind="killed", exception=None, message=f"service {detail} without a traceback",
                     exit_code=exit_status.code if exit_status else None, detected_at=time.time())

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._handle_signals()
            self.notifier.watchdog()
            time.sleep(min(left, 0.2))

    # ---- small helpers ----------------------------------------------------------------------

    def _preflight(self) -> None:
        from .preflight_stage import preflight_before_launch

        preflight_before_launch(self)

    def _adopt(self, application: Application) -> None:
        if application.launch is not None:
            self.launch.argv = list(application.launch.argv)
            self.launch.env = dict(application.launch.env)
        self.launch.applications.append(application)

    def _unadopt(self, application: Application) -> None:
        self.launch.applications.remove(application)
        if application.launch is not None:
            previous = self.engine.previous_launch(application.application_id)
            self.launch.argv, self.launch.env = list(previous.argv), dict(previous.env)

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.config.service.env)
        return env

    def _context(self) -> ServiceContext:
        config = replace(self.config, service=replace(self.config.service, argv=tuple(self.launch.argv)))
        return context_stage.service_context(config, self.host)

    def _set_state(self, state: str, text: str) -> None:
        self.status.state, self.status.status_text = state, text
        self.notifier.status(text)
        write_status(self.config.paths.state_dir, self.status)
