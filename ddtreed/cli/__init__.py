"""`ddtreed` command line: a thin layer over library calls. Each command group is a module.

The command modules are imported lazily: `ddtreed X ...` imports only the module that registers
X (its parser and handler); the other commands get a placeholder parser carrying their one-line
help from `COMMANDS`, so `ddtreed --help` lists them all without importing any of them.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import help_text
from .common import CliError

# Every command, in the order `ddtreed --help` lists them: name, the module of ddtreed.cli that
# registers it (its `register(commands)`), and its one-line help (the same text that module
# passes as help=; tests/test_cli_start.py checks they agree).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("run", "run_cmd", "supervise the service named in a config (the daemon)"),
    ("demo", "run_cmd", "run the whole loop against the bundled demo service (about a minute)"),
    ("incidents", "incidents_cmd", "list recorded incidents (newest first); `show ID` for one"),
    ("diagnose", "diagnose_cmd", "diagnose crashes in SGLang log files (offline; nothing is applied)"),
    ("rules", "diagnose_cmd", "list, check and test rule files"),
    ("remediate", "remediate_cmd", "list, apply, revert and show remediations"),
    ("preflight", "preflight_cmd",
     "predict launch crashes from the config and the installed sglang (nothing is changed)"),
    ("canary", "canary_cmd", "golden outputs: record them, check the service against them, show the last run"),
    ("install", "service_cmd", "install the systemd unit, a config and directories"),
    ("status", "service_cmd", "the daemon's state, service, incidents at a glance"),
    ("logs", "logs_cmd", "the supervised service's stdout/stderr (tail, follow)"),
    ("fleet", "fleet_cmd", "run ddtreed commands on the hosts of an SSH inventory, in parallel"),
)
ALL = "*"  # build_parser(ALL): every command's real parser (tests, help checks)


def build_parser(command: str | None = ALL) -> argparse.ArgumentParser:
    """The `ddtreed` parser with the real parser of `command` (every command with ALL; none
    with None), the others as placeholders that only carry their one-line help."""
    parser = argparse.ArgumentParser(
        prog="ddtreed",
        description=(
            "Supervise an SGLang server, diagnose its crashes from the logs, apply a verified "
            "fix, restart and check it held. Start with `ddtreed demo`."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show the version and which decode-line reader is in use, and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = {module for name, module, _help in COMMANDS if command in (ALL, name)}
    registered: set[str] = set()
    for name, module, summary in COMMANDS:
        if module not in wanted:
            commands.add_parser(name, help=summary)
        elif module not in registered:  # a module registers all its commands, in table order
            # __import__, not importlib.import_module: the same import, but `-X importtime`
            # then shows the command module under ddtreed.cli (the benchmark reads that tree).
            __import__(f"{__name__}.{module}")
            sys.modules[f"{__name__}.{module}"].register(commands)
            registered.add(module)
    help_text.apply(parser)
    return parser


class _Version(argparse.Action):
    """`--version`, with the decode-line reader (native or python) found only when asked: loading
    the C extension is not part of `--help` or a command's start."""

    def __call__(self, parser, namespace, values, option_string=None):
        from .. import __version__
        from ..native import decode_reader

        sys.stdout.write(f"ddtreed {__version__} (decode lines read by {decode_reader()})\n")
        parser.exit()


def command_of(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is not an option (the top-level options,
    --help and --version, take no value); None when there is none."""
    for word in argv:
        if word == "--":
            continue
        if not word.startswith("-"):
            return word
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = command_of(argv)
    if command == "run":  # the long-running process: before anything imports structlog or hashlib
        from ..lean import lean_daemon_process

        lean_daemon_process()
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    if getattr(args, "configure_logs", True):
        from ..ops.logsetup import CURRENT_STDERR, configure

        # Logs go to stderr so that stdout stays clean for --json; `run` reconfigures for journald.
        # Commands that log nothing (`status`) set configure_logs=False: no structlog to import.
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
