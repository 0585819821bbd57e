"""Preflight before every launch: predicted crashes are prevented, advised or block the launch.

The checks themselves live in `ddtreed.preflight`; this module decides what the daemon does with
their findings under the policy, and records each as an incident with the same timeline as a
crash (detected → diagnosed → applied → prevented, then verified once the service is healthy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from .preflight import Finding, run_preflight
from .preflight.finding import CHECK_ERROR, WOULD_CRASH
from .records import RuleMatch, Signature

if TYPE_CHECKING:
    from .daemon import Daemon

log = structlog.get_logger(__name__)

BLOCKED_RECHECK_S = 30.0  # a blocked launch is re-checked this often (and on SIGHUP)


class PreflightGate:
    def __init__(self, daemon: "Daemon"):
        self.daemon = daemon

    def run(self) -> None:
        """Check, then prevent/advise; while a blocking finding stands, wait and re-check."""
        daemon = self.daemon
        while True:
            daemon._set_state("preflight", "preflight checks")
            findings = run_preflight(daemon.config, daemon.context, daemon.host, daemon.rules, daemon.engine)
            blocking = [finding for finding in findings if self._handle(finding)]
            if not blocking:
                return
            reasons = "; ".join(finding.what for finding in blocking)
            daemon._set_state("blocked", f"launch blocked by preflight: {reasons}")
            log.error("launch_blocked", findings=[f.check for f in blocking],
                      hint="fix the cause and send SIGHUP, or drop the check from [preflight] block_on")
            reloads = daemon.reloads
            daemon._sleep_until(lambda: daemon.reloads != reloads, BLOCKED_RECHECK_S)

    def confirm(self, verdict) -> None:
        """The first healthy start after a prevention proves it: add the `verified` step."""
        store = self.daemon.store
        for incident_id in self.daemon.prevented_pending:
            store.add_step(incident_id, "verified", f"service healthy: {verdict.detail}",
                           {"accept_length": verdict.accept_length})
            for application in store.get(incident_id).get("applications", []):
                store.mark_application(application["application_id"], "verified")
        self.daemon.prevented_pending.clear()

    def _handle(self, finding: Finding) -> bool:
        """Record and act on one finding; True when it still blocks the launch."""
        if finding.kind == CHECK_ERROR or finding.severity != WOULD_CRASH:
            log.warning("preflight_warning", check=finding.check, what=finding.what, why=finding.why)
            return False
        daemon = self.daemon
        store = daemon.store
        if store.is_frozen(finding.signature):
            log.warning("preflight_frozen", check=finding.check, what=finding.what)
            return finding.blocking
        incident_id = store.open_incident("preflight", (), _signature(finding), _match(finding),
                                          daemon.context, message=f"{finding.what}: {finding.why}")
        store.add_step(incident_id, "diagnosed", finding.why,
                       {"check": finding.check, "remediations": list(finding.remediations)})
        mode = daemon.config.policy.mode
        if mode == "auto" and self._prevent(incident_id, finding):
            return False
        if mode != "auto":
            for remediation_id in finding.remediations:
                plan = daemon.engine.plan(remediation_id, daemon.context, env=daemon.env)
                store.add_step(incident_id, "advised", f"would apply {remediation_id}: {plan.reason}",
                               {"diff": plan.diff})
            store.finish(incident_id, "advised", f"policy {mode}: launching unchanged")
        elif finding.remediations:
            store.finish(incident_id, "open", "no preventing remediation applied")
        else:
            store.finish(incident_id, "advised", finding.advice or "no automatic prevention known")
        return finding.blocking

    def _prevent(self, incident_id: int, finding: Finding) -> bool:
        daemon = self.daemon
        for remediation_id in finding.remediations:
            plan = daemon.engine.plan(remediation_id, daemon.context, env=daemon.env)
            if not plan.applicable:
                daemon.store.add_step(incident_id, "skipped", f"{remediation_id}: {plan.reason}")
                continue
            daemon._set_state("remediating", f"preflight: applying {remediation_id}")
            application = daemon.engine.apply(plan, incident_id=incident_id)
            daemon.store.record_application(incident_id, application)
            daemon.store.set_remediation(incident_id, remediation_id, application.application_id)
            daemon.store.add_step(incident_id, "applied", application.summary,
                                  {"application_id": application.application_id, "diff": plan.diff})
            daemon._adopt(application)
            daemon.store.finish(incident_id, "prevented", f"{remediation_id} applied before launch")
            daemon.prevented_pending.append(incident_id)
            log.info("preflight_prevented", check=finding.check, remediation=remediation_id,
                     incident_id=incident_id)
            return True
        return False


def _signature(finding: Finding) -> Signature:
    return Signature(fingerprint=finding.signature, exception=None, normalized_message=finding.what,
                     frames=(), params=dict(finding.params), hints=("preflight finding",))


def _match(finding: Finding) -> RuleMatch:
    return RuleMatch(rule_id=finding.rule_id or finding.signature, category=finding.category,
                     title=finding.what, diagnosis=finding.why, remediations=finding.remediations,
                     params=dict(finding.params), advice=finding.advice, precise=True)
