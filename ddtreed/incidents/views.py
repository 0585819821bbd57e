"""How incidents read: JSON with ISO-8601 UTC times, the list table, the full story.

The text reads like `systemctl status`: a headline, aligned `label: value` lines, multi-line
values indented under their label, then sections. Words for an ended incident say what happened
(`escalated`, not `resolved`), and a remediation that was reverted is listed as tried, not applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ..textstyle import as_json, iso, paint, use_colour  # noqa: F401 - the CLI imports them from here

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the readers start fast)
if TYPE_CHECKING:
    from typing import Any

TABLE_HEADERS = ["ID", "STARTED (UTC)", "CATEGORY", "RULE", "STATUS", "SEEN", "REMEDIATION", "DURATION"]
FRAMES_SHOWN = 8  # the innermost frames say where it broke; the full list is in --json
STDERR_SHOWN = 20  # lines of the service's stderr tail in the text view (all 40 in --json)
PARAM_CHARS = 60  # a param is a number or a name; a whole message belongs in `error:`
LABEL = 12

# What the end of an incident is called, by status (the time label of the headline block).
ENDED_AS = {"resolved": "resolved", "reverted": "reverted", "escalated": "escalated",
            "prevented": "prevented", "advised": "advised",
            "interrupted": "closed"}  # by the next start's recovery (a label fits 11 characters)
STATUS_MEANS = {
    "open": "in progress",
    "resolved": "fixed and verified",
    "reverted": "the fix did not hold and was undone",
    "escalated": "needs a person: nothing left to try automatically",
    "prevented": "fixed before the launch",
    "advised": "recorded what would be done (policy advise/off)",
    "observed": "recorded; nothing for ddtreed to do",
    "interrupted": "ddtreed stopped before it closed; no fix of it was ever applied",
}
APPLICATION_WORDS = {
    "verified": "applied, verified (kept)",
    "applied": "applied, not yet verified",
    "reverted": "tried, reverted (did not hold)",
}


# ---- colour (a terminal only) and JSON: ddtreed.textstyle (stdlib only; `status` uses them) ----

# ---- small words -----------------------------------------------------------------------------

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


def fill_numbers(text: str | None, params: Mapping[str, Any]) -> str | None:
    """`<n>` placeholders of a normalised message back to the numbers kept as n0, n1, …"""
    if not text or "<n>" not in text:
        return text
    index = iter(range(10_000))

    def number(_match: re.Match) -> str:
        value = params.get(f"n{next(index)}")
        return "<n>" if value is None else str(value)

    return re.sub(r"<n>", number, text)


def field(label: str, value: Any, indent: int = 2) -> list[str]:
    """`  label:   first line` and every further line indented under the value."""
    text = "" if value is None else str(value)
    lines = text.splitlines() or [""]
    pad = " " * indent
    head = f"{pad}{label + ':':<{LABEL}}{lines[0]}".rstrip()
    return [head] + [f"{pad}{'':<{LABEL}}{line}".rstrip() for line in lines[1:]]


def block(title: str, text: str | None, indent: int = 2) -> list[str]:
    if not text:
        return []
    return ["", f"{title}:"] + [f"{' ' * indent}{line}".rstrip() for line in text.splitlines()]


# ---- the list --------------------------------------------------------------------------------

def table_rows(incidents: Iterable[Mapping[str, Any]]) -> list[list[str]]:
    return [[str(row["id"]), when(row["started_at"]), row["category"], row["rule_id"] or "-",
             row["status"], f"{1 + int(row.get('recurrences') or 0)}x", row["remediation_id"] or "-",
             seconds(row["duration_s"])]
            for row in incidents]


# ---- one incident ----------------------------------------------------------------------------

def render_incident(incident: Mapping[str, Any], colour: bool = False) -> str:
    """The whole story of one incident as plain text (what `ddtreed incidents show` prints)."""
    lines = _header(incident, colour)
    if incident.get("unreadable"):  # a column the database holds but this version cannot decode
        lines += field("unreadable", ", ".join(incident["unreadable"]) + " (corrupted in the database: shown empty, "
                       "left as stored)")
    lines += _evidence(incident.get("evidence"))
    lines += _diagnosis(incident)
    lines += _tracebacks(incident.get("tracebacks") or [])
    lines += _steps(incident)
    lines += _applications(incident, colour)
    lines += _durations(incident.get("durations") or {})
    return "\n".join(lines)


def _header(incident: Mapping[str, Any], colour: bool) -> list[str]:
    status = incident["status"]
    rule = f"rule {incident['rule_id']}" if incident.get("rule_id") else unmatched(incident)
    lines = [f"incident {incident['id']}: {paint(status, status, colour)}  {incident['category']}  ({rule})"]
    lines += field("means", STATUS_MEANS.get(status, status))
    service = f" on {incident['service']}" if incident.get("service") else ""
    lines += field("source", f"{incident['source']}{service}")
    lines += field("started", when(incident["started_at"]))
    if status == "open":
        lines += field("ended", "- (still open)")
    else:
        after = incident.get("duration_s")
        since = f" ({seconds(after)} after detection)" if after is not None else ""
        lines += field(ENDED_AS.get(status, status), when(incident.get("resolved_at")) + since)
    if incident.get("recurrences"):
        count = incident["recurrences"]
        lines += field("recurred", f"{count} time{'s' if count != 1 else ''} after restarts "
                                   f"(last {when(incident.get('last_recurred_at'))})")
    if incident.get("outcome"):
        lines += field("outcome", incident["outcome"])
    if incident.get("fingerprint"):
        frozen = "  (auto-remediation frozen)" if incident.get("frozen") else ""
        lines += field("signature", f"{incident['fingerprint']}{frozen}")
    if incident.get("exception") or incident.get("message"):
        error = ": ".join(part for part in (incident.get("exception"), incident.get("message")) if part)
        lines += field("error", error)
    return lines


def unmatched(incident: Mapping[str, Any]) -> str:
    """What an incident without a rule says of it: the rules found none ("no rule matched", the
    title every diagnosis has), or they never judged it (no title: the crash's row is recorded
    before its diagnosis, and the rules failed or ddtreed died in between)."""
    return "no rule matched" if incident.get("title") else "not diagnosed"


def _evidence(record: Mapping[str, Any] | None) -> list[str]:
    """What the service said: its last error line, how it ended, the phase, its stderr tail."""
    if not record:
        return []
    from .stderr_tail import describe_exit  # here: the list (`ddtreed incidents`) never needs it

    lines = []
    if record.get("last_error"):
        lines += field("last error", record["last_error"])
    ended = describe_exit(record)
    if ended:
        lines += field("exit", ended)
    if record.get("phase"):
        lines += field("phase", record["phase"])
    tail = list(record.get("stderr_tail") or [])
    if tail:
        shown = tail[-STDERR_SHOWN:]
        where = f" ({record['stderr_path']})" if record.get("stderr_path") else ""
        more = f", {len(tail) - len(shown)} more in --json" if len(tail) > len(shown) else ""
        lines += ["", f"stderr, last {len(shown)} lines{where}{more}:"]
        lines += [f"  | {line}".rstrip() for line in shown]
    return lines


def _diagnosis(incident: Mapping[str, Any]) -> list[str]:
    params = incident.get("params") or {}
    lines = []
    if incident.get("title"):
        lines += ["", f"{incident['title']}"]
    lines += block("diagnosis", fill_numbers(incident.get("diagnosis"), params))
    lines += block("advice", incident.get("advice"))
    shown = {key: value for key, value in params.items() if _short_param(value, incident)}
    if shown:
        lines += ["", "params: " + ", ".join(f"{key}={value}" for key, value in sorted(shown.items()))]
    if incident.get("remediations"):
        lines.append("remediations to try: " + ", ".join(incident["remediations"]))
    return lines


def _short_param(value: Any, incident: Mapping[str, Any]) -> bool:
    """Numbers and names; a long or multi-line text (a message pasted as a param) is left to --json."""
    if isinstance(value, (dict, list)):
        return False
    text = str(value)
    return len(text) <= PARAM_CHARS and "\n" not in text and text != incident.get("message")


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
        error = f"{exception}: {message}" if exception else (message or "")
        error_lines = error.splitlines() or [""]
        lines.append(f"  [{ranks}] {first.get('kind')}: {error_lines[0]}")
        lines += [f"      {line}".rstrip() for line in error_lines[1:]]
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
    width = max(11, *(len(step["step"]) for step in steps))  # `not-remediated` keeps the column
    for step in steps:
        detail = (step.get("detail") or "").splitlines()
        offset = f"+{step['since_detection_s']:.3f}s"
        head = f"  {offset:>11}  {when(step['at'])}  {step['step']:<{width}} "
        lines.append(f"{head}{detail[0] if detail else ''}".rstrip())
        lines += [f"{'':<{len(head)}}{line}".rstrip() for line in detail[1:]]
    return lines


def _applications(incident: Mapping[str, Any], colour: bool) -> list[str]:
    applications = incident.get("applications") or []
    if not applications:
        return []
    before_argv = list((incident.get("context") or {}).get("argv") or [])
    tried = any(a["status"] == "reverted" for a in applications)
    lines = ["", "remediations tried:" if tried or incident["status"] == "escalated" else "remediations:"]
    for application in applications:
        words = APPLICATION_WORDS.get(application["status"], application["status"])
        word = "FAILED" if application["status"] == "reverted" else application["status"]
        lines.append(f"  {application['remediation_id']} ({application['kind']}): "
                     f"{paint(words, word if word == 'FAILED' else 'resolved', colour)}")
        lines += field("id", application["application_id"], indent=4)
        if application.get("summary"):
            lines += field("what", application["summary"], indent=4)
        for change in application.get("files") or []:
            lines += field("file", f"{change['path']}", indent=4)
            lines.append(f"    {'':<{LABEL}}sha256 {_short(change.get('before_sha256'))} → "
                         f"{_short(change.get('after_sha256'))}")
        launch = application.get("launch")
        if launch:
            changes = (flag_changes(before_argv, list(launch.get("argv") or []))
                       if before_argv and application["kind"] == "args" else [])
            if changes:
                lines += field("flags", "\n".join(changes), indent=4)
            else:
                lines += field("launch", launch.get("description") or " ".join(launch.get("argv") or []),
                               indent=4)
    return lines


def flag_changes(before: list[str], after: list[str]) -> list[str]:
    """An argv change as flag diffs: `--cuda-graph-max-bs 256 → 128`, `+ --disable-cuda-graph`."""
    from ..context.argv import split_flags

    old, _ = split_flags(before)
    new, _ = split_flags(after)
    out = []
    for name, value in old.items():
        if name not in new:
            out.append(f"- {_flag(name, value)}")
        elif new[name] != value:
            out.append(f"--{name} {_value(value)} → {_value(new[name])}")
    for name, value in new.items():
        if name not in old:
            out.append(f"+ {_flag(name, value)}")
    return out


def _flag(name: str, value: Any) -> str:
    return f"--{name}" if value is True else f"--{name} {value}"


def _value(value: Any) -> str:
    return "(on)" if value is True else str(value)


def _durations(durations: Mapping[str, Any]) -> list[str]:
    labels = (("detect_to_diagnose_s", "detected→diagnosed"), ("diagnose_to_apply_s", "diagnosed→applied"),
              ("restart_to_healthy_s", "restart→healthy"), ("total_s", "total"))
    shown = [f"{label} {seconds(durations[key])}" for key, label in labels
             if durations.get(key) is not None]
    return ["", "durations: " + ", ".join(shown)] if shown else []


def _short(digest: str | None) -> str:
    return "(none)" if digest is None else digest[:12]
