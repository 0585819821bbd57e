"""Preflight: predict known crash classes from the launch context and the installed SGLang.

Each check is a small function in `checks.CHECKS`; `run_preflight` runs them all, turns an
exception inside a check into a `check-error` finding (never blocking), and marks findings
that `[preflight] block_on` names as blocking.
"""

from __future__ import annotations

import time
from dataclasses import replace

import structlog

from .checks import CHECKS, Inputs
from .finding import CHECK_ERROR, SEVERITIES, SKIPPED, WARNING, WOULD_CRASH, Finding, Skipped

__all__ = ["CHECKS", "CHECK_ERROR", "Finding", "Inputs", "SEVERITIES", "SKIPPED", "Skipped", "WARNING",
           "WOULD_CRASH", "blocking", "incomplete", "run_preflight", "would_crash"]

log = structlog.get_logger(__name__)


def run_preflight(config, context, host, rules=None, engine=None, *, checks=None,
                  draft_config_reader=None, force: bool = False) -> list[Finding]:
    """Findings for this launch, in check order. `[]` when `[preflight] enabled = false` unless forced.

    `rules` (a RuleSet) links each finding to the crash rule it pre-empts; `engine` (a remediation
    Engine) keeps only remediations whose plan applies to this installation.
    """
    if not (force or config.preflight.enabled):
        return []
    inputs = Inputs(config=config, context=context, host=host,
                    draft_config_reader=draft_config_reader)
    findings: list[Finding] = []
    started = time.monotonic()
    for check_id, check in (checks or CHECKS).items():
        findings.extend(_run_one(check_id, check, inputs))
    findings = [_finish(finding, config, context, rules, engine) for finding in findings]
    log.info("preflight_done", findings=len(findings),
             would_crash=sum(f.severity == WOULD_CRASH for f in findings),
             elapsed_ms=round((time.monotonic() - started) * 1000, 1))
    return findings


def _run_one(check_id: str, check, inputs: Inputs) -> list[Finding]:
    try:
        return list(check(inputs))
    except Skipped as skipped:
        return [Finding(check=check_id, kind=SKIPPED, severity=WARNING, category="other",
                        what=f"the preflight check {check_id} was skipped", why=str(skipped))]
    except Exception as error:  # noqa: BLE001 - a broken check must never stop a launch
        log.warning("preflight_check_error", check=check_id, error=repr(error))
        return [Finding(
            check=check_id, kind=CHECK_ERROR, severity=WARNING, category="other",
            what=f"the preflight check {check_id} could not run",
            why=f"{type(error).__name__}: {error}",
            advice="the launch goes on; report this with the config that caused it",
        )]


def _finish(finding: Finding, config, context, rules, engine) -> Finding:
    if finding.kind == SKIPPED:
        return finding
    remediations, notes = _applicable(finding.remediations, context, engine)
    rule_id = _rule_for(finding, rules)
    block_on = set(config.preflight.block_on)
    blocks = finding.kind not in (CHECK_ERROR, SKIPPED) and finding.severity == WOULD_CRASH and (
        finding.check in block_on or WOULD_CRASH in block_on or "all" in block_on)
    return replace(finding, remediations=remediations, remediation_notes=notes,
                   rule_id=rule_id or finding.rule_id, blocking=blocks)


def _applicable(ids: tuple[str, ...], context, engine) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Keep the remediations the engine can plan here; say why the others were dropped."""
    if engine is None or not ids:
        return ids, ()
    kept, notes = [], []
    for remediation_id in ids:
        try:
            plan = engine.plan(remediation_id, context)
        except Exception as error:  # noqa: BLE001 - an unplannable fix is a note, not a crash
            notes.append(f"{remediation_id}: cannot plan: {error}")
            continue
        if getattr(plan, "applicable", False):
            kept.append(remediation_id)
        else:
            notes.append(f"{remediation_id}: not applicable: {getattr(plan, 'reason', '')}")
    return tuple(kept), tuple(notes)


def _rule_for(finding: Finding, rules) -> str | None:
    """The crash rule with this category that would pick the same remediation after a crash."""
    for rule in getattr(rules, "rules", None) or ():
        if rule.category == finding.category and set(rule.remediations) & set(finding.remediations):
            return rule.id
    return None


def would_crash(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == WOULD_CRASH and f.kind not in (CHECK_ERROR, SKIPPED)]


def incomplete(findings: list[Finding]) -> list[Finding]:
    """The checks that did not run to a verdict (skipped, or broken)."""
    return [f for f in findings if f.kind in (CHECK_ERROR, SKIPPED)]


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.blocking]
