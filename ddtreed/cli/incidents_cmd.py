"""`ddtreed incidents` (the list, `--follow`, `--html DIR`) and `incidents show ID` (one story).

Readers open the database read-only, so a copy of a state directory from another host, a
read-only mount or a reviewer's account works; nothing here writes.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from .common import (CliError, add_config, add_json, add_state_dir, load_config, positive_int, print_json,
                     require_state_dir, state_dir, table)

FOLLOW_POLL_S = 0.5
# records.INCIDENT_STATUSES (tests/test_incidents_reads.py checks they agree): ddtreed.records
# builds every record dataclass at import, which the readers here do not need.
STATUSES = ("open", "resolved", "reverted", "escalated", "prevented", "advised", "observed", "interrupted")

USAGE = ("ddtreed incidents [--state-dir DIR | --config FILE] [--status S[,S…]] [--since WHEN] "
         "[--limit N] [--json] [--follow] [--html DIR]\n"
         "       ddtreed incidents show ID [--json] [--html FILE]\n"
         "       ddtreed incidents ack ID [ID…] [--note TEXT]")
EPILOG = """\
commands:
  show ID            one incident in full: what the service said, diagnosis, tracebacks,
                     every step with its time, the remediations tried
  ack ID [ID…]       a person read these escalated incidents: retention may prune them now

examples:
  ddtreed incidents --state-dir /var/lib/ddtreed/kimi
  ddtreed incidents --config /etc/ddtreed/kimi.toml --status open,escalated --since 24h
  ddtreed incidents --follow                      # new incidents and status changes as they happen
  ddtreed incidents show 12
  ddtreed incidents show 12 --html incident-12.html
  ddtreed incidents --html ./incident-report      # index.html + one page per incident
  ddtreed incidents ack 12 --note "GPU 3 replaced"
"""


def register(commands) -> None:
    parser = commands.add_parser(
        "incidents", help="list recorded incidents (newest first); `show ID` for one",
        usage=USAGE, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List the incidents ddtreed recorded, newest first. The state directory is "
                    "the one that holds incidents.sqlite3; it is opened read-only.")
    add_state_dir(parser)
    add_config(parser)
    add_json(parser)
    parser.add_argument("--status", type=_statuses, metavar="S[,S…]",
                        help=f"only incidents in these statuses ({', '.join(STATUSES)})")
    parser.add_argument("--since", type=_since, metavar="WHEN",
                        help="only incidents started since WHEN: 90s, 30m, 24h, 7d, or an ISO-8601 time")
    parser.add_argument("--limit", type=positive_int, default=50, metavar="N",
                        help="at most N incidents (default 50)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep running: print incidents as they open, recur and end (Ctrl-C stops)")
    parser.add_argument("--html", metavar="DIR",
                        help="write DIR/index.html and one self-contained page per incident")
    # The readers (the list, `show`) import neither the store nor structlog: they log nothing.
    parser.set_defaults(handler=_list, configure_logs=False)
    sub = parser.add_subparsers(dest="incidents_command", metavar="show ID", help=argparse.SUPPRESS)
    show = sub.add_parser(
        "show", help="one incident in full", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print one incident: what the service said (last error line, stderr tail, "
                    "exit, phase), diagnosis, tracebacks per rank, each step with its time, the "
                    "remediations tried and patch hashes.",
        epilog="examples:\n  ddtreed incidents show 12 --state-dir /var/lib/ddtreed/kimi\n"
               "  ddtreed incidents show 12 --json | jq .evidence\n"
               "  ddtreed incidents show 12 --html incident-12.html")
    show.add_argument("incident_id", type=int, metavar="ID")
    # Defaults SUPPRESSed: `incidents --state-dir D show 3` keeps the value given before `show`.
    show.add_argument("--state-dir", metavar="DIR", default=argparse.SUPPRESS,
                      help="state directory holding incidents.sqlite3 (as for `ddtreed incidents`)")
    show.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                      help="ddtreed TOML config whose paths.state_dir to read")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                      help="machine-readable JSON output")
    show.add_argument("--html", metavar="FILE", default=argparse.SUPPRESS,
                      help="write the incident as one self-contained HTML page (timeline drawn)")
    show.set_defaults(handler=_show, configure_logs=False)
    ack = sub.add_parser(
        "ack", help="a person read these escalated incidents",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Record that a person reviewed these incidents (an `acknowledged` step with "
                    "the note). Escalated incidents are never pruned by [incidents] keep / "
                    "max_age_days until acknowledged. Writes to the database (not read-only).",
        epilog="examples:\n  ddtreed incidents ack 12 --note \"GPU 3 replaced\"\n"
               "  ddtreed incidents ack 12 14 15 --config /etc/ddtreed/kimi.toml")
    ack.add_argument("incident_ids", type=int, nargs="+", metavar="ID")
    ack.add_argument("--note", default="", metavar="TEXT", help="what was found or done (kept in the step)")
    ack.add_argument("--state-dir", metavar="DIR", default=argparse.SUPPRESS,
                     help="state directory holding incidents.sqlite3 (as for `ddtreed incidents`)")
    ack.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                     help="ddtreed TOML config whose paths.state_dir to use")
    ack.set_defaults(handler=_ack, configure_logs=True)  # it writes, through the store


def _statuses(text: str) -> tuple[str, ...]:
    wanted = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [status for status in wanted if status not in STATUSES]
    if not wanted or unknown:
        raise argparse.ArgumentTypeError(f"unknown status {', '.join(unknown) or text!r}; "
                                         f"one or more of {', '.join(STATUSES)}, comma-separated")
    return wanted


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _since(text: str) -> float:
    """Epoch seconds: `30m` ago, or an ISO-8601 time (UTC when it names no zone)."""
    text = text.strip()
    if text and text[:-1].replace(".", "", 1).isdigit() and text[-1] in _UNITS:
        return time.time() - float(text[:-1]) * _UNITS[text[-1]]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration (90s, 30m, 24h, 7d) or an ISO-8601 time, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _directory(args: argparse.Namespace) -> str:
    """--state-dir, else the config's paths.state_dir, else the default; it must exist."""
    return require_state_dir(state_dir(args, load_config(getattr(args, "config", None))))


def _open(directory: str):
    """The database read-only through the stdlib reader (`incidents.reads.Reader`); a database of
    an older schema through the store, which migrates a writable copy as before."""
    from ..incidents import StoreError, database_path
    from ..incidents.reads import Reader

    path = database_path(directory)
    try:
        return Reader(path)
    except StoreError as error:
        if error.reason != "outdated":
            raise CliError(str(error)) from None
    return _open_migrating(path)


def _open_migrating(path: Path):
    import contextlib

    from ..incidents import Store, StoreError
    from ..ops.logsetup import CURRENT_STDERR, configure

    configure(json_output=False, level="warning", stream=CURRENT_STDERR)  # what the store logs
    try:
        # stdout here is the JSON scripts parse: nothing the library logs may land there.
        with contextlib.redirect_stdout(sys.stderr):
            return Store(path, create=False)
    except StoreError as error:
        raise CliError(str(error)) from None


def _read(directory: str, args: argparse.Namespace) -> list[dict]:
    from ..incidents import StoreError

    with _open(directory) as store:
        try:
            return store.list_incidents(limit=args.limit, status=args.status, since=args.since)
        except StoreError as error:
            raise CliError(str(error)) from None


def _list(args: argparse.Namespace) -> int:
    from ..incidents import database_path
    from ..incidents.views import TABLE_HEADERS, as_json, table_rows, use_colour

    directory = _directory(args)
    if args.follow:
        return _follow(directory, args)
    if not database_path(directory).exists():
        # Not an error: a fresh install has recorded nothing; scripts get an empty list.
        if args.json:
            print_json([])
        else:
            print(f"no incidents recorded yet in {directory} (no incidents.sqlite3)")
        return 0
    incidents = _read(directory, args)
    if args.html:
        return _write_html_index(directory, incidents, Path(args.html))
    if args.json:
        print_json(as_json(incidents))
    elif not incidents:
        which = f"{'/'.join(args.status)} " if args.status else ""
        print(f"no {which}incidents in {directory}" + (" in that time" if args.since else ""))
    else:
        print(table(table_rows(incidents), TABLE_HEADERS, colour=_status_colour() if use_colour() else None))
    return 0


def _status_colour():
    from ..incidents.views import paint

    def colour(column: int, text: str, value: str) -> str:
        return paint(text, value, True) if column == 4 else text

    return colour


def _show(args: argparse.Namespace) -> int:
    from ..incidents import StoreError
    from ..incidents.views import as_json, render_incident, use_colour

    directory = _directory(args)
    with _open(directory) as store:
        try:
            incident = store.get(args.incident_id)
        except StoreError as error:
            if error.reason == "missing":
                raise CliError(f"no incident {args.incident_id} in {store.path}") from None
            raise CliError(str(error)) from None
    if getattr(args, "html", None):
        from ..incidents.html import render_page

        _write(Path(args.html), render_page(incident))
        print(f"wrote {args.html}")
    elif getattr(args, "json", False):
        print_json(as_json(incident))
    else:
        print(render_incident(incident, colour=use_colour()))
    return 0


def _ack(args: argparse.Namespace) -> int:
    import contextlib
    import getpass

    from ..incidents import Store, StoreError, database_path
    from ..incidents.retention import ACKNOWLEDGED

    path = database_path(_directory(args))
    who = getpass.getuser()
    note = args.note.strip()
    try:
        # stdout stays ours: nothing the library logs may land there.
        with contextlib.redirect_stdout(sys.stderr), Store(path, create=False) as store:
            statuses = {incident_id: store.get(incident_id)["status"] for incident_id in args.incident_ids}
            with store.atomic():  # all of them or none (every ID exists: checked above)
                for incident_id in args.incident_ids:
                    store.add_step(incident_id, ACKNOWLEDGED, f"by {who}" + (f": {note}" if note else ""),
                                   {"by": who, "note": note})
    except StoreError as error:
        raise CliError(str(error)) from None
    for incident_id, status in statuses.items():
        print(f"incident {incident_id} ({status}): acknowledged")
    return 0


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as error:
        raise CliError(f"{path}: cannot write: {error.strerror or error}", exit_code=2) from None


def _write_html_index(directory: str, incidents: list[dict], target: Path) -> int:
    from ..incidents.html import page_name, render_index, render_page

    with _open(directory) as store:
        full = [store.get(row["id"]) for row in incidents]
    for incident in full:
        _write(target / page_name(incident), render_page(incident))
    _write(target / "index.html", render_index(incidents, source=directory))
    print(f"wrote {target / 'index.html'} and {len(full)} incident page{'s' if len(full) != 1 else ''}")
    return 0


# ---- --follow -------------------------------------------------------------------------------

def _follow(directory: str, args: argparse.Namespace) -> int:
    """Like `journalctl -f`: what exists now, then every open, recurrence and end as it happens."""
    from ..incidents import database_path

    seen: dict[int, tuple] = {}
    first = True
    try:
        while True:
            if database_path(directory).exists():
                rows = _read(directory, args)
                for row in reversed(rows):  # oldest first, like a log
                    key = (row["status"], row.get("recurrences") or 0, row.get("remediation_id"))
                    previous = seen.get(row["id"])
                    if previous != key:
                        _print_event(args, row, previous, initial=first)
                        seen[row["id"]] = key
                first = False
            sys.stdout.flush()
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return 0


def _print_event(args: argparse.Namespace, row: dict, previous: tuple | None, initial: bool) -> None:
    from ..incidents.views import as_json, when

    if previous is None:
        event = "exists" if initial else "opened"
    elif previous[0] != row["status"]:
        event = "ended" if row["status"] != "open" else "reopened"
    elif (row.get("recurrences") or 0) != previous[1]:
        event = "recurred"
    else:
        event = "remediating"
    if args.json:
        print_json({"event": event, "at": as_json({"at": time.time()})["at"], "incident": as_json(row)})
        return
    what = {
        "exists": f"{row['status']}",
        "opened": f"opened: {row['status']}",
        "ended": f"{previous[0] if previous else 'open'} → {row['status']}"
                 + (f": {row['outcome']}" if row.get("outcome") else ""),
        "reopened": "reopened",
        "recurred": f"recurred ({1 + (row.get('recurrences') or 0)}x)",
        "remediating": f"trying {row.get('remediation_id')}",
    }[event]
    stamp = when(time.time() if event != "exists" else row["started_at"])
    print(f"{stamp}  incident {row['id']:<4} {row['category']:<26} {what}"
          + (f"  [{row['rule_id']}]" if row.get("rule_id") and event in ("exists", "opened") else ""))


def render_incident(incident, colour: bool = False) -> str:
    """The text of `incidents show` (the demo prints it too)."""
    from ..incidents.views import render_incident as render

    return render(incident, colour=colour)


__all__ = ["register", "render_incident"]
