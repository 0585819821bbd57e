"""An incident as one self-contained HTML page: its timeline drawn, its story beside it.

No network at view time: inline CSS and SVG, no script, and a Content-Security-Policy that
forbids loading anything. Lanes: the service (serving, crashed, restarting), ddtreed's decisions
(detected, diagnosed, escalated …), each remediation tried (applied → verified or reverted),
health probes, and acceptance length over time.
"""

from __future__ import annotations

import html
from typing import Any, Iterable, Mapping

from .stderr_tail import describe_exit
from .views import STATUS_MEANS, _short_param, fill_numbers, flag_changes, seconds, unmatched, when

WIDTH, LEFT, RIGHT = 980, 130, 24
LANE_H = 46
COLOURS = {
    "serving": "#2e9d4f",
    "starting": "#e0a526",
    "crashed": "#d43d3d",
    "unknown": "#b9bec7",
    "verified": "#2e9d4f",
    "applied": "#e0a526",
    "reverted": "#d43d3d",
    "decision": "#3a6fd8",
    "escalated": "#8e1f1f",
    "failed": "#d43d3d",
    "healthy": "#2e9d4f",
    "accept": "#6b3fc0",
}
DECISIONS = (
    "detected",
    "diagnosed",
    "advised",
    "escalated",
    "prevented",
    "reconciled",
    "verified",
    "not-remediated",
    "apply-failed",
    "skipped",
)
STATUS_CLASS = {
    "resolved": "good",
    "prevented": "good",
    "open": "warn",
    "advised": "info",
    "interrupted": "info",
    "reverted": "bad",
    "escalated": "bad",
}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;background:#f6f7f9;color:#1d232b}
header{background:#1d232b;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px;font-weight:600}
header .sub{color:#c9d1dc;margin-top:4px}
.badge{display:inline-block;border-radius:4px;padding:1px 8px;font-weight:600;font-size:13px}
.good{background:#d9f2e1;color:#17622f}.bad{background:#f9dcdc;color:#8e1f1f}
.warn{background:#fbefd2;color:#7a5300}.info{background:#dde7fb;color:#23448f}
main{display:grid;grid-template-columns:minmax(0,1fr) 420px;gap:18px;padding:18px 24px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;margin-bottom:18px}
h2{font-size:15px;margin:0 0 8px}
dl{display:grid;grid-template-columns:120px 1fr;gap:3px 10px;margin:0}
dt{color:#5a6472}dd{margin:0;overflow-wrap:anywhere}
pre{background:#0f141a;color:#e6e9ee;padding:8px 10px;border-radius:4px;overflow-x:auto;font-size:12px;margin:6px 0}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eceef2;vertical-align:top}
th{color:#5a6472;font-weight:600}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
svg text{font:11px system-ui,sans-serif;fill:#1d232b}
svg .lane{font-weight:600;fill:#5a6472}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
@media (max-width:1100px){main{grid-template-columns:1fr}}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def page_name(incident: Mapping[str, Any]) -> str:
    return f"incident-{int(incident['id'])}.html"


def _document(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>{body}</body></html>\n"
    )


# ---- the timeline ----------------------------------------------------------------------------


class _Scale:
    def __init__(self, start: float, end: float):
        self.start = start
        self.span = max(end - start, 1e-3)

    def x(self, at: float) -> float:
        return round(LEFT + (at - self.start) / self.span * (WIDTH - LEFT - RIGHT), 1)


def _steps(incident: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return sorted(incident.get("steps") or [], key=lambda step: step["at"])


def _service_segments(incident: Mapping[str, Any], end: float) -> list[tuple[float, float, str, str]]:
    """(from, to, state, label) bands of the service lane, from the recorded steps."""
    segments: list[tuple[float, float, str, str]] = []
    state, since = "unknown", incident["started_at"]
    for step in _steps(incident):
        name = step["step"]
        new = {
            "detected": "crashed",
            "recurred": "crashed",
            "failed": "crashed",
            "restarting": "starting",
            "restarted": "starting",
            "healthy": "serving",
            "verified": "serving",
        }.get(name)
        if new is None or new == state:
            continue
        segments.append((since, step["at"], state, state))
        state, since = new, step["at"]
    segments.append((since, end, state, state))
    return [segment for segment in segments if segment[1] > segment[0] or segment[2] == "crashed"]


def _application_bars(incident: Mapping[str, Any], end: float) -> list[tuple[float, float, Mapping[str, Any]]]:
    steps = _steps(incident)
    bars = []
    for application in incident.get("applications") or []:
        start = next(
            (
                s["at"]
                for s in steps
                if s["step"] == "applied"
                and isinstance(s.get("data"), dict)
                and s["data"].get("application_id") == application["application_id"]
            ),
            application.get("applied_at") or incident["started_at"],
        )
        finish_step = "reverted" if application["status"] == "reverted" else "verified"
        stop = next((s["at"] for s in steps if s["step"] == finish_step and s["at"] >= start), end)
        bars.append((start, max(stop, start), application))
    return bars


def _marker(x: float, y: float, colour: str, title: str, shape: str = "circle") -> str:
    tip = f"<title>{_e(title)}</title>"
    if shape == "cross":
        return (
            f'<g class="mark" data-kind="crash">'
            f'<path d="M{x - 6} {y - 6}L{x + 6} {y + 6}M{x + 6} {y - 6}L{x - 6} {y + 6}" '
            f'stroke="{colour}" stroke-width="3"/>{tip}</g>'
        )
    if shape == "diamond":
        return f'<g class="mark"><path d="M{x} {y - 7}L{x + 7} {y}L{x} {y + 7}L{x - 7} {y}Z" fill="{colour}"/>{tip}</g>'
    return f'<g class="mark"><circle cx="{x}" cy="{y}" r="5" fill="{colour}"/>{tip}</g>'


def _labels(items: Iterable[tuple[float, str]], y: float, min_gap: float = 70.0) -> list[str]:
    """Labels under markers, on two staggered rows so that close events stay readable."""
    out, last = [], {0: -1e9, 1: -1e9}
    for x, text in items:
        row = 0 if x - last[0] >= min_gap else 1 if x - last[1] >= min_gap else None
        if row is None:
            continue  # the marker's tooltip and the steps table still have it
        last[row] = x
        out.append(f'<text x="{x}" y="{y + 18 + row * 12}" text-anchor="middle">{_e(text)}</text>')
    return out


def timeline_svg(incident: Mapping[str, Any]) -> str:
    steps = _steps(incident)
    times = [incident["started_at"]] + [s["at"] for s in steps]
    if incident.get("resolved_at"):
        times.append(incident["resolved_at"])
    start, end = min(times), max(times)
    end = end + max((end - start) * 0.04, 0.05)
    scale = _Scale(start, end)
    lanes = ["service", "ddtreed", "remediations", "health", "accept length"]
    height = 30 + LANE_H * len(lanes) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" role="img" viewBox="0 0 {WIDTH} {height}" '
        f'width="100%" aria-label="incident {int(incident["id"])} timeline">'
    ]
    for index, lane in enumerate(lanes):
        y = 30 + index * LANE_H
        parts.append(
            f'<rect x="0" y="{y}" width="{WIDTH}" height="{LANE_H}" fill="{"#fafbfc" if index % 2 else "#fff"}"/>'
        )
        parts.append(f'<text class="lane" x="10" y="{y + 20}">{_e(lane)}</text>')
    # the time axis
    for tick in range(6):
        at = start + (end - start) * tick / 5
        x = scale.x(at)
        parts.append(f'<line x1="{x}" y1="24" x2="{x}" y2="{height - 24}" stroke="#e3e6eb"/>')
        parts.append(f'<text x="{x}" y="16" text-anchor="middle">+{_e(seconds(at - start))}</text>')
    parts.append(
        f'<text x="{WIDTH - RIGHT}" y="{height - 8}" text-anchor="end">{_e(when(start))} (UTC) → {_e(when(end))}</text>'
    )
    # lane 1: the service
    y = 30 + 12
    for begin, finish, state, label in _service_segments(incident, end):
        x1, x2 = scale.x(begin), scale.x(finish)
        if state == "crashed":  # down until the restart: a pale band under the crash marks
            parts.append(
                f'<rect class="phase" data-state="down" x="{x1}" y="{y + 4}" width="{max(x2 - x1, 1.5)}" '
                f'height="10" fill="#f3c4c4"><title>down {_e(seconds(finish - begin))}</title></rect>'
            )
            continue
        parts.append(
            f'<rect class="phase" data-state="{state}" x="{x1}" y="{y}" width="{max(x2 - x1, 1.5)}" '
            f'height="18" rx="3" fill="{COLOURS[state]}">'
            f"<title>{_e(label)} {_e(seconds(finish - begin))}</title></rect>"
        )
        if x2 - x1 > 60:
            parts.append(
                f'<text x="{(x1 + x2) / 2}" y="{y + 13}" text-anchor="middle" style="fill:#fff">{_e(label)}</text>'
            )
    evidence = incident.get("evidence") or {}
    for step in steps:
        if step["step"] in ("detected", "recurred", "failed"):
            title = f"{step['step']}: {step.get('detail') or ''}"
            if step["step"] == "detected" and evidence.get("phase"):
                title += f" (phase {evidence['phase']})"
            parts.append(_marker(scale.x(step["at"]), y + 9, COLOURS["crashed"], title, "cross"))
    # lane 2: ddtreed's decisions
    y = 30 + LANE_H + 14
    decided = [s for s in steps if s["step"] in DECISIONS]
    for step in decided:
        colour = COLOURS["escalated"] if step["step"] == "escalated" else COLOURS["decision"]
        parts.append(_marker(scale.x(step["at"]), y, colour, f"{step['step']}: {step.get('detail') or ''}", "diamond"))
    parts += _labels(((scale.x(s["at"]), s["step"]) for s in decided), y)
    # lane 3: remediations tried
    y = 30 + 2 * LANE_H + 10
    for begin, finish, application in _application_bars(incident, end):
        x1, x2 = scale.x(begin), scale.x(finish)
        colour = COLOURS.get(application["status"], COLOURS["applied"])
        parts.append(
            f'<rect class="remediation" data-status="{_e(application["status"])}" x="{x1}" y="{y}" '
            f'width="{max(x2 - x1, 3)}" height="18" rx="3" fill="{colour}"><title>{_e(application["remediation_id"])}: '
            f"{_e(application['status'])}</title></rect>"
        )
        parts.append(
            f'<text x="{x1 + 4}" y="{y + 31}">{_e(application["remediation_id"])} ({_e(application["status"])})</text>'
        )
    # lane 4: health probes
    y = 30 + 3 * LANE_H + 18
    probes = [s for s in steps if s["step"] in ("healthy", "failed", "verified")]
    for step in probes:
        ok = step["step"] != "failed"
        parts.append(
            _marker(
                scale.x(step["at"]),
                y,
                COLOURS["healthy" if ok else "failed"],
                f"{'passed' if ok else 'FAILED'}: {step.get('detail') or ''}",
            )
        )
    # lane 5: acceptance length over time
    top = 30 + 4 * LANE_H + 6
    points = [
        (s["at"], float(s["data"]["accept_length"]))
        for s in steps
        if isinstance(s.get("data"), dict) and isinstance(s["data"].get("accept_length"), (int, float))
    ]
    if points:
        high = max(value for _, value in points) or 1.0
        coords = [(scale.x(at), round(top + LANE_H - 10 - value / high * (LANE_H - 16), 1)) for at, value in points]
        if len(coords) > 1:
            path = " ".join(f"{x},{yy}" for x, yy in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{COLOURS["accept"]}" stroke-width="2"/>')
        for (x, yy), (_, value) in zip(coords, points):
            parts.append(
                f'<g class="accept"><circle cx="{x}" cy="{yy}" r="4" fill="{COLOURS["accept"]}"/>'
                f"<title>accept length {value:.2f}</title></g>"
            )
            parts.append(f'<text x="{x + 6}" y="{yy + 4}">{value:.2f}</text>')
    else:
        parts.append(f'<text x="{LEFT}" y="{top + 24}" style="fill:#8a93a0">no acceptance length measured</text>')
    parts.append("</svg>")
    return "".join(parts)


# ---- the story -------------------------------------------------------------------------------


def _facts(incident: Mapping[str, Any]) -> str:
    rows = [
        (
            "status",
            f'<span class="badge {STATUS_CLASS.get(incident["status"], "info")}">{_e(incident["status"])}</span> '
            f"{_e(STATUS_MEANS.get(incident['status'], ''))}",
        ),
        ("category", _e(incident["category"])),
        ("rule", _e(incident.get("rule_id") or unmatched(incident))),
        ("source", _e(incident["source"])),
        ("started", _e(when(incident["started_at"]))),
    ]
    if incident["status"] != "open":
        rows.append(
            (
                incident["status"],
                _e(when(incident.get("resolved_at")))
                + (
                    f" ({_e(seconds(incident['duration_s']))} after detection)"
                    if incident.get("duration_s") is not None
                    else ""
                ),
            )
        )
    if incident.get("recurrences"):
        rows.append(("recurred", f"{int(incident['recurrences'])} times after restarts"))
    if incident.get("outcome"):
        rows.append(("outcome", _e(incident["outcome"])))
    evidence = incident.get("evidence") or {}
    if describe_exit(evidence):
        rows.append(("exit", _e(describe_exit(evidence))))
    if evidence.get("phase"):
        rows.append(("phase", _e(evidence["phase"])))
    if incident.get("fingerprint"):
        rows.append(
            (
                "signature",
                f'<span class="mono">{_e(incident["fingerprint"])}</span>'
                + (" (auto-remediation frozen)" if incident.get("frozen") else ""),
            )
        )
    return "<dl>" + "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in rows) + "</dl>"


def _error_section(incident: Mapping[str, Any]) -> str:
    evidence = incident.get("evidence") or {}
    parts = []
    error = ": ".join(p for p in (incident.get("exception"), incident.get("message")) if p)
    if error:
        parts.append(f'<h2>error</h2><pre id="error">{_e(error)}</pre>')
    if evidence.get("last_error"):
        parts.append(f'<h2>last error line of the service</h2><pre id="last-error">{_e(evidence["last_error"])}</pre>')
    tail = evidence.get("stderr_tail") or []
    if tail:
        where = f" ({_e(evidence['stderr_path'])})" if evidence.get("stderr_path") else ""
        parts.append(f'<h2>stderr, last {len(tail)} lines{where}</h2><pre id="stderr">{_e(chr(10).join(tail))}</pre>')
    for crash in (incident.get("tracebacks") or [])[:4]:
        frames = "\n".join(
            f"  {f['file']}:{f.get('line') or '?'} in {f['function']}" for f in (crash.get("frames") or [])[-8:]
        )
        what = crash.get("exception") or crash.get("kind")
        head = f"[{crash.get('rank') or 'untagged'}] {what}: {crash.get('message') or ''}"
        parts.append(f'<pre class="traceback">{_e(head)}\n{_e(frames)}</pre>')
    return "<section>" + "".join(parts) + "</section>" if parts else ""


def _diagnosis_section(incident: Mapping[str, Any]) -> str:
    params = incident.get("params") or {}
    parts = [f'<h2>diagnosis</h2><p id="diagnosis">{_e(fill_numbers(incident.get("diagnosis"), params) or "none")}</p>']
    if incident.get("title"):
        parts.insert(0, f"<p><strong>{_e(incident['title'])}</strong></p>")
    if incident.get("advice"):
        parts.append(f"<h2>advice</h2><p>{_e(incident['advice'])}</p>")
    short = {k: v for k, v in params.items() if _short_param(v, incident)}
    if short:
        parts.append(
            "<h2>evidence (params)</h2><dl>"
            + "".join(f'<dt>{_e(k)}</dt><dd class="mono">{_e(v)}</dd>' for k, v in sorted(short.items()))
            + "</dl>"
        )
    if incident.get("remediations"):
        parts.append(f"<p>remediations to try: {_e(', '.join(incident['remediations']))}</p>")
    return "<section>" + "".join(parts) + "</section>"


def _remediation_section(incident: Mapping[str, Any]) -> str:
    applications = incident.get("applications") or []
    if not applications:
        return ""
    before = list((incident.get("context") or {}).get("argv") or [])
    rows = []
    for application in applications:
        words = {
            "verified": "applied, verified",
            "applied": "applied, not yet verified",
            "reverted": "tried, reverted",
        }.get(application["status"], application["status"])
        detail = _e(application.get("summary") or "")
        launch = application.get("launch") or {}
        if launch and before and application["kind"] == "args":
            changes = flag_changes(before, list(launch.get("argv") or []))
            detail += "".join(f'<div class="mono">{_e(c)}</div>' for c in changes)
        for change in application.get("files") or []:
            detail += f'<div class="mono">{_e(change["path"])}</div>'
        badge = {"verified": "good", "reverted": "bad"}.get(application["status"], "warn")
        rows.append(
            f'<tr><td class="mono">{_e(application["remediation_id"])}</td>'
            f'<td><span class="badge {badge}">{_e(words)}</span></td><td>{detail}</td></tr>'
        )
    return (
        "<section><h2>remediations tried</h2><table><tr><th>remediation</th><th>result</th><th>change</th></tr>"
        + "".join(rows)
        + "</table></section>"
    )


def _steps_table(incident: Mapping[str, Any]) -> str:
    rows = "".join(
        f'<tr><td class="mono">+{s["since_detection_s"]:.3f}s</td><td class="mono">{_e(when(s["at"]))}</td>'
        f'<td>{_e(s["step"])}</td><td style="white-space:pre-line">{_e(s.get("detail") or "")}</td></tr>'
        for s in _steps(incident)
    )
    return (
        '<section><h2>steps</h2><table id="steps"><tr><th>after</th><th>at (UTC)</th><th>step</th><th>detail</th></tr>'
        + rows
        + "</table></section>"
    )


def render_page(incident: Mapping[str, Any]) -> str:
    title = f"incident {int(incident['id'])}: {incident['status']} {incident['category']}"
    legend = "".join(
        f'<span><i style="background:{COLOURS[key]}"></i>{label}</span>'
        for key, label in (
            ("serving", "serving"),
            ("starting", "starting / restarting"),
            ("crashed", "crash"),
            ("decision", "ddtreed decision"),
            ("reverted", "reverted"),
            ("accept", "acceptance length"),
        )
    )
    body = (
        f'<header><h1>{_e(title)}</h1><div class="sub">{_e(incident.get("title") or "")}</div></header><main>'
        f'<div><section><h2>timeline</h2>{timeline_svg(incident)}<div class="legend">{legend}</div></section>'
        f"{_steps_table(incident)}</div>"
        f"<div><section>{_facts(incident)}</section>{_diagnosis_section(incident)}{_error_section(incident)}"
        f"{_remediation_section(incident)}</div></main>"
    )
    return _document(title, body)


def render_index(incidents: list[Mapping[str, Any]], source: str = "") -> str:
    rows = "".join(
        f'<tr><td><a href="{_e(page_name(row))}">{int(row["id"])}</a></td>'
        f'<td class="mono">{_e(when(row["started_at"]))}</td>'
        f'<td>{_e(row["category"])}</td><td class="mono">{_e(row.get("rule_id") or "-")}</td>'
        f'<td><span class="badge {STATUS_CLASS.get(row["status"], "info")}">{_e(row["status"])}</span></td>'
        f'<td>{1 + int(row.get("recurrences") or 0)}x</td><td class="mono">{_e(row.get("remediation_id") or "-")}</td>'
        f"<td>{_e(seconds(row.get('duration_s')))}</td></tr>"
        for row in incidents
    )
    body = (
        f'<header><h1>ddtreed incidents</h1><div class="sub">{_e(source)} · {len(incidents)} incidents, '
        "newest first</div></header>"
        '<main style="grid-template-columns:1fr"><section><table id="incidents"><tr><th>id</th><th>started (UTC)</th>'
        "<th>category</th><th>rule</th><th>status</th><th>seen</th><th>remediation</th><th>duration</th></tr>"
        f"{rows}</table></section></main>"
    )
    return _document("ddtreed incidents", body)
