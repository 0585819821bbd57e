"""`ddtreed logs`: the supervised service's own stdout/stderr, like `journalctl -u`.

The files live in the config's `paths.log_dir` (`service.stdout.log`, `service.stderr.log`),
size-rotated by the daemon (`.1`, `.2`, …). `-n` shows the last lines, `-f` follows them through
rotation and truncation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from pathlib import Path

from .common import CliError, load_config, positive_int

STREAMS = {"stdout": "service.stdout.log", "stderr": "service.stderr.log"}
FOLLOW_POLL_S = 0.25


def register(commands) -> None:
    parser = commands.add_parser(
        "logs", help="the supervised service's stdout/stderr (tail, follow)",
        description="Show the supervised service's own output from the config's paths.log_dir. "
                    "With both streams, each line is prefixed with its stream.")
    parser.add_argument("--config", metavar="FILE", required=True,
                        help="ddtreed TOML config (its paths.log_dir holds the service's logs)")
    parser.add_argument("--lines", "-n", type=positive_int, default=50, metavar="N",
                        help="show the last N lines of each stream (default 50)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new lines (Ctrl-C stops)")
    parser.add_argument("--stream", choices=("both", "stdout", "stderr"), default="both",
                        help="which stream (default both)")
    parser.set_defaults(handler=run)


def _tail(path: Path, count: int) -> tuple[list[str], tuple[int, int]]:
    """The last `count` lines, and where they end (inode, offset): following starts exactly there,
    so a line written between the tail and the follow is neither lost nor shown twice."""
    try:
        with open(path, "rb") as handle:
            inode = os.fstat(handle.fileno()).st_ino
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 256 * 1024))  # the last lines live in the last 256 KiB
            data = handle.read(size - handle.tell())
    except FileNotFoundError:
        return [], (0, 0)
    complete = data[:data.rfind(b"\n") + 1]  # a line still being written is the follower's
    lines: deque[bytes] = deque(complete.splitlines(), maxlen=count)
    return [line.decode("utf-8", "replace") for line in lines], (inode, size - (len(data) - len(complete)))


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if config.service.remote:
        raise CliError(f"the service runs on {config.service.remote}: use `ddtreed fleet logs`", exit_code=2)
    directory = Path(config.paths.log_dir)
    if not directory.is_dir():
        raise CliError(f"{config.source}: paths.log_dir = {directory}: no such directory (has the daemon "
                       "started the service yet?)", exit_code=2)
    names = list(STREAMS) if args.stream == "both" else [args.stream]
    paths = {name: directory / STREAMS[name] for name in names}
    prefix = len(names) > 1
    position: dict[str, tuple[int, int]] = {}
    for name, path in paths.items():
        lines, position[name] = _tail(path, args.lines)
        for line in lines:
            _print(name, line, prefix)
    if not args.follow:
        missing = [str(path) for path in paths.values() if not path.exists()]
        if len(missing) == len(paths):
            print(f"ddtreed: no service logs yet in {directory}", file=sys.stderr)
        return 0
    sys.stdout.flush()
    return _follow(paths, position, prefix)


def _print(name: str, line: str, prefix: bool) -> None:
    print(f"{name}: {line}" if prefix else line)


def _follow(paths: dict[str, Path], position: dict[str, tuple[int, int]], prefix: bool) -> int:
    """Poll the files from where the tail ended; a new inode (rotation) or a shorter file
    (truncation) starts from its top."""
    pending = {name: b"" for name in paths}
    try:
        while True:
            for name, path in paths.items():
                try:
                    status = path.stat()
                except FileNotFoundError:
                    continue
                inode, offset = position[name]
                if status.st_ino != inode or status.st_size < offset:
                    inode, offset = status.st_ino, 0
                if status.st_size > offset:
                    with open(path, "rb") as handle:
                        handle.seek(offset)
                        data = pending[name] + handle.read(4 * 1024 * 1024)
                        offset = handle.tell()
                    *complete, pending[name] = data.split(b"\n")
                    for line in complete:
                        _print(name, line.decode("utf-8", "replace"), prefix)
                    sys.stdout.flush()
                position[name] = (inode, offset)
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        return 0
