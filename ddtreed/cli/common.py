"""Helpers every command shares: --state-dir, --json, --config, one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the readers start fast)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_STATE_DIR = os.environ.get("DDTREED_STATE_DIR", "/var/lib/ddtreed")


class CliError(Exception):
    """Printed as one line `ddtreed: error: …` with a non-zero exit code."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def positive_int(text: str) -> int:
    """argparse type for counts (`--limit`, `--lines`, `--concurrency`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir", metavar="DIR", default=None,
        help=f"state directory holding incidents.sqlite3 (default: the config's paths.state_dir, "
             f"else $DDTREED_STATE_DIR, else {DEFAULT_STATE_DIR})",
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable JSON output")


def add_config(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument("--config", metavar="FILE", required=required,
                        help="ddtreed TOML config (see ddtreed/data/examples/founding-ddtree-tp8.toml)")


def load_config(path: str | None):
    """The config at `path`, or None; a bad config is a CliError with exit code 2."""
    if path is None:
        return None
    from ..config import ConfigError, load

    try:
        return load(path)
    except ConfigError as error:
        raise CliError(str(error), exit_code=2) from None


def state_dir(args: argparse.Namespace, config: Any = None) -> str:
    if getattr(args, "state_dir", None):
        return args.state_dir
    if config is not None:
        return config.paths.state_dir
    return DEFAULT_STATE_DIR


def require_state_dir(directory: str) -> str:
    """`directory` when it exists; a missing one is a one-line error (exit 2), not "nothing yet"."""
    if not os.path.isdir(directory):
        what = "not a directory" if os.path.exists(directory) else "no such directory"
        raise CliError(f"{directory}: {what} (the state directory is the one that holds "
                       f"incidents.sqlite3: the config's paths.state_dir)", exit_code=2)
    return directory


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=None, sort_keys=False, default=str)
    sys.stdout.write("\n")


def table(rows: list[list[str]], headers: list[str],
          colour: Callable[[int, str, str], str] | None = None) -> str:
    """A fixed-width table; `colour(column, padded text, value)` paints cells (a terminal only:
    the caller decides), after padding, so escape codes never shift the columns."""
    cells = [headers] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str], paint: bool) -> str:
        parts = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        if paint and colour is not None:
            parts = [colour(i, part, row[i]) for i, part in enumerate(parts)]
        return "  ".join(parts).rstrip()

    lines = [line(row, index > 0) for index, row in enumerate(cells)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
