"""One incident, from the failed service to its outcome: record, diagnose, decide, remediate, verify.

`handle_crash(loop, crashes, exit_status) -> Outcome` is the crash path. `loop` is the daemon
seen through the `Loop` protocol below (its public API only). The policy decisions read top to
bottom: a recurrence of a verified fix escalates; policy off / nothing known / frozen / advise
relaunch unchanged; otherwise each remediation of the rule is tried through `attempt()` until one
holds, and when none does the signature is frozen and a person is told.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Protocol

import structlog

from ..clock import Clock
from ..config import Config
from .lifecycle import Lifecycle, Stopping
from ..incidents.stderr_tail import describe_exit, evidence
from ..ops.logsetup import incident_context
from ..records import Application, Crash, ExitStatus, Outcome, RuleMatch, ServiceContext, Signature, Verdict
from ..remediation import Attempt, Engine, Launch
from ..rules import Diagnosis, RuleSet
from ..signature import signature_of
from ..service import gcpause, killpoint
from ..health.serving import evidence_of, still_answering, without_echoes

log = structlog.get_logger(__name__)

OBSERVE_SETTLE_S = 2.0  # a service dying of what it printed exits (or fails health) within this
OBSERVE_POLL_S = 0.002  # a slice of the settle wait (a pidfd ends it at the exit, else seen within it)
OBSERVE_LIST_EVERY = 5  # ...and lists the session's processes every this many slices (a /proc pass)
OBSERVE_HEALTH_S = 5.0  # deadline of the health probe that decides "alive and serving"
OBSERVED_MERGE_S = 3600.0  # the same handled error again within this: a step, not a new incident
LAUNCHER_SETTLE_S = 1.0  # a launcher that printed its own error is exiting; it gets this long to finish
HOLDER_RECHECK_S = 30.0  # a GPU held by another process is re-checked this often (and on SIGHUP)


class Loop(Protocol):
    """What the crash path needs from the daemon (ddtreed.loop.daemon.Daemon provides it)."""

    lifecycle: Lifecycle
    store: Any  # the incident store (a DurableStore over incidents.Store)
    host: Any  # ddtreed.service.host.Host: gpu_holders(pids) (NVML)
    reloads: int  # SIGHUPs handled so far
    launch: Launch
    context: ServiceContext
    wiring: Any  # ddtreed.loop.wiring.Wiring
    clock: Clock
    service: Any  # ddtreed.service.service_run.ServiceRun

    @property
    def config(self) -> Config: ...

    @property
    def rules(self) -> RuleSet: ...

    @property
    def engine(self) -> Engine: ...

    def attempt(self, remediation_id: str, incident_id: int | None,
                verify_with: Callable[[], Verdict] | None = None) -> Attempt: ...

    def revert(self, application: Application, incident_id: int | None = None) -> bool: ...

    def start_service(self, backoff: bool = True) -> bool: ...

    def verify_start(self, window: bool, on_healthy: Callable[[Verdict], None] | None = None) -> Verdict: ...

    def refresh_context(self) -> ServiceContext: ...

    def show_canary(self, result) -> None: ...

    def prober(self): ...

    def healthy(self, verdict: Verdict) -> None: ...

    def stop_service(self, reason: str, final: bool = False, settle_s: float = 0.0) -> ExitStatus | None: ...

    def publish(self, **changes) -> None: ...

    def notify_person(self, event: str, incident_id: int | None, extra: dict | None = None) -> None: ...

    def wait(self, seconds: float, condition: Callable[[], bool] = ...,
             sleep: Callable[[float], None] | None = None) -> None: ...


LATE_SCAN = 50  # the newest incidents a start looks through for a recorded crash never judged
LATE_BUDGET_S = 10.0  # the late verdicts a start gives before it launches the service, at most


def diagnose_recorded(store, rules: RuleSet, context: ServiceContext | None, incident_ids=(),
                      clock: Callable[[], float] = time.monotonic) -> list[int]:
    """Diagnose the crashes an earlier daemon recorded but never judged, from their records.

    The crash path commits a crash's row before the rules run (a crash is never lost to a rule
    that raises), so a ddtreed killed in between, or one whose rules failed, leaves a row that says
    only "not diagnosed"; recovery closes it. This gives each such incident (`incident_ids`, and
    any among the newest LATE_SCAN, so a start killed before it got here is made up for by the
    next; it runs before this daemon opens any) the reading the rules give the recorded crash,
    under the launch context it was recorded with, with a `diagnosed` step that says it came
    late. Only what the record keeps is judged (not the lines printed before the crash, at most
    MAX_STORED_CRASHES crashes); the recorded crashes and their signature stay as recorded;
    nothing is remediated. It runs before the service is launched, so it stops when LATE_BUDGET_S
    is spent (the rest waits for a later start); a record the rules cannot read is left as it was
    and logged; a stop is not caught. Returns the ids diagnosed."""
    from ..incidents.encode import MAX_STORED_CRASHES, context_from_record, crash_from_record

    try:
        recent = [row["id"] for row in store.list_incidents(limit=LATE_SCAN)
                  if row["source"] == "crash" and row["title"] is None]
    except Exception as error:  # noqa: BLE001 - an unreadable store: the ids recovery named are still tried
        log.warning("late_diagnosis_scan_failed", error=f"{type(error).__name__}: {error}")
        recent = []
    started = clock()
    done: list[int] = []
    for incident_id in sorted(set(incident_ids) | set(recent)):
        if clock() - started > LATE_BUDGET_S:
            log.warning("late_diagnosis_budget_spent", budget_s=LATE_BUDGET_S, diagnosed=len(done),
                        hint="the remaining recorded crashes are judged at a later start")
            break
        try:
            incident = store.get(incident_id)
            if (incident["source"] != "crash" or incident["title"] is not None
                    or incident["diagnosis"] is not None or "tracebacks" in incident.get("unreadable", ())):
                continue
            records = incident["tracebacks"] if isinstance(incident["tracebacks"], list) else []
            crashes = tuple(crash_from_record(record) for record in records[:MAX_STORED_CRASHES]
                            if isinstance(record, dict))
            if not crashes:
                continue
            diagnosis = rules.diagnose(crashes, context_from_record(incident["context"]) or context)
            match = diagnosis.match
            store.set_diagnosis(incident_id, crashes, diagnosis.signature, match, keep_records=True)
            store.add_step(incident_id, "diagnosed", "at a later start, from the recorded crash (its first diagnosis "
                           f"did not complete): {match.category}"
                           + (f" ({match.rule_id}): {match.diagnosis}" if match.rule_id else ": no rule matched"),
                           {"rule_id": match.rule_id, "category": match.category, "late": True})
            done.append(incident_id)
            log.info("recorded_crash_diagnosed", incident_id=incident_id, category=match.category,
                     rule=match.rule_id, crashes=len(crashes))
        except Stopping:  # the operator's stop, met while a write waited: the daemon stops, as anywhere
            raise
        except Exception as error:  # noqa: BLE001 - a record of another shape, or rules that fail on it
            log.warning("recorded_crash_not_diagnosed", incident_id=incident_id,
                        error=f"{type(error).__name__}: {error}")
    return done


def handle_crash(loop: Loop, crashes: tuple[Crash, ...], exit_status: ExitStatus | None) -> Outcome:
    """Record, diagnose, remediate: the incident's outcome (the loop relaunches unless resolved).

    A crash of the signature of an incident still open (a crash loop: each restart fails the same
    way) is a recurrence of that incident, not a new one.
    """
    gcpause.pause()  # no collection before the durable row (observed() paused it for live text)
    try:
        phase = phase_of(loop)
        crashes = without_echoes(crashes) or (synthetic_crash(exit_status, loop.clock.time()),)
        # Recorded before anything else: the first complete traceback is an incident at once, and
        # before its diagnosis wherever the incident's signature does not wait for the rules (the
        # ranks printed one error: `sole_signature`), so that neither the rules' time nor a
        # failure of theirs delays or loses the record. The row is committed without waiting for
        # the disk (it survives a kill of the daemon); the diagnosis joins it, and both are made
        # durable (one fdatasync of the WAL: they survive a power cut) before anything leaves the
        # daemon: the status snapshot, a notification, the stop. docs/incidents.md "Durability".
        store = loop.store
        detected_at = min((c.detected_at for c in crashes if c.detected_at), default=None)
        source = "canary" if crashes[0].kind == "canary" else "crash"
        signature = sole_signature(crashes)
        try:
            diagnosis = loop.rules.diagnose(crashes, loop.context) if signature is None else None
        except Exception:  # the rules failed on ranks of different errors: the crash is recorded all
            # the same (under its first crash's signature, not diagnosed) for the next start, whose
            # recovery closes it, before the error ends the daemon
            store.open_incident(source, crashes, signature_of(crashes[0]), None, loop.context,
                                detected_at=detected_at, service=service_name(loop))
            raise
        signature = diagnosis.signature if diagnosis is not None else signature
        recurring = store.open_incident_for(signature.fingerprint,
                                            active_since=loop.clock.time() - loop.config.policy.restart_window_s)
        if recurring is None:
            incident_id = store.open_incident(
                source, crashes, signature, diagnosis.match if diagnosis is not None else None, loop.context,
                detected_at=detected_at, service=service_name(loop), durable=False)
        else:  # a crash loop of one cause: the same incident again, counted (on disk before the stop,
            incident_id = recurring  # as a new incident's row is: a crash a power cut hides is none)
            early = service_evidence(loop, crashes, exit_status, phase)
            recurrences = store.record_recurrence(incident_id, _recurrence_detail(early), early, durable=False)
        killpoint.reached("incident:committed")  # test hook: the row committed, not yet synced
        try:
            if diagnosis is None:  # the rules' call, now that the crash is recorded (a recurrence
                diagnosis = loop.rules.diagnose(crashes, loop.context)  # keeps its incident's diagnosis)
                if recurring is None:
                    store.set_diagnosis(incident_id, crashes, diagnosis.signature, diagnosis.match, durable=False)
        finally:  # durable even when the rules fail: the daemon's way out publishes and stops the service
            store.make_durable()
    finally:
        gcpause.resume()
    loop.lifecycle.enter("crashed", "service failed")  # published once the row exists: no writes before it
    loop.lifecycle.enter("diagnosing", "service failed: diagnosing")
    loop.publish(current_incident_id=incident_id)  # at detection, not after the stop
    for crash in crashes:  # a hung service's stacks and GPU state, captured before the stop
        found = evidence_of(crash)
        if found is not None:
            store.add_step(incident_id, "evidence", found[0], found[1])
    with incident_context(incident_id):
        # a crash: no drain (SGLang's own 5 s crash sleep is not waited for); a launcher that printed
        # its own error gets a moment to exit by itself, so its real exit code is kept. A service
        # that still answers (a failed canary, the eager fallback, an acceptance collapse) is
        # drained like any planned stop: its requests in flight are served, not killed.
        if still_serving(crashes):
            stopped = loop.stop_service("degraded: draining before the fix")
        else:
            stopped = loop.stop_service("crash", settle_s=LAUNCHER_SETTLE_S if printed_by_launcher(crashes) else 0.0)
        late = without_echoes(loop.service.drain(), already=crashes)  # SIGQUIT echoes are no 2nd death
        if late:  # other ranks finished their tracebacks while the tree went down
            crashes = crashes + late
            diagnosis = loop.rules.diagnose(crashes, loop.context)
            if recurring is None:
                store.set_diagnosis(incident_id, crashes, diagnosis.signature, diagnosis.match)
        said = service_evidence(loop, crashes, exit_status or stopped, phase)
        match = diagnosis.match
        if recurring is not None:
            if said != early:  # what the stop told (the exit code, the last lines) joins the step
                store.amend_recurrence(incident_id, _recurrence_detail(said), said)
            log.error("incident_recurred", recurrences=recurrences, category=match.category, rule=match.rule_id,
                      last_error=said.get("last_error"))
        else:
            log.error("incident_opened", category=match.category, rule=match.rule_id, diagnosis=match.diagnosis,
                      last_error=said.get("last_error"))
            store.add_step(incident_id, "diagnosed", match.diagnosis or "no rule matched",
                           {"rule_id": match.rule_id, "category": match.category,
                            "remediations": list(match.remediations), "evidence": said})
        loop.publish(current_incident_id=incident_id)
        if match.category == "silent-corruption":  # wrong output while serving: tell a person at once
            loop.notify_person("silent-corruption", incident_id)
        status = remediate(loop, incident_id, diagnosis.signature.fingerprint, list(match.remediations),
                           relaunch_heals=all(c.kind in RELAUNCH_HEALS for c in crashes),
                           holder=foreign_gpu_holder(match.category, match.params))
        loop.publish(current_incident_id=None)
    return Outcome(incident_id, status)


def sole_signature(crashes: tuple[Crash, ...]) -> Signature | None:
    """The signature every crash of the group has (ranks that printed the same error), else None.

    The diagnosis's signature is that of the crash the rules judge the cause; when every crash
    has this one, it is the incident's whatever the rules decide, and the crash can be recorded
    before they run. Crashes of different errors wait for the rules' choice."""
    distinct = {(c.kind, c.exception, c.message, c.frames): c for c in crashes}  # what a fingerprint reads
    first: Signature | None = None
    for crash in distinct.values():
        signature = signature_of(crash)
        if first is None:
            first = signature
        elif signature.fingerprint != first.fingerprint:
            return None
    return first


def still_serving(crashes: tuple[Crash, ...]) -> bool:
    """Every failure is of a service that still answers requests (`serving.still_answering`)."""
    return bool(crashes) and all(still_answering(c) for c in crashes)


def printed_by_launcher(crashes: tuple[Crash, ...]) -> bool:
    """An untagged traceback with no "X hit an exception" prefix: the launcher's own error (an
    import error, a bad flag), not a rank's or the detokenizer's — its process is ending."""
    return any(c.kind == "traceback" and c.rank is None and c.prefix is None for c in crashes)


def phase_of(loop: Loop) -> str:
    """Where the service was when it failed: serving, or how far its start had come."""
    state = loop.lifecycle.state
    if state == "running":
        return "serving"
    service = loop.service
    progress = service.progress_text() if service is not None else "starting"
    return progress if state == "starting" else f"{state}: {progress}"


def service_evidence(loop: Loop, crashes: tuple[Crash, ...], exit_status: ExitStatus | None,
                     phase: str) -> dict[str, Any]:
    """What the service itself said and how it ended (incidents.evidence), kept with the incident."""
    code = exit_status.code if exit_status is not None else None
    signal = exit_status.signal if exit_status is not None else None
    if code is None and signal is None:
        code = next((c.exit_code for c in crashes if c.exit_code is not None), None)
    output = getattr(loop.service, "output", None)
    if output is None:
        return evidence([], exit_code=code, signal=signal, phase=phase)
    return output.evidence(exit_code=code, signal=signal, phase=phase)


def _recurrence_detail(found: dict[str, Any]) -> str:
    ended = describe_exit(found) or "the same crash"
    return f"{ended} again" + (f": {found['last_error']}" if found.get("last_error") else "")


def give_up(loop: Loop, incident_id: int | None, reason: str) -> None:
    """The restart budget is spent: the last incident, if still open, is escalated with the reason."""
    if incident_id is None:
        return
    def record(store) -> None:  # one commit (Store.together): nothing is done to the host between them
        store.add_step(incident_id, "escalated", f"{reason}; ddtreed stopped restarting the service")
        if store.get(incident_id)["status"] in ("open", "advised"):
            store.finish(incident_id, "escalated", f"{reason}: needs a person")

    loop.store.together(record)


# A process that died without a Python error (killed, OOM-killed, a dead detokenizer) or a hung
# service: a plain relaunch is the remedy, proved like any fix by verification and its window.
RELAUNCH_HEALS = ("child-death", "killed", "serving")


def service_name(loop: Loop) -> str:
    """The incident's `service`: where it runs (the inventory host, else localhost) and its port."""
    return f"{loop.config.service.remote or 'localhost'}:{loop.context.port}"


def observed(loop: Loop, crashes: tuple[Crash, ...]) -> bool:
    """Crash text read while the service lives is a crash only once the service confirms it: it
    exits within OBSERVE_SETTLE_S, or then fails a health probe. The text alone never decides: the
    lines a dying service prints are the same lines its own code logs when a user's prompt quotes a
    crash report (a request logger writing the prompt as-is, its continuation lines unprefixed), or
    a web framework logs for a handled request error, whatever rule or rank prefix they name. A
    real crash ends the process (SGLang's tree goes down after its traceback) or stops it answering
    (a hang, a dead scheduler behind a live launcher). Unconfirmed, the text becomes an `observed`
    incident and nothing is stopped or restarted."""
    lost_member = getattr(loop.service, "lost_member", lambda: False)  # a process of its session gone
    gcpause.pause()  # until the incident's durable row (handle_crash), or this text is not a crash
    try:
        confirmed = _confirmed(loop, crashes, lost_member)
    except BaseException:
        gcpause.resume()
        raise
    if confirmed is None:
        return False  # a crash: handle_crash comes next and resumes the collector after its row
    gcpause.resume()
    record_observed(loop, crashes, confirmed)
    return True


def _confirmed(loop: Loop, crashes: tuple[Crash, ...], lost_member: Callable[[], bool]):
    """None once the service confirms the text (it exited, a member is gone, its health probe
    failed); else the text's diagnosis, for the `observed` incident."""
    if loop.service.poll() is not None or lost_member():
        return None
    # Diagnosed now, while the service (if it is dying) exits: the incident's own diagnosis of the
    # same crashes (handle_crash, after its row) is this one (RuleSet keeps its last). A diagnosis
    # that fails here does not stop the wait: handle_crash records the crash, then asks again.
    judged = without_echoes(crashes) or crashes
    try:
        loop.rules.diagnose(judged, loop.context)
    except Exception as error:  # noqa: BLE001 - the crash is recorded before its diagnosis is retried
        log.error("diagnosis_failed", error=repr(error), hint="the crash is recorded first; diagnosed again after")
    exited = lambda: loop.service.poll() is not None  # noqa: E731
    until_exit = getattr(loop.service, "sleep_until_exit", None)  # its pidfd: the exit ends the slice
    deadline, slices = loop.clock.monotonic() + OBSERVE_SETTLE_S, 0
    while not exited() and (left := deadline - loop.clock.monotonic()) > 0:
        loop.wait(min(left, OBSERVE_POLL_S), exited, sleep=until_exit)  # the exit is seen at once
        slices += 1
        if slices % OBSERVE_LIST_EVERY == 0 and lost_member():
            return None
    if exited() or lost_member() or not loop.prober().health(loop.clock.monotonic() + OBSERVE_HEALTH_S).ok:
        return None
    try:
        return loop.rules.diagnose(judged, loop.context)
    except Exception as error:  # noqa: BLE001 - the service is up and healthy: its text is recorded, it is left alone
        log.error("diagnosis_failed", error=repr(error), hint="a live, healthy service's crash text: recorded as "
                                                              "observed without a diagnosis; the service is left alone")
        return _undiagnosed(judged, error)


def _undiagnosed(crashes: tuple[Crash, ...], error: Exception) -> Diagnosis:
    """The diagnosis of text the rules failed on: category unknown, saying so, nothing to try."""
    signature = signature_of(crashes[0])
    match = RuleMatch(rule_id="", category="unknown", title="",
                      diagnosis=f"not diagnosed: the rules failed on it ({type(error).__name__}: {error})",
                      remediations=(), params=dict(signature.params))
    return Diagnosis(match=match, signature=signature, crash=crashes[0], crashes=crashes)


def record_observed(loop: Loop, crashes: tuple[Crash, ...], diagnosis) -> None:
    store = loop.store
    detail = "crash text, but the service stayed up and healthy (it did not exit, its health probe passed): " \
             "not a crash; recorded, not restarted"
    recent = store.find_recent(diagnosis.signature.fingerprint, since=loop.clock.time() - OBSERVED_MERGE_S)
    earlier = next((incident["id"] for incident in recent if incident["status"] == "observed"), None)
    if earlier is not None:
        store.add_step(earlier, "observed", detail, {"tracebacks": len(crashes)})
    else:
        match = replace(diagnosis.match, remediations=())  # nothing to try: it is not a crash
        read_as = f"the text reads as: {match.diagnosis}" if match.diagnosis else "no rule matched"

        def record(store) -> int:  # one commit (Store.together): the service is left alone
            opened = store.open_incident("crash", crashes, diagnosis.signature, match, loop.context,
                                         detected_at=min((c.detected_at for c in crashes if c.detected_at),
                                                         default=None),
                                         service=service_name(loop))
            store.add_step(opened, "diagnosed", read_as, {"rule_id": match.rule_id, "category": match.category})
            store.add_step(opened, "observed", detail, {"tracebacks": len(crashes)})
            store.finish(opened, "observed", detail)
            return opened

        earlier = store.together(record)
    log.warning("traceback_observed", kind=crashes[0].kind, exception=crashes[0].exception, incident_id=earlier,
                category=diagnosis.match.category,
                hint="crash text from a live, healthy service: not a crash, nothing stopped or restarted")


def remediate(loop: Loop, incident_id: int, fingerprint: str, remediations: list[str],
              relaunch_heals: bool = False, holder: int | None = None) -> str:
    """Decide under the policy and try the rule's remediations; the incident's final status.

    `holder`: the pid the diagnosis names as holding the GPU (not this service). While NVML still
    sees it on a GPU, a relaunch would only run out of memory again after its load, and shrinking
    SGLang would hide the cause: the loop waits, `blocked`, until it lets go, then relaunches."""
    store, policy = loop.store, loop.config.policy
    remediations = remediations[: policy.max_remediations_per_incident]
    if recurred_after_verified_fix(loop, incident_id, fingerprint):
        return escalate(loop, incident_id, fingerprint, "the same crash came back after its fix was verified",
                        event="recurrence")
    if policy.mode == "auto" and not remediations and holder is not None and loop.host.gpu_holders([holder]):
        wait_for_gpu(loop, incident_id, holder)
        return relaunch_and_verify(loop, incident_id)
    if policy.mode == "auto" and not remediations and relaunch_heals and not store.is_frozen(fingerprint):
        return relaunch_and_verify(loop, incident_id)
    if policy.mode == "off" or not remediations:
        return not_remediated(loop, incident_id, "policy off" if policy.mode == "off" else "no remediation known")
    if store.is_frozen(fingerprint):
        return not_remediated(loop, incident_id, "auto-remediation is frozen for this signature "
                                                 f"(ddtreed remediate unfreeze {fingerprint})")
    if policy.mode == "advise":
        for remediation_id in remediations:
            plan = loop.engine.plan(remediation_id, loop.context, env=loop.launch.env)
            store.add_step(incident_id, "advised", f"would apply {remediation_id}: {plan.reason}",
                           {"applicable": plan.applicable, "diff": plan.diff})
        return not_remediated(loop, incident_id, "policy advise: nothing applied", status="advised")
    for remediation_id in remediations:
        result = loop.attempt(remediation_id, incident_id, lambda: restart_and_verify(loop, incident_id))
        if result.outcome == "held":
            store.finish(incident_id, "resolved", f"{remediation_id} held: {result.detail}")
            remember_degraded(loop, result.application)
            loop.healthy(result.verdict)
            log.info("incident_resolved", remediation=remediation_id)
            return "resolved"
    return escalate(loop, incident_id, fingerprint, "no remediation left to try")


def foreign_gpu_holder(category: str | None, params: dict[str, Any]) -> int | None:
    """The pid an OOM diagnosis names as holding the GPU (rule `cuda-oom-gpu-held-by-another-process`)."""
    value = params.get("holder_pid") if category == "cuda-oom" else None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def wait_for_gpu(loop: Loop, incident_id: int, pid: int) -> None:
    """`blocked` until `pid` holds no GPU (NVML), re-checked every HOLDER_RECHECK_S and on SIGHUP;
    SIGTERM ends the wait like any other. One incident however long it takes."""
    started = loop.clock.time()
    loop.store.add_step(incident_id, "waiting", f"pid {pid} (not this service) holds the GPU: no relaunch until "
                                                f"it lets go (re-checked every {HOLDER_RECHECK_S:.0f} s and on SIGHUP)")
    loop.lifecycle.enter("blocked", f"GPU held by pid {pid} (not this service): waiting for it to let go")
    log.error("gpu_held_by_another_process", pid=pid, incident_id=incident_id,
              hint=f"stop pid {pid} if it is a leftover, or give this service another GPU")
    while loop.host.gpu_holders([pid]):
        seen = loop.reloads
        loop.wait(HOLDER_RECHECK_S, lambda seen=seen: loop.reloads != seen)
    waited = loop.clock.time() - started
    loop.store.add_step(incident_id, "cleared", f"pid {pid} holds no GPU any more (after {waited:.0f}s)")
    log.info("gpu_released", pid=pid, waited_s=round(waited, 1))


def relaunch_and_verify(loop: Loop, incident_id: int) -> str:
    """A death without a fix to apply: relaunch unchanged and verify it like a fix (window
    included). Healthy: the incident is resolved "restarted; healthy"; else it stays open and the
    loop relaunches under its budget."""
    loop.lifecycle.enter("remediating", f"incident {incident_id}: relaunching (no fix to apply)")
    verdict = restart_and_verify(loop, incident_id)
    if verdict.ok:
        loop.store.finish(incident_id, "resolved", "restarted; healthy")
        loop.healthy(verdict)
        log.info("incident_resolved", remediation=None, outcome="restarted; healthy")
        return "resolved"
    loop.lifecycle.enter("remediating", f"incident {incident_id}: the relaunch did not hold")
    loop.stop_service("the relaunch did not hold")
    return not_remediated(loop, incident_id, f"relaunched, not healthy: {verdict.detail}")


def escalate(loop: Loop, incident_id: int, fingerprint: str, reason: str, event: str = "escalated") -> str:
    """Nothing left to try: freeze the signature and tell a person (the loop relaunches)."""
    def record(store) -> None:  # one commit (Store.together): nothing is done to the host between them
        store.freeze(fingerprint, reason, incident_id)
        store.add_step(incident_id, "escalated", f"{reason}; auto-remediation frozen for {fingerprint}")
        store.finish(incident_id, "escalated", reason)

    loop.store.together(record)
    loop.lifecycle.enter("escalated", f"escalated: needs a person (incident {incident_id})")
    log.error("incident_escalated", reason=reason, hint=f"ddtreed incidents show {incident_id}")
    loop.notify_person(event, incident_id, {"reason": reason})  # "recurrence" when a verified fix failed
    return "escalated"


def not_remediated(loop: Loop, incident_id: int, reason: str, status: str = "open") -> str:
    def record(store) -> None:  # one commit (Store.together): the step and the status it leads to
        store.add_step(incident_id, "not-remediated", reason)
        store.finish(incident_id, status, reason)

    loop.store.together(record)
    return status


def recurred_after_verified_fix(loop: Loop, incident_id: int, fingerprint: str) -> bool:
    """The same signature after its fix was verified: undo that fix (the caller escalates)."""
    previous = loop.store.verified_fix_for(fingerprint)
    if previous is None:
        return False
    loop.store.add_step(incident_id, "recurred", f"the verified fix {previous['remediation_id']} "
                                                 f"(incident {previous['incident_id']}) did not stick")
    application = next((a for a in loop.engine.status() if a.application_id == previous["application_id"]), None)
    if application is not None:
        loop.revert(application, incident_id)
    else:  # undone outside ddtreed (a reinstall, `remediate revert`): record it, or it recurs forever
        loop.store.mark_application(previous["application_id"], "reverted")
    return True


def remember_degraded(loop: Loop, application: Application) -> None:
    """A flag step of a degradation ladder is remembered, so `status` shows it and promote can undo it."""
    if application.kind == "patch":
        return
    loop.store.set_degraded(loop.config.source, 1, application.remediation_id)
    loop.publish(degraded={"remediations": [application.remediation_id], "since": loop.clock.time()})


def restart_and_verify(loop: Loop, incident_id: int) -> Verdict:
    """Restart with the launch as it is now (a fix just applied), then verify, window included."""
    loop.lifecycle.enter("restarting", f"incident {incident_id}: restarting")
    loop.store.add_step(incident_id, "restarting", " ".join(loop.launch.argv))
    if not loop.start_service(backoff=False):
        return Verdict(ok=False, detail="restart budget spent")
    loop.store.add_step(incident_id, "restarted", f"pid {loop.service.pid}", {"argv": loop.launch.argv})
    loop.lifecycle.enter("verifying", f"incident {incident_id}: verifying")

    def healthy_now(verdict: Verdict) -> None:  # at the moment the probes passed, not after the window
        loop.store.add_step(incident_id, "healthy", verdict.detail,
                            {"accept_length": verdict.accept_length, "stage": verdict.stage})

    verdict = loop.verify_start(window=True, on_healthy=healthy_now)
    if not verdict.ok:
        loop.store.add_step(incident_id, "failed", verdict.detail,
                            {"accept_length": verdict.accept_length, "stage": verdict.stage})
    return verdict


def check_canary(loop: Loop, verdict: Verdict) -> Verdict:
    """After every (re)start: greedy outputs against the goldens, acceptance against baseline."""
    context = loop.refresh_context()  # a ladder step changed the algorithm or budget
    result = loop.wiring.canary.check(loop.prober(), context)
    loop.wiring.periodic_canary.reset()
    loop.show_canary(result)
    return canary_verdict(result, verdict)


def synthetic_crash(exit_status: ExitStatus | None, now: float) -> Crash:
    """A service that ended without any traceback still becomes an incident."""
    detail = exit_status.describe() if exit_status else "stopped responding"
    return Crash(kind="killed", exception=None, message=f"service {detail} without a traceback",
                 exit_code=exit_status.code if exit_status else None, detected_at=now)


def probe_crash(verdict: Verdict, now: float) -> Crash:
    """A failed probe without any traceback, worded by its stage (rules may name `probe-failed`).
    A service that exited under its health, generate or canary requests (cut short then) is
    that exit, as the watch would have recorded it: the probe's failure is no incident of its own."""
    if verdict.exit_status is not None and verdict.stage in ("health", "generate", "canary"):
        return synthetic_crash(verdict.exit_status, now)
    return Crash(kind="probe-failed", exception=None, message=verdict.detail, detected_at=now)


def canary_verdict(result, verdict: Verdict) -> Verdict:
    """A canary result as the verdict of the start it checked."""
    if result.passed:
        return verdict
    if result.category is None:  # the requests themselves failed: a probe failure
        said = "canary could not run: "
        return Verdict(False, result.detail if result.detail.startswith(said) else said + result.detail, stage="canary",
                       accept_length=verdict.accept_length)
    from ..health.canary import canary_crash  # the canary package: only a daemon with [canary] on

    return Verdict(False, f"canary failed ({result.category}): {result.detail}", (canary_crash(result),),
                   accept_length=result.accept_length, stage="canary")
