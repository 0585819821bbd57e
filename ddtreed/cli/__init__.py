"""`ddtreed` command line: a thin layer over library calls. Each command group is a module."""

from __future__ import annotations

import argparse
import os
import sys

from . import (
    canary_cmd,
    diagnose_cmd,
    fleet_cmd,
    incidents_cmd,
    preflight_cmd,
    remediate_cmd,
    run_cmd,
    service_cmd,
)
from .common import CliError

_GROUPS = (run_cmd, incidents_cmd, diagnose_cmd, remediate_cmd, preflight_cmd, canary_cmd,
           service_cmd, fleet_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ddtreed",
        description=(
            "Supervise an SGLang server, diagnose its crashes from the logs, apply a verified "
            "fix, restart and check it held. Start with `ddtreed demo`."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"ddtreed {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in _GROUPS:
        group.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from ..logsetup import CURRENT_STDERR, configure

    # Logs go to stderr so that stdout stays clean for --json; `run` reconfigures for journald.
    configure(json_output=False, level="warning", stream=CURRENT_STDERR)
    try:
        return int(args.handler(args) or 0)
    except CliError as error:
        print(f"ddtreed: error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `ddtreed incidents | head`: the reader left, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
