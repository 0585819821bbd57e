"""`ddtreed incidents` (the list) and `ddtreed incidents show ID` (one incident's story)."""

from __future__ import annotations

import argparse
import contextlib
import sys

from ..incidents import Store, StoreError, database_path
from ..incidents.views import TABLE_HEADERS, as_json, render_incident, table_rows
from ..records import INCIDENT_STATUSES
from .common import (CliError, add_config, add_json, add_state_dir, load_config, positive_int, print_json,
                     state_dir, table)

__all__ = ["register", "render_incident"]


def register(commands) -> None:
    parser = commands.add_parser(
        "incidents", help="list recorded incidents (newest first); `show ID` for one",
        description="List the incidents ddtreed recorded, newest first. "
                    "`ddtreed incidents show ID` prints one incident in full.")
    add_state_dir(parser)
    add_config(parser)
    add_json(parser)
    parser.add_argument("--status", choices=INCIDENT_STATUSES, help="only incidents in this status")
    parser.add_argument("--limit", type=positive_int, default=50, metavar="N",
                        help="at most N incidents (default 50)")
    parser.set_defaults(handler=_list)
    sub = parser.add_subparsers(dest="incidents_command", metavar="show")
    show = sub.add_parser("show", help="one incident: diagnosis, tracebacks, steps, remediation",
                          description="Print one incident: diagnosis, params, tracebacks per rank, "
                                      "each step with its time, the remediation and patch hashes.")
    show.add_argument("incident_id", type=int, metavar="ID")
    # Defaults SUPPRESSed: `incidents --state-dir D show 3` keeps the value given before `show`.
    show.add_argument("--state-dir", metavar="DIR", default=argparse.SUPPRESS,
                      help="state directory holding incidents.sqlite3 (as for `ddtreed incidents`)")
    show.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                      help="ddtreed TOML config whose paths.state_dir to read")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                      help="machine-readable JSON output")
    show.set_defaults(handler=_show)


def _directory(args: argparse.Namespace) -> str:
    """--state-dir, else the config's paths.state_dir, else the default."""
    return state_dir(args, load_config(getattr(args, "config", None)))


def _open(directory: str) -> Store:
    try:
        # Opening may apply a pending migration, which logs; unconfigured structlog prints to
        # stdout, and stdout here is the JSON scripts parse.
        with contextlib.redirect_stdout(sys.stderr):
            return Store(database_path(directory), create=False)
    except StoreError as error:
        raise CliError(str(error)) from None


def _list(args: argparse.Namespace) -> int:
    directory = _directory(args)
    if not database_path(directory).exists():
        # Not an error: a fresh install has recorded nothing; scripts get an empty list.
        if args.json:
            print_json([])
        else:
            print(f"no incidents recorded yet in {directory}")
        return 0
    with _open(directory) as store:
        try:
            incidents = store.list_incidents(limit=args.limit, status=args.status)
        except StoreError as error:
            raise CliError(str(error)) from None
    if args.json:
        print_json(as_json(incidents))
    elif not incidents:
        print(f"no {args.status + ' ' if args.status else ''}incidents in {directory}")
    else:
        print(table(table_rows(incidents), TABLE_HEADERS))
    return 0


def _show(args: argparse.Namespace) -> int:
    directory = _directory(args)
    with _open(directory) as store:
        try:
            incident = store.get(args.incident_id)
        except StoreError as error:
            if error.reason == "missing":
                raise CliError(f"no incident {args.incident_id} in {store.path}") from None
            raise CliError(str(error)) from None
    if getattr(args, "json", False):
        print_json(as_json(incident))
    else:
        print(render_incident(incident))
    return 0
