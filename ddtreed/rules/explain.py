"""Presenting a diagnosis: the JSON incident contract and the human text for `--explain`."""

from __future__ import annotations

from typing import Any

from ..records import Explanation
from .ruleset import Diagnosis


def incident_dict(diagnosis: Diagnosis) -> dict[str, Any]:
    """The `diagnose --json` incident object (keys scripts rely on come first)."""
    match, crash = diagnosis.match, diagnosis.crash
    deciding = diagnosis.deciding
    return {
        "category": match.category,
        "rule_id": match.rule_id or None,
        "diagnosis": match.diagnosis,
        "params": dict(match.params),
        "remediations": list(match.remediations),
        "signature": diagnosis.signature.fingerprint,
        "exception": crash.exception,
        "message": first_line(crash.message),
        "ranks": diagnosis.ranks,
        "title": match.title,
        "precise": match.precise,
        "advice": match.advice,
        "references": list(match.references),
        "kind": crash.kind,
        "source": crash.source,
        "first_line": crash.first_line,
        "last_line": crash.last_line,
        "confidence": diagnosis.confidence,
        "phase": diagnosis.phase,
        "evidence": [dict(item.as_dict(), decides=item in deciding)
                     for item in (diagnosis.evidence.items if diagnosis.evidence else ())],
        "outvoted": [{"rule_id": o.rule_id, "category": o.category, "reason": o.reason}
                     for o in diagnosis.outvoted],
        "last_error_line": last_error_line(crash),
        "notes": list(diagnosis.notes),
        "decided_by": diagnosis.decided_by,
        "scorer": diagnosis.scored.as_dict() if diagnosis.scored is not None else None,
    }


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def last_error_line(crash) -> str:
    """The service's final error line: the exception line as printed, else the line itself."""
    message = first_line(crash.message)
    if crash.exception:
        return f"{crash.exception}: {message}"[:1000] if message else crash.exception
    return message[:1000]


def incident_text(number: int, diagnosis: Diagnosis, explain: bool = False) -> list[str]:
    """A short readable block for one incident; with `explain`, the signature and rule reasoning."""
    match, crash = diagnosis.match, diagnosis.crash
    where = f"lines {crash.first_line}-{crash.last_line}" if crash.first_line else "no line numbers"
    ranks = ", ".join(diagnosis.ranks) or "untagged"
    if diagnosis.scorer_decided:
        heading = f"incident {number}: {match.category} (evidence scorer, advisory)"
    else:
        heading = f"incident {number}: {match.category}" + (
            f" (rule {match.rule_id}{', precise' if match.precise else ''})" if match.rule_id else "")
    lines = [
        heading,
        f"  crash:      {crash.exception or crash.kind}: {first_line(crash.message)[:200]}",
        f"  ranks:      {ranks} ({len(diagnosis.crashes)} crash(es), {where})",
        f"  diagnosis:  {match.diagnosis}",
    ]
    if match.remediations:
        lines.append(f"  would try:  {' -> '.join(match.remediations)} (offline: nothing applied)")
    else:
        lines.append("  would try:  no automatic remediation; advice only")
    if match.advice:
        lines.append(f"  advice:     {match.advice}")
    for reference in match.references:
        lines.append(f"  reference:  {reference}")
    lines.append(f"  confidence: {diagnosis.confidence:.2f}"
                 + (f" (phase: {diagnosis.phase})" if diagnosis.phase else ""))
    for note in diagnosis.notes:
        lines.append(f"  note:       {note}")
    if explain:
        lines.extend(evidence_text(diagnosis))
        lines.extend(signature_text(diagnosis))
        lines.extend(explanations_text(diagnosis.explanations))
    return lines


def evidence_text(diagnosis: Diagnosis) -> list[str]:
    """Each piece of evidence, marked when it speaks for the decided category, then the rivals."""
    lines = ["  evidence:"]
    deciding = diagnosis.deciding
    items = diagnosis.evidence.items if diagnosis.evidence else ()
    for item in items:
        mark = "decides" if item in deciding else "       "
        lines.append(f"    {mark} {item.kind:<9} {item.family:<16} {item.detail[:140]}")
    if not items:
        lines.append("    (none beyond the rule's own match)")
    rule = diagnosis.match.rule_id or "no rule"
    scored = diagnosis.scored
    if diagnosis.scorer_decided and scored is not None:
        lines.append(f"  decided:    {diagnosis.match.category} by the evidence scorer (advisory: no automatic "
                     f"remediation), confidence {scored.confidence:.2f} >= threshold {scored.threshold:.2f}")
        lines.append(f"  scorer:     top features: {scored.evidence_line() or '(none)'}; runner-up {scored.runner_up}")
    else:
        lines.append(f"  decided:    {diagnosis.match.category} by {rule}, confidence {diagnosis.confidence:.2f}")
        if scored is not None:
            why = ("agrees with the rules" if scored.category == diagnosis.match.category
                   else "it never turns a rule's reading into other: not used" if scored.decides
                   else f"below its threshold {scored.threshold:.2f}: not used")
            lines.append(f"  scorer:     {scored.category} at {scored.confidence:.2f}, {why}")
    for rival in diagnosis.outvoted:
        lines.append(f"  outvoted:   {rival.category} by {rival.rule_id} ({rival.reason})")
    return lines


def signature_text(diagnosis: Diagnosis) -> list[str]:
    signature = diagnosis.signature
    lines = [
        "  signature:",
        f"    fingerprint: {signature.fingerprint}",
        f"    exception:   {signature.exception}",
        f"    message:     {first_line(signature.normalized_message)[:200]}",
        f"    frames:      {', '.join(signature.frames[-4:]) or '(none)'}",
        f"    params:      {dict(signature.params)}",
    ]
    lines.extend(f"    step: {hint}" for hint in signature.hints)
    return lines


def explanations_text(explanations: list[Explanation]) -> list[str]:
    """Candidates with their reasons; rules that were never candidates summarised in one line."""
    lines = ["  rules:"]
    skipped = []
    for explanation in explanations:
        if not explanation.matched and explanation.reasons and explanation.reasons[0].startswith("not a candidate"):
            skipped.append(explanation.rule_id)
            continue
        mark = "MATCH" if explanation.matched else "no   "
        lines.append(f"    {mark} {explanation.rule_id}")
        lines.extend(f"          - {reason}" for reason in explanation.reasons)
    if skipped:
        lines.append(f"    ({len(skipped)} rule(s) not candidates: their exception types differ: "
                     f"{', '.join(skipped)})")
    return lines
