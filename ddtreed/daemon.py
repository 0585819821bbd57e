"""The one module that wires the stages together: the supervision loop and its transitions.

    launch → logs → tracebacks → signature → rules → remediation → restart → health → incidents

Signal handlers only enqueue; the loop acts on them between steps (`_turn`). Every state change
goes through the lifecycle's transition table. The loop emits events (`Outcome`, `Healthy`) to
subscribers; the demo and tests stop it by `request_stop()`, which enqueues like a SIGTERM.
"""

from __future__ import annotations

import json
import queue
import signal
from dataclasses import replace
from typing import Callable

import structlog

from .canary import canary_crash
from .config import Config, ConfigError
from .health import Prober
from .host import Host
from .incidents import Store
from .incidents.retention import Retention
from .incident_path import check_canary, give_up, handle_crash, observed, probe_crash
from .lifecycle import Lifecycle, Stopping
from .metrics import start_metrics
from .notify import Hooks, Notifier, delivery_step, incident_notification
from .preflight_gate import confirm, run_gate
from .records import Application, Crash, ExitStatus, Healthy, ServiceContext, Verdict
from .recovery import previous_record, recover, verified_launch
from .remediation import Attempt, Launch, attempt, revert
from .service_run import ServiceRun
from .status import StatusBoard
from .serving import EVIDENCE_PREFIX, UNHEALTHY, ServingWatch, hang_evidence, settings_from
from .verify import baseline_key, flatten, verify
from .wiring import Wiring, build, rebuild, reload_config, service_context

log = structlog.get_logger(__name__)

EXIT_OK = 0
# The restart budget is spent. 75 is EX_TEMPFAIL of sysexits(3): `systemctl status` shows
# `status=75/TEMPFAIL`, not an LSB word (3 reads NOTIMPLEMENTED there), and it is what happened:
# the failure may pass (a GPU reset, freed memory), but a person decides when to retry. The units
# keep systemd from retrying behind the budget's back: RestartPreventExitStatus=2 75.
EXIT_GAVE_UP = 75
TURN_S = 0.2  # the longest the loop goes without answering signals and the watchdog
HOOKS_DRAIN_STOP_S = 2.0  # at a stop, pending notifications get this long (a prompt SIGTERM)
HOOKS_DRAIN_GAVE_UP_S = 30.0  # at a give-up, the person must hear of it before ddtreed exits


class Daemon:
    def __init__(self, config: Config, *, wiring: Wiring | None = None, host: Host | None = None,
                 store: Store | None = None, notifier: Notifier | None = None):
        self.wiring = wiring or build(config, host=host, store=store)
        self.clock = self.wiring.clock
        self.store = self.wiring.store  # DurableStore: a full disk waits, a lost database is replaced
        self.store.wait = self.wait  # ...answering signals and the watchdog while it waits
        # unset: the SGLang tree must not inherit NOTIFY_SOCKET / WATCHDOG_* and talk to systemd
        self.notifier = notifier or Notifier.from_environment(unset=True)
        self.signals: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.launch = Launch(list(config.service.argv), dict(config.service.env))
        self.launch.adopt(verified_launch(self.engine))  # a verified flag/env fix outlives ddtreed
        self.previous = previous_record(config.paths.state_dir)  # before our own record overwrites it
        self.board = StatusBoard.start(config.paths.state_dir, config.source, self.notifier.status)
        self.lifecycle = Lifecycle(lambda state, text: self.publish(state=state, status_text=text))
        self.service: ServiceRun | None = None
        self.context: ServiceContext = service_context(self.wiring, self.launch.argv)
        self.metrics = None
        self.hooks = Hooks.from_config(config.notify)  # a person is told on escalation, give-up, …
        self._stop_asked = False  # a SIGTERM/SIGINT is queued: probes end early
        self.reloads = 0  # SIGHUPs handled; a blocked launch waits for the next one
        self.prevented_pending: list[int] = []  # preflight incidents awaiting a healthy start
        self.gave_up = ""  # why the restart budget ran out: the daemon then ends `gave-up`, not `stopped`
        self.last_incident_id: int | None = None
        self._subscribers: list[Callable[[object], None]] = []
        self.retention = Retention(lambda: self.store, lambda: self.config.incidents, self.clock)

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
        self._signal(signal.SIGTERM)

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, lambda number, _frame: self._signal(number))

    def _signal(self, signum: int) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self._stop_asked = True
        self.signals.put(signum)

    def stop_asked(self) -> bool:
        """A stop is queued: an HTTP probe or canary request in flight gives up at once."""
        return self._stop_asked

    def prober(self) -> Prober:
        prober = self.wiring.prober(self.host.http_base_url(self.config.service.host, self.context.port))
        if isinstance(prober, Prober):
            prober.interrupted = self.stop_asked
        return prober

    def notify_person(self, event: str, incident_id: int | None, extra: dict | None = None) -> None:
        """Run the [notify] hooks for `event` about this incident; never blocks (a worker delivers)."""
        if not self.hooks.configured:
            return
        try:
            incident = self.store.get(incident_id) if incident_id is not None else {}
        except (KeyError, ValueError, OSError) as error:
            log.warning("notify.incident_unreadable", incident_id=incident_id, error=str(error))
            incident = {"id": incident_id}
        self.hooks.send(incident_notification(event, incident, extra=extra))

    def _record_deliveries(self, hooks: Hooks | None = None) -> None:
        """Store finished hook deliveries as incident steps (on the loop thread: one writer)."""
        for record in (hooks or self.hooks).completed():
            if isinstance(record.incident_id, int):
                try:
                    self.store.add_step(record.incident_id, *delivery_step(record))
                except (KeyError, ValueError) as error:  # the incident was pruned meanwhile
                    log.warning("notify.record_lost", incident_id=record.incident_id, error=str(error))

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
        done = revert(application, engine=self.engine, store=self.store, launch=self.launch,
                      incident_id=incident_id)
        self.refresh_context()
        return done

    def trial(self) -> Verdict:
        """Start the service as launched now, verify it like a fix (window included), stop it."""
        try:
            if not self.start_service():
                return Verdict(False, "restart budget spent")
            self.lifecycle.enter("verifying", "trial: verifying")
            return self.verify_start(window=True)
        except Stopping:
            return Verdict(False, "stopped before the trial finished (timeout or signal)")
        finally:
            self.stop_service("trial over")

    # ---- the loop ------------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until a stop (exit 0) or until the restart budget is spent (exit 75)."""
        self.notifier.ready(status="ddtreed up; launching the service")  # systemd must not wait for a 10-minute load
        self.metrics = start_metrics(self.config.metrics.listen, self._metrics_snapshot)
        recover(self.engine, self.store, self.host, self.config.paths.state_dir, self.previous, self.context.port)
        code = EXIT_GAVE_UP  # unless a stop ends it: the last state says which (stopped / gave-up)
        try:
            self.prevented_pending += run_gate(self)
            if not self._relaunch():
                return EXIT_GAVE_UP
            while True:
                outcome = handle_crash(self, *self._serve())
                self.last_incident_id = outcome.incident_id
                self._emit(outcome)
                self._turn()  # a stop asked for by a subscriber comes before any relaunch
                if outcome.status != "resolved" and not self._relaunch():  # resolved: it runs fixed
                    self.notify_person("gave-up", outcome.incident_id,
                                       {"reason": "the restart budget is spent; the service stays down"})
                    self.hooks.wait_idle(HOOKS_DRAIN_GAVE_UP_S)
                    return EXIT_GAVE_UP
        except Stopping:
            code = EXIT_OK
            return EXIT_OK
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
        periodic = self.wiring.periodic_canary
        watch = self._serving_watch()
        while True:
            groups = self.service.pump(TURN_S)
            if groups and not observed(self, flatten(groups)):  # observed: a live server's handled error
                return flatten(groups), self.service.poll()
            exit_status = self.service.poll()
            if exit_status is not None:
                return self.service.drain(), exit_status
            events, self.service.serving_events = self.service.serving_events + watch.tick(), []
            if events:  # hung, eager fallback, collapse: an incident with its evidence
                return (self._serving_crash(events[0]),), None
            if periodic is not None and periodic.due():
                result = periodic.run_if_due(self.prober(), self.context)
                if result is not None:
                    self.show_canary(result)
                    if result.category is not None:  # silent corruption or collapse: an incident
                        return (canary_crash(result),), None
                    if result.passed:
                        self.serving_probe_passed()

    def serving_probe_passed(self) -> None:
        """A probe of the serving service passed: the status board and /metrics show it now."""
        now = self.clock.time()
        self.publish(last_healthy_at=now)
        if self.metrics is not None:
            self.metrics.healthy_probe(now)

    def _serving_watch(self) -> ServingWatch:
        """The serving watch of this verified launch: probes, decode lines (ddtreed/serving.py)."""
        watch = ServingWatch(settings_from(self.config.probe), self.prober(),
                             captured_graphs=self.service.milestones.captured_graphs,
                             baseline=self.store.baseline(baseline_key(self.context)),
                             clock=self.clock.monotonic, wall=self.clock.time,
                             on_ok=self.serving_probe_passed)
        self.service.serving, self.service.serving_events = watch, []
        return watch

    def _serving_crash(self, event) -> Crash:
        """The event as a crash; a hung service's stacks and GPU state are captured first."""
        crash = event.crash()
        log.error("serving.incident", kind=event.kind, detail=event.detail)
        pid = self.service.pid
        if event.kind == UNHEALTHY and pid is not None and self.host.local:
            evidence = hang_evidence(pid)
            crash = replace(crash, context=crash.context + (
                EVIDENCE_PREFIX + json.dumps(evidence, default=str)[:60000],))
        return crash

    def verify_start(self, window: bool, on_healthy: Callable[[Verdict], None] | None = None) -> Verdict:
        """Verify the service just started (the window too when `window`), then the output canary.

        `on_healthy` is called the moment the probes pass (before the window)."""
        canary = (lambda verdict: check_canary(self, verdict)) if self.wiring.canary is not None else None

        def passed(verdict: Verdict) -> None:
            self.publish(last_healthy_at=self.clock.time(), last_accept_length=verdict.accept_length)
            if on_healthy is not None:
                on_healthy(verdict)

        try:
            return verify(self.service, self.prober(), self.clock, self.config.probe, self.context, self.store,
                          window=window, canary=canary, report=self._report_progress, on_healthy=passed)
        finally:
            self.publish(progress=None)

    def _report_progress(self, shown: dict) -> None:
        """Startup progress and the recurrence watch: the status snapshot, systemd's STATUS=."""
        self.publish(progress=shown)
        if self.lifecycle.state in ("starting", "verifying"):
            self.lifecycle.enter(self.lifecycle.state, shown["text"])

    def healthy(self, verdict: Verdict) -> None:
        """The service passed verification: publish it, enter `running`, emit `Healthy`."""
        accept = verdict.accept_length
        self.publish(last_healthy_at=self.clock.time(), last_accept_length=accept, progress=None)
        self.lifecycle.enter("running", "serving" + (f", accept len {accept:.2f}" if accept is not None else ""))
        self._emit(Healthy(verdict))

    # ---- verification and the service's lifecycle ------------------------------------------------

    def _relaunch(self) -> bool:
        """(Re)start under the restart budget; False (gave up) when it is spent."""
        if self.start_service():
            return True
        policy = self.config.policy
        reason = (f"restart budget spent: {self.budget.starts_in_window} starts in "
                  f"{policy.restart_window_s:g} s (policy.max_restarts = {policy.max_restarts})")
        give_up(self, self.last_incident_id, reason)
        self.gave_up = reason
        self.lifecycle.enter("escalated", f"gave up: {reason}; the service stays stopped, a person must look")
        log.error("restart_budget_spent", max_restarts=policy.max_restarts, incident_id=self.last_incident_id,
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
                                  on_turn=self._turn, on_progress=self._progress)
        pid = self.service.start()
        restarts = self.board.current.restarts + (1 if self.board.current.service_started_at else 0)
        self.publish(service_pid=pid, service_started_at=self.clock.time(), restarts=restarts,
                      service_token=self.service.token)
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
            self.hooks.close(HOOKS_DRAIN_STOP_S)
            self._record_deliveries()
            for resource in (self.service, self.metrics, self.host):  # an SshHost holds a connection, a tunnel
                if resource is not None:
                    resource.close()
            if final_state == "gave-up":
                self.lifecycle.enter("gave-up", self.gave_up or "gave up: the restart budget is spent")
            else:
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
        self._record_deliveries()
        self.retention.tick()  # [incidents] keep / max_age_days: at start, then hourly, in batches
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
        before_notify = self.config.notify
        try:
            config = reload_config(self.config)
            wiring = rebuild(self.wiring, config)
        except (ConfigError, ValueError, OSError) as error:
            log.error("reload_rejected", error=str(error),
                      hint="the previous config, rules and remediations stay in use")
        else:
            before = self.config.service
            self.wiring = wiring
            if config.notify != before_notify:  # new hooks from now on; the old ones finish first
                old, self.hooks = self.hooks, Hooks.from_config(config.notify)
                old.close(HOOKS_DRAIN_STOP_S)
                self._record_deliveries(old)
            if (config.service.argv, config.service.env) != (before.argv, before.env):  # the operator's new launch
                self.launch = Launch(list(config.service.argv), dict(config.service.env))
                log.info("launch_reloaded", argv=self.launch.argv, hint="used from the next (re)start")
            log.info("reloaded", rules=len(wiring.rules), remediations=len(list(wiring.catalog)))
        self.reloads += 1
        self.notifier.ready()

    def _emit(self, event: object) -> None:
        for callback in list(self._subscribers):
            callback(event)

    def _remediating(self, incident_id: int | None, remediation_id: str) -> None:
        where = "preflight" if self.lifecycle.state == "preflight" else f"incident {incident_id}"
        self.lifecycle.enter("remediating", f"{where}: applying {remediation_id}")

    def _progress(self, text: str) -> None:
        if self.lifecycle.state in ("starting", "verifying"):
            self.lifecycle.enter(self.lifecycle.state, text)

    def show_canary(self, result) -> None:
        self.publish(canary={"last_run_at": result.at, "passed": result.passed, "detail": result.detail,
                             "accept_length": result.accept_length})  # apart from the probe's

    def refresh_context(self) -> ServiceContext:
        self.context = service_context(self.wiring, self.launch.argv)  # the launch moved (fix, revert)
        return self.context

    def publish(self, **changes) -> None:
        """Update the status snapshot (daemon-state.json, systemd STATUS=)."""
        self.board.publish(**changes)

    def _metrics_snapshot(self):
        return self.board.current, self.store.current.counts()  # the metrics thread never retries or sleeps

