"""Shared by the supervision tests: configs, free ports, polling with a deadline."""

from __future__ import annotations

import signal
import socket
import sys
import time
from pathlib import Path

from ddtreed.config import from_mapping

PROGRAMS = Path(__file__).parent / "programs"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def program(name: str, *args: object) -> list[str]:
    return [sys.executable, str(PROGRAMS / name), *map(str, args)]


def make_config(tmp_path: Path, argv: list[str], port: int | None = None, grace_s: float = 1.0,
                **paths: object):
    return from_mapping({
        "service": {"argv": argv, **({"port": port} if port else {})},
        "paths": {"log_dir": str(tmp_path / "logs"), "state_dir": str(tmp_path / "state"), **paths},
        "policy": {"stop_grace_s": grace_s},
    })


def wait_for(condition, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Poll `condition` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def ctrl_c_works() -> None:
    """In the child: Ctrl-C as in a terminal. A suite started in the background (`cmd &` in a
    script) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
