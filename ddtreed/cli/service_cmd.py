"""`ddtreed install` (unit, config skeleton, directories) and `ddtreed status` (the daemon at a glance).

`status` exit codes follow the LSB convention for init scripts: 0 running, 1 the daemon is dead
without a clean stop (its pid is gone, or it gave up after the restart budget was spent), 3 not
running (no state, or stopped cleanly).
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .common import CliError, add_config, add_json, add_state_dir, load_config, print_json, state_dir

RUNNING, STALE, NOT_RUNNING = 0, 1, 3
GAVE_UP = "gave-up"  # the daemon's final state when the restart budget was spent (it exited)
STATUS_FILE = "daemon-state.json"  # status.STATUS_FILE, named here so `--help` imports nothing
DATABASE_NAME = "incidents.sqlite3"  # incidents.DATABASE_NAME (that package imports sqlite-utils)


def register(commands) -> None:
    install = commands.add_parser("install", help="install the systemd unit, a config and directories",
                                  description="Write the ddtreed@.service unit, /etc/ddtreed/NAME.toml "
                                              "and the state (0700) and log directories.")
    install.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    install.add_argument("--root", default="/", metavar="DIR", help="install under DIR (default /)")
    install.add_argument("--config-name", default="main", metavar="NAME",
                         help="instance name: ddtreed@NAME reads /etc/ddtreed/NAME.toml (default main)")
    install.add_argument("--user", default=None, help="run ddtreed (and the service) as USER (default root)")
    install.add_argument("--force", action="store_true", help="overwrite an existing config")
    install.set_defaults(handler=run_install)

    status = commands.add_parser("status", help="the daemon's state, service, incidents at a glance",
                                 description="Read <state-dir>/daemon-state.json and the incident "
                                             "database. Exit 0 running, 1 dead (stale state, or gave "
                                             "up: restart budget spent), 3 not running.")
    add_state_dir(status)
    add_config(status)
    add_json(status)
    # configure_logs=False: status logs nothing, so main() need not import structlog for it.
    status.set_defaults(handler=run_status, configure_logs=False)


def run_install(args: argparse.Namespace) -> int:
    from ..ops.install import InstallError, apply, plan

    try:
        steps = plan(args.root, args.config_name, user=args.user, force=args.force)
        if not args.dry_run:
            apply(steps)
    except InstallError as error:
        raise CliError(str(error), exit_code=2) from None
    except OSError as error:
        raise CliError(f"{error.filename}: {error.strerror}") from None
    for step in steps:
        print(step.describe(args.dry_run))
    name = args.config_name
    print(f"\nNext:\n"
          f"  1. edit /etc/ddtreed/{name}.toml: service.argv (your launch command), service.python\n"
          f"  2. let patch remediations write the service's site-packages: `systemctl edit ddtreed@{name}`,\n"
          f"     add [Service] ReadWritePaths=/path/to/venv/lib/python3.X/site-packages\n"
          f"  3. systemctl daemon-reload && systemctl enable --now ddtreed@{name}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    # Not require_state_dir: "no such directory" is LSB's "not running" (exit 3), and fleet status
    # asks hosts where no daemon ever ran.
    directory = Path(state_dir(args, load_config(args.config)))
    reports = [_report(directory)]
    # The template unit keeps each instance in <dir>/<name>: with nothing in <dir>, show those.
    found = [] if reports[0]["daemon"] else sorted(p.parent for p in directory.glob(f"*/{STATUS_FILE}"))
    if found:
        reports = [_report(path) for path in found]
    # ddtreed.textstyle, not incidents.views: that package would import the store (sqlite-utils).
    if args.json:
        from ..textstyle import as_json

        print_json(as_json({"instances": reports} if found else reports[0]))
    else:
        from ..textstyle import use_colour

        colour = use_colour()
        print("\n\n".join(_render(report, colour) for report in reports))
    return max(report["exit_code"] for report in reports)


def _report(directory: Path) -> dict[str, Any]:
    """Everything `status` shows for one state directory, as plain data."""
    from ..ops.status import StatusError, read_status

    now = time.time()
    report: dict[str, Any] = {"state_dir": str(directory), "daemon": None, "alive": False, "stale": False,
                              "incidents": None, "incidents_error": None}
    try:
        snapshot = read_status(directory)
    except StatusError as error:
        raise CliError(str(error)) from None
    if snapshot is not None:
        alive = _alive(snapshot)
        gave_up = snapshot.state == GAVE_UP
        report.update(daemon=snapshot.to_dict(), alive=alive, gave_up=gave_up,
                      stale=not alive and snapshot.state not in ("stopped", GAVE_UP),
                      service_uptime_s=_since(now, snapshot.service_started_at if snapshot.service_pid else None),
                      seconds_since_last_healthy=_since(now, snapshot.last_healthy_at),
                      seconds_since_update=_since(now, snapshot.updated_at))
    report["incidents"], report["incidents_error"] = _incident_counts(directory)
    dead = report["stale"] or report.get("gave_up")
    report["exit_code"] = RUNNING if report["alive"] else STALE if dead else NOT_RUNNING
    return report


def _alive(snapshot) -> bool:
    """The recorded pid runs and is not a newer process that reused the number."""
    from .status_read import process_started_at

    created = process_started_at(snapshot.pid)
    if created is None:
        return False
    # The daemon writes its snapshot after it started: a process younger than that is another one.
    return created <= snapshot.updated_at + 1.0 and snapshot.state not in ("stopped", GAVE_UP)


def _incident_counts(directory: Path) -> tuple[dict[str, Any] | None, str | None]:
    """Store.counts(), read with the stdlib sqlite3, read-only (a copy of a state dir works)."""
    from .status_read import CountsError, incident_counts

    path = directory / DATABASE_NAME
    if not path.exists():
        return None, None
    try:
        return incident_counts(path), None
    except CountsError as error:
        return None, str(error)


def _since(now: float, then: float | None) -> float | None:
    return None if not then else max(0.0, round(now - then, 1))


def _render(report: dict[str, Any], colour: bool = False) -> str:
    daemon = report["daemon"]
    if daemon is None:
        missing = "" if Path(report["state_dir"]).is_dir() else " (no such directory)"
        lines = [f"ddtreed: not running: no daemon has written state in {report['state_dir']}{missing} "
                 f"(no {STATUS_FILE}; is --state-dir the config's paths.state_dir?)"]
    else:
        lines = [_headline(report, daemon, colour), *_service_lines(report, daemon)]
    lines += _incident_lines(report)
    return "\n".join(lines)


def _headline(report: dict[str, Any], daemon: dict[str, Any], colour: bool = False) -> str:
    from ..textstyle import paint

    where = report["state_dir"]
    state = daemon["state"]
    if report["alive"]:
        word = {"escalated": "escalated", "blocked": "escalated", "backoff": "open", "crashed": "reverted",
                "running": "resolved"}.get(state, "")
        return f"ddtreed: {paint(state, word, colour)} (pid {daemon['pid']}, {where}): {daemon['status_text']}"
    if state == GAVE_UP:
        return (f"ddtreed: {paint('GAVE UP', 'escalated', colour)} {_ago(report['seconds_since_update'])}: "
                f"{daemon['status_text'] or 'restart budget spent'}; it exited and left the service "
                f"stopped: a person must look, then restart ddtreed ({where})")
    if state == "stopped":
        return f"ddtreed: stopped {_ago(report['seconds_since_update'])} ({where})"
    return (f"ddtreed: NOT RUNNING: stale state: pid {daemon['pid']} is gone; it last wrote "
            f"'{daemon['state']}: {daemon['status_text']}' {_ago(report['seconds_since_update'])} ({where})")


def _service_lines(report: dict[str, Any], daemon: dict[str, Any]) -> list[str]:
    from .status_read import pid_exists

    service = "not running"
    if daemon["service_pid"] and not pid_exists(daemon["service_pid"]):
        service = f"pid {daemon['service_pid']} is gone"
    elif daemon["service_pid"]:
        service = f"pid {daemon['service_pid']}, up {_duration(report['service_uptime_s'])}"
    accept = daemon["last_accept_length"]
    rows = [
        ("service", service),
        ("restarts", str(daemon["restarts"])),
        ("accept len", "unknown" if accept is None else f"{accept:.2f}"),
        ("last healthy", _ago(report["seconds_since_last_healthy"]) if daemon["last_healthy_at"] else "never"),
        *_progress_rows(daemon),
        ("incident", f"{daemon['current_incident_id']} (in progress)" if daemon["current_incident_id"] else "none"),
        ("degraded", _degraded(daemon["degraded"])),
        ("canary", _canary(daemon["canary"])),
        ("config", daemon["config"] or "unknown"),
    ]
    return [f"  {label:<13}{value}" for label, value in rows]


def _incident_lines(report: dict[str, Any]) -> list[str]:
    if report["incidents_error"]:
        return [f"  {'incidents':<13}unreadable: {report['incidents_error']}"]
    counts = report["incidents"]
    if counts is None:
        return [f"  {'incidents':<13}none recorded"]
    by_status: dict[str, int] = {}
    by_category: dict[str, int] = {}
    for row in counts.get("incidents", []):
        by_status[row["status"]] = by_status.get(row["status"], 0) + row["count"]
        by_category[row["category"]] = by_category.get(row["category"], 0) + row["count"]
    total = sum(by_status.values())
    statuses = ", ".join(f"{by_status.get(s, 0)} {s}" for s in ("open", "escalated"))
    others = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()) if s not in ("open", "escalated"))
    categories = ", ".join(f"{c} {n}" for c, n in sorted(by_category.items(), key=lambda item: -item[1]))
    applications = counts.get("applications", {})
    lines = [f"  {'incidents':<13}{total} total: {statuses}" + (f", {others}" if others else "")]
    if categories:
        lines.append(f"  {'by category':<13}{categories}")
    # The same words as --json's `applications`: verified (kept), applied (not yet verified), reverted.
    lines.append(f"  {'remediations':<13}{applications.get('verified', 0)} verified, "
                 f"{applications.get('applied', 0)} applied (not yet verified), "
                 f"{applications.get('reverted', 0)} reverted")
    return lines


def _progress_rows(daemon: dict[str, Any]) -> list[tuple[str, str]]:
    """What a long step is at: startup phase and elapsed/budget, or the recurrence watch."""
    progress = daemon.get("progress") or {}
    rows = []
    if progress.get("phase"):
        elapsed, budget = progress.get("elapsed_s"), progress.get("budget_s")
        of = f" of {_duration(budget)}" if budget else ""
        rows.append(("progress", f"{progress['phase']}, {_duration(elapsed)}{of}"
                     + (f" ({progress['detail']})" if progress.get("detail") else "")))
    if progress.get("watching_until"):
        left = max(0.0, progress["watching_until"] - time.time())
        rows.append(("watching", f"healthy; watching {int(progress.get('window_s') or 0)} s for recurrence, "
                                 f"{_duration(left)} left"))
    return rows


def _degraded(degraded: dict[str, Any] | None) -> str:
    if not degraded:
        return "no"
    since = degraded.get("since")
    when = f" since {_iso(since)}" if since else ""
    return f"yes{when}: {', '.join(map(str, degraded.get('remediations', [])))}"


def _canary(canary: dict[str, Any] | None) -> str:
    if not canary:
        return "not run"
    verdict = "passed" if canary.get("passed") else "FAILED"
    when = f" at {_iso(canary['last_run_at'])}" if canary.get("last_run_at") else ""
    return f"{verdict}{when}" + (f": {canary['detail']}" if canary.get("detail") else "")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ago(seconds: float | None) -> str:
    return "at an unknown time" if seconds is None else f"{_duration(seconds)} ago"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
