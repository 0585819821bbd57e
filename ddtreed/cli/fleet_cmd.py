"""`ddtreed fleet …`: run status, incidents, diagnose, rules push, remediate and logs on many hosts."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from .common import CliError, positive_int, print_json, table

SUMMARY_CHARS = 100  # one table cell per host; --json has everything


def register(commands) -> None:
    fleet = commands.add_parser(
        "fleet", help="run ddtreed commands on the hosts of an SSH inventory, in parallel",
        description="Run ddtreed commands on many inference hosts over SSH. Results are per host, "
                    "failures side by side with successes; exit 1 when any host failed.")
    sub = fleet.add_subparsers(dest="fleet_command", metavar="COMMAND", required=True)
    common = _common_options()
    _add(sub, common, "status", "each host's daemon status", _status)
    incidents = _add(sub, common, "incidents", "all hosts' incidents in one table, newest first", _incidents)
    incidents.add_argument("--limit", type=positive_int, default=50, metavar="N", help="per host (default 50)")
    diagnose = _add(sub, common, "diagnose", "diagnose a log file that lives on each host", _diagnose)
    diagnose.add_argument("logfile", metavar="LOGFILE", help="path on the remote hosts")
    logs = _add(sub, common, "logs", "tail of each host's service logs", _logs)
    logs.add_argument("--lines", type=positive_int, default=50, metavar="N", help="lines per file (default 50)")
    rules = sub.add_parser("rules", help="rule files on the hosts").add_subparsers(
        dest="rules_command", metavar="push", required=True)
    push = _add(rules, common, "push", "validate on each host, then swap in rule files and reload",
                _rules_push)
    push.add_argument("directory", metavar="DIR", help="local directory of rule *.toml files")
    remediate = sub.add_parser("remediate", help="apply or revert a remediation on the hosts")
    actions = remediate.add_subparsers(dest="remediate_command", metavar="apply|revert", required=True)
    apply = _add(actions, common, "apply", "apply a remediation on each host", _remediate_apply)
    apply.add_argument("remediation_id", metavar="ID")
    apply.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    revert = _add(actions, common, "revert", "revert an application on each host", _remediate_revert)
    revert.add_argument("application_id", metavar="APPLICATION_ID")


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--inventory", metavar="FILE", required=True, help="fleet inventory TOML (docs/fleet.md)")
    which = common.add_mutually_exclusive_group()
    which.add_argument("--hosts", metavar="A,B", help="only these inventory hosts")
    which.add_argument("--tag", metavar="TAG", help="only hosts with this tag")
    common.add_argument("--json", action="store_true", help="machine-readable JSON output")
    common.add_argument("--accept-new", action="store_true",
                        help="trust and record unknown host keys (never changed ones), like ssh accept-new")
    common.add_argument("--concurrency", type=positive_int, metavar="N",
                        help="hosts at once (default: the inventory's, else all, at most 64)")
    common.add_argument("--deadline", type=float, metavar="SECONDS",
                        help="per-host deadline (default: the inventory's command_timeout_s)")
    return common


def _add(sub, common, name: str, summary: str, handler: Callable) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, parents=[common], help=summary, description=summary[0].upper() + summary[1:] + ".")
    parser.set_defaults(handler=handler)
    return parser


def _run(args: argparse.Namespace, job: Callable) -> Any:
    from ..fleet import InventoryError, load_inventory, run_on_hosts
    from ..ops.logsetup import configure

    # stdout is for results (--json consumers); warnings such as a recorded host key go to stderr.
    configure(json_output=False, level="warning", stream=sys.stderr)

    try:
        inventory = load_inventory(args.inventory)
        names = [name.strip() for name in args.hosts.split(",") if name.strip()] if args.hosts else None
        entries = inventory.select(names, args.tag)
    except InventoryError as error:
        raise CliError(str(error), exit_code=2) from None
    if args.deadline is not None and args.deadline <= 0:
        raise CliError(f"--deadline must be > 0, got {args.deadline}", exit_code=2)
    return run_on_hosts(entries, job, accept_new=args.accept_new, concurrency=args.concurrency,
                        deadline_s=args.deadline)


def _finish(args: argparse.Namespace, report, summarize: Callable[[Any], str] = None) -> int:
    if args.json:
        print_json(report.as_json())
    else:
        rows = [[host.name, "ok" if host.ok else host.error,
                 _cell(summarize(host.result) if host.ok and summarize else
                       (host.detail or "") if not host.ok else _compact(host.result))]
                for host in report.hosts]
        print(table(rows, ["HOST", "RESULT", "DETAIL"]))
        failed = sum(not host.ok for host in report.hosts)
        print(f"{len(report.hosts) - failed} ok, {failed} failed in {report.elapsed_s:.1f}s")
    return 0 if report.ok else 1


def _cell(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str) if value is not None else ""


def _status(args: argparse.Namespace) -> int:
    from ..fleet import commands

    return _finish(args, _run(args, commands.status), _summarize_status)


def _summarize_status(result: Any) -> str:
    if isinstance(result, dict):
        keys = ("state", "status", "service", "pid", "restarts", "open_incidents", "last_incident")
        picked = {key: result[key] for key in keys if key in result and not isinstance(result[key], (dict, list))}
        if picked:
            return " ".join(f"{key}={value}" for key, value in picked.items())
    return _compact(result)


def _incidents(args: argparse.Namespace) -> int:
    from ..fleet import commands

    report = _run(args, lambda connection: commands.incidents(connection, args.limit))
    merged = merge_incidents(report)
    if args.json:
        print_json({**report.as_json(), "incidents": merged})
        return 0 if report.ok else 1
    if merged:
        print(table([[row["host"], str(row.get("id", "-")), str(row.get("started_at", "-"))[:19],
                      str(row.get("category", "-")), str(row.get("rule_id") or "-"), str(row.get("status", "-")),
                      str(row.get("remediation_id") or "-")] for row in merged],
                    ["HOST", "ID", "STARTED (UTC)", "CATEGORY", "RULE", "STATUS", "REMEDIATION"]))
    else:
        print("no incidents on the hosts that answered")
    for host in report.hosts:
        if not host.ok:
            print(f"{host.name}: {host.error}: {_cell(host.detail or '')}")
    return 0 if report.ok else 1


def merge_incidents(report) -> list[dict[str, Any]]:
    """Every answering host's incidents with a `host` key, newest first (ISO times sort as text)."""
    rows = [{"host": host.name, **row} for host in report.hosts if host.ok for row in host.result or []]
    return sorted(rows, key=lambda row: (str(row.get("started_at") or ""), row["host"]), reverse=True)


def _diagnose(args: argparse.Namespace) -> int:
    from ..fleet import commands

    return _finish(args, _run(args, lambda connection: commands.diagnose(connection, args.logfile)),
                   _summarize_diagnosis)


def _summarize_diagnosis(result: Any) -> str:
    found = result.get("incidents") if isinstance(result, dict) else None
    if isinstance(found, list):
        if not found:
            return "no crash found"
        return "; ".join(f"{item.get('category')} (rule {item.get('rule_id') or '-'}, fixes: "
                         f"{', '.join(item.get('remediations') or []) or '-'})" for item in found)
    return _compact(result)


def _logs(args: argparse.Namespace) -> int:
    from ..fleet import commands

    report = _run(args, lambda connection: commands.logs(connection, args.lines))
    if args.json:
        print_json(report.as_json())
        return 0 if report.ok else 1
    for host in report.hosts:
        if not host.ok:
            print(f"== {host.name}: {host.error}: {host.detail}")
            continue
        for path, lines in host.result["files"].items():
            print(f"== {host.name}:{path}")
            print("\n".join(lines))
    return 0 if report.ok else 1


def _rules_push(args: argparse.Namespace) -> int:
    from ..fleet import commands

    files = _rule_files(Path(args.directory))
    return _finish(args, _run(args, lambda connection: commands.rules_push(connection, files)),
                   lambda result: f"{len(result['installed'])} installed, {len(result['removed'])} removed; "
                                  f"{result['reload']}")


def _rule_files(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        raise CliError(f"{directory}: not a directory of rule files", exit_code=2)
    files = {path.name: path.read_bytes() for path in sorted(directory.glob("*.toml")) if path.is_file()}
    if not files:
        raise CliError(f"{directory}: no *.toml rule files to push", exit_code=2)
    return files


def _remediate_apply(args: argparse.Namespace) -> int:
    from ..fleet import commands

    job = lambda connection: commands.remediate_apply(connection, args.remediation_id, args.dry_run)  # noqa: E731
    return _finish(args, _run(args, job))


def _remediate_revert(args: argparse.Namespace) -> int:
    from ..fleet import commands

    return _finish(args, _run(args, lambda connection: commands.remediate_revert(connection, args.application_id)))
