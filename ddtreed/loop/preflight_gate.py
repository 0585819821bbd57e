"""Preflight before every launch: what the daemon does with the findings under the policy.

A stage with inputs and a typed result: `decide(findings, ...)` records each finding that would
crash as an incident (detected → diagnosed → applied, status `prevented`), tries its remediations
through the one `attempt()` (unverified: the first healthy start verifies them, `confirm`), and
returns a `GateResult` saying which findings still block the launch. The checks themselves live
in `ddtreed.preflight` (context + installation → findings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Mapping

import structlog

from ..preflight import Finding, run_preflight
from ..preflight.finding import CHECK_ERROR, WOULD_CRASH
from ..records import RuleMatch, Signature, Verdict
from ..remediation import Attempt, Plan

log = structlog.get_logger(__name__)

BLOCKED_RECHECK_S = 30.0  # a blocked launch is re-checked this often (and on SIGHUP)

Action = Literal["warned", "frozen", "prevented", "advised", "open", "still-blocked"]


@dataclass(frozen=True)
class Decision:
    finding: Finding
    action: Action
    blocking: bool
    incident_id: int | None = None


@dataclass(frozen=True)
class GateResult:
    decisions: tuple[Decision, ...]

    @property
    def blocking(self) -> list[Finding]:
        return [decision.finding for decision in self.decisions if decision.blocking]

    @property
    def prevented(self) -> list[int]:
        """Incidents whose fix was applied before launch; the first healthy start verifies them."""
        return [d.incident_id for d in self.decisions if d.action == "prevented" and d.incident_id is not None]


def run_gate(loop) -> list[int]:
    """Preflight until nothing blocks the launch; the incidents prevented (verified at the first
    healthy start). `loop` is the daemon's public API: lifecycle, config, context, host, rules,
    engine, store, launch, wiring, attempt(), wait(), reloads."""
    prevented: list[int] = []
    blocked: dict[str, int] = {}  # signature -> incident of a finding that blocked the last round
    since = loop.clock.time()
    while True:
        loop.lifecycle.enter("preflight", "preflight checks")
        findings = run_preflight(loop.config, loop.context, loop.host, loop.rules, loop.engine,
                                 checks=loop.wiring.preflight_checks)
        result = decide(findings, mode=loop.config.policy.mode, store=loop.store, context=loop.context,
                        try_fix=lambda incident_id, remediation_id: loop.attempt(remediation_id, incident_id),
                        plan=lambda remediation_id: loop.engine.plan(remediation_id, loop.context,
                                                                     env=loop.launch.env),
                        blocked_before=blocked)
        prevented += result.prevented
        still = {d.finding.signature: d.incident_id for d in result.decisions
                 if d.blocking and d.incident_id is not None}
        for signature, incident_id in blocked.items():
            if signature not in still:  # the cause went away (the port was freed): say so once
                waited = loop.clock.time() - since
                loop.store.add_step(incident_id, "cleared", f"no longer found after {waited:.0f}s blocked")
                log.info("preflight_cleared", incident_id=incident_id, blocked_s=round(waited, 1))
        blocked = still
        if not result.blocking:
            return prevented
        reasons = "; ".join(finding.what for finding in result.blocking)
        loop.lifecycle.enter("blocked", f"launch blocked by preflight: {reasons}")
        log.error("launch_blocked", findings=[f.check for f in result.blocking],
                  hint="fix the cause and send SIGHUP, or drop the check from [preflight] block_on")
        reloads = loop.reloads
        loop.wait(BLOCKED_RECHECK_S, lambda seen=reloads: loop.reloads != seen)  # until the next SIGHUP


def decide(findings: list[Finding], *, mode: str, store, context,
           try_fix: Callable[[int, str], Attempt], plan: Callable[[str], Plan],
           blocked_before: Mapping[str, int] | None = None) -> GateResult:
    """Record and act on each finding; `try_fix(incident_id, remediation_id)` applies one (unverified).

    `blocked_before`: signature -> incident of the findings that blocked the previous round of a
    blocked launch; the same finding again is that incident still blocking, not a new incident
    (a launch blocked for hours is one incident, not one per re-check)."""
    known = blocked_before or {}
    return GateResult(tuple(
        Decision(finding, "still-blocked", True, known[finding.signature])
        if finding.blocking and finding.signature in known
        else _decide(finding, mode, store, context, try_fix, plan) for finding in findings))


def confirm(store, incident_ids: list[int], verdict: Verdict) -> None:
    """The first healthy start after a prevention proves it: add the `verified` step."""
    for incident_id in incident_ids:
        store.add_step(incident_id, "verified", f"service healthy: {verdict.detail}",
                       {"accept_length": verdict.accept_length})
        for application in store.get(incident_id).get("applications", []):
            store.mark_application(application["application_id"], "verified")


def _decide(finding: Finding, mode: str, store, context, try_fix, plan) -> Decision:
    if finding.kind == CHECK_ERROR or finding.severity != WOULD_CRASH:
        log.warning("preflight_warning", check=finding.check, what=finding.what, why=finding.why)
        return Decision(finding, "warned", False)
    if store.is_frozen(finding.signature):
        log.warning("preflight_frozen", check=finding.check, what=finding.what)
        return Decision(finding, "frozen", finding.blocking)
    incident_id = store.open_incident("preflight", (), _signature(finding), _match(finding), context,
                                      message=f"{finding.what}: {finding.why}")
    store.add_step(incident_id, "diagnosed", finding.why,
                   {"check": finding.check, "remediations": list(finding.remediations)})
    if mode == "auto":
        for remediation_id in finding.remediations:
            if try_fix(incident_id, remediation_id).outcome == "applied":
                store.finish(incident_id, "prevented", f"{remediation_id} applied before launch")
                log.info("preflight_prevented", check=finding.check, remediation=remediation_id,
                         incident_id=incident_id)
                return Decision(finding, "prevented", False, incident_id)
        if finding.remediations:
            store.finish(incident_id, "open", "no preventing remediation applied")
            return Decision(finding, "open", finding.blocking, incident_id)
        store.finish(incident_id, "advised", finding.advice or "no automatic prevention known")
        return Decision(finding, "advised", finding.blocking, incident_id)
    for remediation_id in finding.remediations:
        planned = plan(remediation_id)
        store.add_step(incident_id, "advised", f"would apply {remediation_id}: {planned.reason}",
                       {"diff": planned.diff})
    store.finish(incident_id, "advised", f"policy {mode}: launching unchanged")
    return Decision(finding, "advised", finding.blocking, incident_id)


def _signature(finding: Finding) -> Signature:
    return Signature(fingerprint=finding.signature, exception=None, normalized_message=finding.what,
                     frames=(), params=dict(finding.params), hints=("preflight finding",))


def _match(finding: Finding) -> RuleMatch:
    return RuleMatch(rule_id=finding.rule_id or finding.signature, category=finding.category,
                     title=finding.what, diagnosis=finding.why, remediations=finding.remediations,
                     params=dict(finding.params), advice=finding.advice, precise=True)
