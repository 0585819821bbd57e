"""How incidents read: JSON with ISO-8601 UTC times, the list table, the full story."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .encode import iso

TABLE_HEADERS = ["ID", "STARTED (UTC)", "CATEGORY", "RULE", "STATUS", "REMEDIATION", "DURATION"]
FRAMES_SHOWN = 8  # the innermost frames say where it broke; the full list is in --json


def as_json(value: Any) -> Any:
    """A store dict with every `at` / `*_at` epoch as ISO-8601 UTC text (nested steps included)."""
    if isinstance(value, Mapping):
        return {key: iso(item) if _is_time(key, item) else as_json(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [as_json(item) for item in value]
    return value


def _is_time(key: str, value: Any) -> bool:
    return (key == "at" or key.endswith("_at")) and isinstance(value, (int, float))


def when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return iso(epoch).replace("T", " ")[:19] + "Z"


def seconds(value: float | None) -> str:
    """`0.42s`, `12.3s`, `4m05s`, `2h03m`: short enough for a table column."""
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.2f}s"
    if value < 60:
        return f"{value:.1f}s"
    if value < 3600:
        return f"{int(value // 60)}m{int(value % 60):02d}s"
    return f"{int(value // 3600)}h{int(value % 3600 // 60):02d}m"


def table_rows(incidents: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    return [[str(row["id"]), when(row["started_at"]), row["category"], row["rule_id"] or "-",
             row["status"], row["remediation_id"] or "-", seconds(row["duration_s"])]
            for row in incidents]


def render_incident(incident: Mapping[str, Any]) -> str:
    """The whole story of one incident as plain text (what `ddtreed incidents show` prints)."""
    lines = _header(incident)
    lines += _diagnosis(incident)
    lines += _tracebacks(incident.get("tracebacks") or [])
    lines += _steps(incident)
    lines += _applications(incident.get("applications") or [])
    lines += _durations(incident.get("durations") or {})
    return "\n".join(lines)


def _header(incident: Mapping[str, Any]) -> list[str]:
    rule = f"rule {incident['rule_id']}" if incident.get("rule_id") else "no rule matched"
    lines = [f"incident {incident['id']}: {incident['status']}  {incident['category']}  ({rule})",
             f"  source:    {incident['source']}" + (f" on {incident['service']}"
                                                     if incident.get("service") else ""),
             f"  started:   {when(incident['started_at'])}",
             f"  resolved:  {when(incident.get('resolved_at'))}"]
    if incident.get("outcome"):
        lines.append(f"  outcome:   {incident['outcome']}")
    if incident.get("fingerprint"):
        frozen = "  (auto-remediation frozen)" if incident.get("frozen") else ""
        lines.append(f"  signature: {incident['fingerprint']}{frozen}")
    if incident.get("exception") or incident.get("message"):
        error = ": ".join(part for part in (incident.get("exception"), incident.get("message")) if part)
        lines.append(f"  error:     {error}")
    return lines


def _diagnosis(incident: Mapping[str, Any]) -> list[str]:
    lines = []
    if incident.get("title"):
        lines += ["", f"{incident['title']}"]
    if incident.get("diagnosis"):
        lines += ["", "diagnosis:"] + [f"  {line}" for line in incident["diagnosis"].splitlines()]
    if incident.get("advice"):
        lines += ["", "advice:"] + [f"  {line}" for line in incident["advice"].splitlines()]
    params = incident.get("params") or {}
    if params:
        lines += ["", "params: " + ", ".join(f"{key}={value}" for key, value in sorted(params.items()))]
    if incident.get("remediations"):
        lines.append("remediations to try: " + ", ".join(incident["remediations"]))
    return lines


def _tracebacks(crashes: list[Mapping[str, Any]]) -> list[str]:
    """One block per distinct error; ranks that failed the same way share a block."""
    if not crashes:
        return []
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for crash in crashes:
        groups.setdefault((crash.get("exception"), crash.get("message")), []).append(crash)
    lines = ["", f"tracebacks ({len(crashes)} crash{'es' if len(crashes) != 1 else ''}):"]
    for (exception, message), members in groups.items():
        ranks = ", ".join(c.get("rank") or "untagged" for c in members)
        first = members[0]
        error = f"{exception}: {message}" if exception else message
        lines.append(f"  [{ranks}] {first.get('kind')}: {error}")
        lines += _crash_notes(first)
        frames = first.get("frames") or []
        if len(frames) > FRAMES_SHOWN:
            lines.append(f"    ... {len(frames) - FRAMES_SHOWN} outer frames")
        for frame in frames[-FRAMES_SHOWN:]:
            lines.append(f"    {frame['file']}:{frame.get('line') or '?'} in {frame['function']}")
        if first.get("source"):
            lines.append(f"    (log {first['source']} lines {first.get('first_line')}-"
                         f"{first.get('last_line')})")
    return lines


def _crash_notes(crash: Mapping[str, Any]) -> list[str]:
    """What the one-line summary leaves out: the wrapped error, the exit code, the causes."""
    notes = []
    if crash.get("inner_exception"):
        notes.append(f"    wraps {crash['inner_exception']}: {crash.get('inner_message') or ''}".rstrip())
    if crash.get("exit_code") is not None:
        notes.append(f"    exit code {crash['exit_code']}")
    for cause in crash.get("chained") or []:
        notes.append(f"    after: {cause.get('exception') or ''}: {cause.get('message') or ''}")
    return notes


def _steps(incident: Mapping[str, Any]) -> list[str]:
    steps = incident.get("steps") or []
    if not steps:
        return []
    lines = ["", "steps:"]
    for step in steps:
        detail = (step.get("detail") or "").splitlines()
        offset = f"+{step['since_detection_s']:.3f}s"
        lines.append(f"  {offset:>11}  {when(step['at'])}  "
                     f"{step['step']:<11} {detail[0] if detail else ''}".rstrip())
    return lines


def _applications(applications: list[Mapping[str, Any]]) -> list[str]:
    lines = []
    for application in applications:
        lines += ["", f"remediation {application['remediation_id']} ({application['kind']}), "
                      f"application {application['application_id']}: {application['status']}",
                  f"  {application.get('summary') or ''}".rstrip()]
        for change in application.get("files") or []:
            lines.append(f"  {change['path']}: {_short(change.get('before_sha256'))} -> "
                         f"{_short(change.get('after_sha256'))}")
        launch = application.get("launch")
        if launch:
            lines.append(f"  launch: {launch.get('description') or ' '.join(launch.get('argv') or [])}")
    return lines


def _durations(durations: Mapping[str, Any]) -> list[str]:
    labels = (("detect_to_diagnose_s", "detected->diagnosed"), ("diagnose_to_apply_s", "diagnosed->applied"),
              ("restart_to_healthy_s", "restart->healthy"), ("total_s", "total"))
    shown = [f"{label} {seconds(durations[key])}" for key, label in labels
             if durations.get(key) is not None]
    return ["", "durations: " + ", ".join(shown)] if shown else []


def _short(digest: str | None) -> str:
    return "(none)" if digest is None else digest[:12]
