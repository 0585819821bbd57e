"""The one way ddtreed tries a fix: plan → apply → record → adopt → verify → keep or revert.

`attempt()` is used by the crash path (one rung of a rule's ladder at a time), preflight (verify
later, at the first healthy start) and promotion (putting a degradation back). A refused write
(`ApplyError`, or an OSError such as a full disk) is recorded as `apply-failed` and the caller
moves on to the next remediation: it never ends the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol, TypeVar

import structlog

from ..records import Application, LaunchChange, ServiceContext, Verdict
from .engine import ApplyError, Engine

log = structlog.get_logger(__name__)

Outcome = Literal["held", "failed", "applied", "skipped", "apply-failed"]
T = TypeVar("T")


class IncidentLog(Protocol):
    """The part of the incident store an attempt writes to."""

    def add_step(self, incident_id: int, step: str, detail: str = "", data=None) -> None: ...

    def set_remediation(self, incident_id: int, remediation_id: str | None,
                        application_id: str | None = None) -> None: ...

    def mark_application(self, application_id: str, status: str) -> None: ...

    def together(self, write: Callable[[Any], T]) -> T: ...  # one transaction (Store.together)


@dataclass
class Launch:
    """The argv and env the service is (re)started with; args/env remediations move it."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def adopt(self, change: LaunchChange | None) -> None:
        if change is not None:
            self.argv, self.env = list(change.argv), dict(change.env)


@dataclass(frozen=True)
class Attempt:
    """How one remediation went: held (verified), failed (reverted), applied (not verified yet),
    skipped (not applicable here) or apply-failed (the write was refused)."""

    remediation_id: str
    outcome: Outcome
    detail: str
    application: Application | None = None
    verdict: Verdict | None = None
    diff: str = ""


def attempt(remediation_id: str, incident_id: int | None, *, engine: Engine, store: IncidentLog,
            launch: Launch, context: ServiceContext, verify: Callable[[], Verdict] | None = None,
            on_apply: Callable[[str], None] | None = None,
            before_revert: Callable[[], None] | None = None) -> Attempt:
    """Try one remediation. `verify` restarts and verifies the service (None: keep it unverified).

    `context` is the service as it runs now; `launch` is updated in place (adopt, then back on a
    revert). Steps go into incident `incident_id` when there is one.
    """
    def step(name: str, detail: str, data=None) -> None:
        if incident_id is not None:
            store.add_step(incident_id, name, detail, data)

    plan = engine.plan(remediation_id, context, env=launch.env)
    if not plan.applicable:
        step("skipped", f"{remediation_id}: {plan.reason}")
        return Attempt(remediation_id, "skipped", plan.reason)
    if on_apply is not None:
        on_apply(remediation_id)
    try:
        application = engine.apply(plan, incident_id=incident_id)  # written to the incident store
    except (ApplyError, OSError) as error:  # refused at write time, or no room for the backup
        step("apply-failed", f"{remediation_id}: {error}")
        log.error("remediation_apply_failed", remediation=remediation_id, error=str(error))
        return Attempt(remediation_id, "apply-failed", str(error))
    if incident_id is not None:
        def applied(incidents: IncidentLog) -> None:  # one commit: the change itself is in the engine's journal
            incidents.set_remediation(incident_id, remediation_id, application.application_id)
            incidents.add_step(incident_id, "applied", application.summary,
                               {"application_id": application.application_id, "diff": plan.diff,
                                "files": [vars(change) for change in application.files]})

        store.together(applied)
    launch.adopt(application.launch)
    if verify is None:
        return Attempt(remediation_id, "applied", plan.reason, application, diff=plan.diff)
    verdict = verify()
    if verdict.ok:
        def verified(incidents: IncidentLog) -> None:  # one commit: nothing is done to the host between them
            incidents.mark_application(application.application_id, "verified")
            if incident_id is not None:
                incidents.add_step(incident_id, "verified", verdict.detail, {"accept_length": verdict.accept_length})

        store.together(verified)
        return Attempt(remediation_id, "held", verdict.detail, application, verdict, plan.diff)
    if before_revert is not None:
        before_revert()
    if revert(application, engine=engine, store=store, launch=launch, incident_id=incident_id):
        step("reverted", f"{remediation_id} did not hold: {verdict.detail}")
    log.warning("remediation_reverted", remediation=remediation_id, detail=verdict.detail)
    return Attempt(remediation_id, "failed", verdict.detail, application, verdict, plan.diff)


def revert(application: Application, *, engine: Engine, store: IncidentLog, launch: Launch,
           incident_id: int | None = None) -> bool:
    """Undo an application and move the launch back; False (recorded) when the revert is refused."""
    try:
        previous = engine.revert(application.application_id)
    except (ApplyError, OSError) as error:  # e.g. the file changed under the patch (a reinstall)
        log.error("remediation_revert_failed", application_id=application.application_id, error=str(error))
        if incident_id is not None:
            store.add_step(incident_id, "revert-failed", f"{application.remediation_id}: {error}")
        return False
    launch.adopt(previous)
    return True
