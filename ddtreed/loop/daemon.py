"""The one module that wires the stages together: the supervision loop and its transitions.

    launch → logs → tracebacks → signature → rules → remediation → restart → health → incidents

Signal handlers only enqueue; the loop acts on them between steps (`_turn`); every state change goes
through the lifecycle's table. Subscribers get `Outcome`, `Healthy`; `request_stop()` enqueues a SIGTERM."""

from __future__ import annotations

import signal
from typing import Callable

import structlog

from ..config import Config
from ..health.probes import Prober
from ..service.host import Host
from ..incidents import Retention, Store
from .incident_path import check_canary, diagnose_recorded, give_up, handle_crash, observed, probe_crash
from .lifecycle import EXIT_GAVE_UP, EXIT_OK, Lifecycle, SignalQueue, Stopping
from ..ops.notify import IncidentHooks, Notifier, WatchdogPing
from .preflight_gate import confirm, run_gate
from ..records import Application, Crash, ExitStatus, Healthy, ServiceContext, Verdict
from .recovery import previous_record, recover, verified_launch
from ..remediation import Attempt, Launch, attempt, revert
from ..service.service_run import ServiceRun
from ..ops.progress import StartupReport
from ..ops.status import StatusBoard, canary_status
from ..health.serving import periodic_check, serving_crash, watch_service
from ..health.verify import baseline_key, flatten, verify
from .warmup import DiagnosisWarmUp, thaw_heap
from .wiring import Wiring, build, prober_for, reload, reloaded_launch, service_context

log = structlog.get_logger(__name__)
TURN_S = 0.2  # the longest the loop goes without answering signals and the watchdog


class Daemon:
    def __init__(self, config: Config, *, wiring: Wiring | None = None, host: Host | None = None,
                 store: Store | None = None, notifier: Notifier | None = None):
        self.wiring = wiring or build(config, host=host, store=store)
        self.clock = self.wiring.clock
        self.store = self.wiring.store  # DurableStore: a full disk waits, a lost database is replaced
        self.store.wait = self.wait  # ...answering signals and the watchdog while it waits
        self.notifier = notifier or Notifier.from_environment(unset=True)  # unset: not for the SGLang tree
        self.ping_watchdog = WatchdogPing(self.notifier, self.clock.monotonic)  # at most once a second
        self.signals = SignalQueue()  # handlers only enqueue; `_turn` acts
        self.launch = Launch(list(config.service.argv), dict(config.service.env))
        self.launch.adopt(verified_launch(self.engine))  # a verified flag/env fix outlives ddtreed
        self.previous = previous_record(config.paths.state_dir)  # before our own record overwrites it
        self.board = StatusBoard.start(config.paths.state_dir, config.source, self.notifier.status)
        self.lifecycle = Lifecycle(lambda state, text: self.publish(state=state, status_text=text))
        self.service: ServiceRun | None = None
        self.context: ServiceContext = service_context(self.wiring, self.launch.argv)
        self.metrics = None
        self.hooks = IncidentHooks(config.notify, self.store)  # a person is told on escalation, give-up, …
        self.report = StartupReport(self.publish, self.lifecycle)
        self.reloads = 0  # SIGHUPs handled; a blocked launch waits for the next one
        self.prevented_pending: list[int] = []  # preflight incidents awaiting a healthy start
        self.gave_up = ""  # why the restart budget ran out: the daemon then ends `gave-up`, not `stopped`
        self.last_incident_id: int | None = None
        self._subscribers: list[Callable[[object], None]] = []
        self.retention = Retention(lambda: self.store, lambda: self.config.incidents, self.clock)
        self.warm_up = DiagnosisWarmUp()  # the diagnosis path run once while the service loads

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

    def stop_asked(self) -> bool:
        """A stop is queued: an HTTP probe or canary request in flight gives up at once."""
        return self.signals.stop_asked

    def prober(self) -> Prober:
        return prober_for(self.wiring, self.context.port, self.stop_asked, self.service)  # its death cuts a probe

    def notify_person(self, event: str, incident_id: int | None, extra: dict | None = None) -> None:
        """Run the [notify] hooks for `event` about this incident; never blocks (a worker delivers)."""
        self.hooks.tell(event, incident_id, extra)

    def attempt(self, remediation_id: str, incident_id: int | None,
                verify_with: Callable[[], Verdict] | None = None) -> Attempt:
        """The one `attempt()`, on this daemon's launch and context."""
        result = attempt(remediation_id, incident_id, engine=self.engine, store=self.store, launch=self.launch,
                         context=self.context, verify=verify_with,
                         on_apply=lambda applying: self._remediating(incident_id, applying),
                         before_revert=lambda: self.stop_service("the fix did not hold"))
        self.refresh_context()
        return result

    def revert(self, application: Application, incident_id: int | None = None) -> bool:
        done = revert(application, engine=self.engine, store=self.store, launch=self.launch, incident_id=incident_id)
        self.refresh_context()
        return done

    # ---- the loop and its transitions ---------------------------------------------------------

    def run(self) -> int:
        """Supervise until a stop (exit 0) or until the restart budget is spent (exit 75)."""
        self.notifier.ready(status="ddtreed up; launching the service")  # systemd must not wait for a 10-minute load
        if listen := self.config.metrics.listen:  # prometheus_client (~1 MB of RSS) only for an endpoint
            from ..ops.metrics import start_metrics  # snapshots of the store in use: never retries or sleeps
            self.metrics = start_metrics(listen, lambda: (self.board.current, self.store.current.counts()))
        code = EXIT_GAVE_UP  # unless a stop ends it: the last state says which (stopped / gave-up)
        try:  # recovery too: a stop met while it writes is a stop, an error in it says so in the status
            ids = recover(self.engine, self.store, self.host, self.board.state_dir, self.previous, self.context.port)
            diagnose_recorded(self.store, self.rules, self.context, ids)  # a crash recorded, never judged
            self.prevented_pending += run_gate(self)
            if not self._relaunch():
                return EXIT_GAVE_UP
            while True:
                outcome = handle_crash(self, *self._serve())
                self.last_incident_id = outcome.incident_id
                self._emit(outcome)
                self._turn()  # a stop asked for by a subscriber comes before any relaunch
                if outcome.status != "resolved" and not self._relaunch():  # resolved: it runs fixed
                    self.hooks.gave_up(outcome.incident_id)
                    return EXIT_GAVE_UP
        except Stopping:
            return (code := EXIT_OK)  # the finally below reads it
        except Exception as error:  # a bug of ddtreed's (a rule's, say): its last status says so, not a budget
            self.gave_up = f"ddtreed failed: {type(error).__name__}: {error}"[:300]
            raise
        finally:
            self.close("stopped" if code == EXIT_OK else "gave-up")

    def _serve(self) -> tuple[tuple[Crash, ...], ExitStatus | None]:
        """Wait for readiness and verify, then follow the service until it fails."""
        verdict = self.verify_start(window=False)
        if not verdict.ok:
            return verdict.crashes or (probe_crash(verdict, self.clock.time()),), verdict.exit_status
        self.healthy(verdict)
        confirm(self.store, self.prevented_pending, verdict)
        self.prevented_pending.clear()
        return self._watch()

    def _watch(self) -> tuple[tuple[Crash, ...], ExitStatus | None]:
        watch = watch_service(self.service, self.config.probe, self.prober(), clock=self.clock,
                              baseline=self.store.baseline(baseline_key(self.context)), on_ok=self.serving_probe_passed)
        while True:
            groups = self.service.pump(TURN_S)
            if groups and not observed(self, flatten(groups)):  # observed: crash text, the service up and healthy
                return flatten(groups), self.service.poll()
            exit_status = self.service.poll()
            if exit_status is not None:
                return self.service.drain(), exit_status
            crash = serving_crash(self.service, watch, self.host.local) or periodic_check(
                self.wiring.periodic_canary, self.prober, self.context, self.show_canary, self.serving_probe_passed)
            if crash is not None:  # hung, eager fallback, collapse, a failed canary: an incident
                return (crash,), None

    def serving_probe_passed(self) -> None:
        """A probe of the serving service passed: the status board and /metrics show it now."""
        self.publish(last_healthy_at=(now := self.clock.time()))
        if self.metrics is not None:
            self.metrics.healthy_probe(now)

    def verify_start(self, window: bool, on_healthy: Callable[[Verdict], None] | None = None) -> Verdict:
        """Verify the new start (the window too), then the canary; `on_healthy(verdict)` once probes pass."""
        canary = (lambda verdict: check_canary(self, verdict)) if self.wiring.canary is not None else None

        def passed(verdict: Verdict) -> None:
            self.publish(last_healthy_at=self.clock.time(), last_accept_length=verdict.accept_length)
            (on_healthy or (lambda verdict: None))(verdict)

        try:
            return verify(self.service, self.prober(), self.clock, self.config.probe, self.context, self.store,
                          window=window, canary=canary, report=self.report, on_healthy=passed,
                          not_a_crash=lambda crashes: observed(self, crashes))
        finally:
            self.publish(progress=None)

    def healthy(self, verdict: Verdict) -> None:
        """The service passed verification: publish it, enter `running`, emit `Healthy`."""
        accept = verdict.accept_length
        self.publish(last_healthy_at=self.clock.time(), last_accept_length=accept, progress=None)
        self.lifecycle.enter("running", "serving" + (f", accept len {accept:.2f}" if accept is not None else ""))
        self._emit(Healthy(verdict))

    def _relaunch(self) -> bool:
        """(Re)start under the restart budget; False (gave up) when it is spent."""
        if self.start_service():
            return True
        self.gave_up = reason = self.budget.spent_reason()
        give_up(self, self.last_incident_id, reason)
        self.lifecycle.enter("escalated", f"gave up: {reason}; the service stays stopped, a person must look")
        log.error("restart_budget_spent", max_restarts=self.budget.max_restarts, incident_id=self.last_incident_id,
                  hint="fix the cause, then restart ddtreed (systemctl restart); exit code 75")
        return False

    def start_service(self, backoff: bool = True) -> bool:
        """Launch; False when the restart budget is spent. `backoff=False` after a fix was applied:
        that restart tests a change, it is not a blind retry (it still counts against the budget)."""
        delay = self.budget.next_delay()
        if delay is None:
            return False
        if backoff and delay > 0 and self.budget.starts_in_window > 0:
            self.lifecycle.enter("backoff", f"backing off {delay:.1f}s before restart")
            self.wait(delay)
        self.budget.record_start()
        self.refresh_context()
        if self.service is not None:
            self.service.close()
        self.service = ServiceRun(self.host, self.config, self.launch.argv, self.launch.env, self.clock,
                                  on_turn=self._turn, on_progress=self.report.text)
        self.board.service_started(self.service.start(), self.service.token, self.clock.time())
        self.lifecycle.enter("starting", "service starting")
        return True

    def stop_service(self, reason: str, final: bool = False, settle_s: float = 0.0) -> ExitStatus | None:
        if self.service is None:
            return None
        exit_status = self.service.stop(reason, final, settle_s=settle_s)
        self.publish(service_pid=None)
        return exit_status

    def close(self, final_state: str = "stopped") -> None:
        """Stop the service and release everything; the daemon ends `stopped` (or `gave-up`)."""
        self.notifier.stopping()
        try:
            self.lifecycle.enter("stopping", "stopping the service")
            self.stop_service("ddtreed stopping", final=True)
        finally:
            self.hooks.close()
            for resource in [r for r in (self.service, self.metrics, self.host) if r is not None]:
                resource.close()  # an SshHost holds a connection, a tunnel
            self.lifecycle.enter(final_state, (self.gave_up or "gave up: the restart budget is spent")
                                 if final_state == "gave-up" else "stopped")
            thaw_heap()  # the heap the warm-up froze, back to the collector (a process that outlives the daemon)

    def _turn(self) -> None:
        """Between steps: act on queued signals (a stop raises Stopping), ping the watchdog."""
        for signum in self.signals.pending():
            if signum in (signal.SIGTERM, signal.SIGINT):
                log.info("stop_requested", signal=signal.Signals(signum).name)
                raise Stopping()
            if signum == signal.SIGHUP:
                self.reload()
            elif signum == signal.SIGUSR1:
                log.info("state_dump", **self.board.current.to_dict(), argv=self.launch.argv,  # SIGUSR1
                         budget_starts=self.budget.starts_in_window, states=self.lifecycle.history[-20:])
        self.hooks.record()
        self.retention.tick()  # [incidents] keep / max_age_days: at start, then hourly, in batches
        self.ping_watchdog()
        self.warm_up.turn(self.rules, self.lifecycle.state, self.service, self.context, self.clock)  # once: idle

    def wait(self, seconds: float, condition: Callable[[], bool] = lambda: False, sleep=None) -> None:
        """Wait up to `seconds` for `condition()`, still answering signals and the watchdog."""
        deadline = self.clock.monotonic() + seconds
        while (left := deadline - self.clock.monotonic()) > 0 and not condition():
            self._turn()
            (sleep or self.clock.sleep)(min(left, TURN_S))  # `sleep`: one the awaited event can end

    def reload(self) -> None:
        """SIGHUP: rebuild the wiring from the config file; a bad new file keeps the old one."""
        self.notifier.reloading()
        wiring = reload(self.wiring)
        if wiring is not None:
            before, self.wiring = self.config, wiring
            self.hooks.reconfigure(wiring.config.notify)  # the old hooks finish first
            self.launch = reloaded_launch(before, wiring.config) or self.launch  # used from the next (re)start
            thaw_heap()  # the old wiring was frozen with the heap: collectable again; the new rules' warm-up refreezes
            log.info("reloaded", rules=len(wiring.rules), remediations=len(list(wiring.catalog)))
        self.reloads += 1
        self.notifier.ready()

    def _emit(self, event: object) -> None:
        for callback in list(self._subscribers):
            callback(event)

    def _remediating(self, incident_id: int | None, remediation_id: str) -> None:
        where = "preflight" if self.lifecycle.state == "preflight" else f"incident {incident_id}"
        self.lifecycle.enter("remediating", f"{where}: applying {remediation_id}")

    def show_canary(self, result) -> None:
        self.publish(canary=canary_status(result))

    def refresh_context(self) -> ServiceContext:
        self.context = service_context(self.wiring, self.launch.argv)  # the launch moved (fix, revert)
        return self.context

    def publish(self, **changes) -> None:
        """Update the status snapshot (daemon-state.json, systemd STATUS=)."""
        self.board.publish(**changes)
