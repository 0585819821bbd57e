"""`ddtreed` command line: a thin layer over library calls. Each command group is a module."""

from __future__ import annotations

import argparse
import os
import sys

from . import (
    canary_cmd,
    diagnose_cmd,
    fleet_cmd,
    help_text,
    incidents_cmd,
    logs_cmd,
    preflight_cmd,
    remediate_cmd,
    run_cmd,
    service_cmd,
)
from .common import CliError

_GROUPS = (run_cmd, incidents_cmd, diagnose_cmd, remediate_cmd, preflight_cmd, canary_cmd,
           service_cmd, logs_cmd, fleet_cmd)


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
    help_text.apply(parser)
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
        message, code = _with_config_key(args, error) or (str(error), error.exit_code)
        print(f"ddtreed: error: {message}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `ddtreed incidents | head`: the reader left, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:  # spawn ENOENT/EACCES, a log or state dir: one line, never a traceback
        message, code = _with_config_key(args, error) or (_plain(error), 2)
        print(f"ddtreed: error: {message}", file=sys.stderr)
        return code


def _with_config_key(args: argparse.Namespace, error: BaseException) -> tuple[str, int] | None:
    """An OS failure behind `error` as `CONFIG: KEY = PATH: reason`, exit 2 (None: not one)."""
    from .startup_errors import EXIT_OS_ERROR, describe, find_os_cause

    cause = find_os_cause(error)
    path = getattr(args, "config", None)
    if cause is None or not path:
        return None
    try:
        from ..config import load

        config = load(path)
        if getattr(args, "state_dir", None):
            config = config.with_state_dir(args.state_dir)
    except Exception:  # noqa: BLE001 - the config already loaded once; never mask the first error
        return None
    message = describe(cause, config)
    return (message, EXIT_OS_ERROR) if message else None


def _plain(error: OSError) -> str:
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"


if __name__ == "__main__":
    sys.exit(main())
