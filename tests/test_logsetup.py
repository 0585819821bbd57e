"""structlog setup, checked on what a real process writes to its stdout (a pipe, a file, a pty)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from ddtreed.ops import logsetup

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = """
import logging, structlog
from ddtreed.ops import logsetup
logsetup.configure({args})
log = structlog.get_logger("ddtreed.loop.daemon")
log.info("service_started", pid=41)
log.debug("follower_tick")
with logsetup.incident_context(12):
    log.warning("crash_detected", ranks=["TP0", "TP3"])
    with logsetup.incident_context(13):
        log.info("nested")
    log.info("back_in_12")
    try:
        raise RuntimeError("The size of tensor a (8) must match the size of tensor b (33)")
    except RuntimeError:
        log.exception("remediation_failed")
log.info("service_healthy", accept_length=3.4)
logsetup.bind_incident(14)
log.info("loop_bound")
logsetup.unbind_incident()
logging.getLogger("paramiko.transport").warning("Connected (version %s)", "2.0")
"""


def run_program(args: str = "", stdout=subprocess.PIPE, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(args=args)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60,
                          env=dict(os.environ, **(env or {})))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_json_lines_by_default_when_stdout_is_not_a_terminal():
    events = [json.loads(line) for line in run_program().splitlines()]
    assert [event["event"] for event in events] == [
        "service_started", "crash_detected", "nested", "back_in_12", "remediation_failed",
        "service_healthy", "loop_bound", "Connected (version 2.0)"]
    for event in events:
        stamp = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
        assert stamp.tzinfo is not None and stamp.utcoffset().total_seconds() == 0
        assert abs(stamp.timestamp() - time.time()) < 120
        assert list(event)[:3] == ["timestamp", "level", "event"]
    by_name = {event["event"]: event for event in events}
    assert by_name["service_started"] == {**by_name["service_started"], "level": "info", "pid": 41}


def test_every_line_inside_an_incident_carries_its_id():
    events = {e["event"]: e for e in map(json.loads, run_program().splitlines())}
    assert "incident_id" not in events["service_started"]
    assert events["crash_detected"]["incident_id"] == 12
    assert events["nested"]["incident_id"] == 13
    assert events["back_in_12"]["incident_id"] == 12
    failed = events["remediation_failed"]
    assert failed["incident_id"] == 12 and failed["level"] == "error"
    assert "RuntimeError: The size of tensor a (8)" in failed["exception"]
    assert "incident_id" not in events["service_healthy"]
    assert events["loop_bound"]["incident_id"] == 14
    assert "incident_id" not in events["Connected (version 2.0)"]


def test_library_logs_come_out_the_same_way():
    events = [json.loads(line) for line in run_program().splitlines()]
    library = events[-1]
    assert library["logger"] == "paramiko.transport" and library["level"] == "warning"


def test_level_filters_and_debug_shows_more():
    assert "follower_tick" not in run_program()
    assert "follower_tick" in run_program("level='debug'")
    assert "service_started" not in run_program("level='warning'")


def test_unknown_level_is_a_clear_error():
    with pytest.raises(ValueError, match="log level must be one of"):
        logsetup.configure(level="loud")


def test_journald_gets_a_syslog_priority_prefix(tmp_path):
    """With stdout connected to the journal (JOURNAL_STREAM = its dev:inode), lines start <N>."""
    target = tmp_path / "journal-stand-in"
    with open(target, "w") as handle:
        info = os.fstat(handle.fileno())
        run_program(stdout=handle, env={"JOURNAL_STREAM": f"{info.st_dev}:{info.st_ino}"})
    lines = target.read_text().splitlines()
    assert lines[0].startswith('<6>{"timestamp"') and json.loads(lines[0][3:])["event"] == "service_started"
    assert lines[1].startswith("<4>") and lines[4].startswith("<3>")


def test_a_journal_stream_for_another_file_adds_no_prefix(tmp_path):
    target = tmp_path / "plain"
    with open(target, "w") as handle:
        run_program(stdout=handle, env={"JOURNAL_STREAM": "1:1"})
    assert target.read_text().startswith('{"timestamp"')


def test_a_terminal_gets_human_readable_lines():
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", PROGRAM.format(args="")], stdout=terminal,
                               stderr=subprocess.PIPE, cwd=ROOT)
    os.close(terminal)
    output = _read_until_closed(controller, deadline=time.monotonic() + 60)
    assert process.wait(timeout=60) == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", output.decode(errors="replace"))
    assert "service_started" in text and "pid=41" in text and "incident_id=12" in text
    assert not any(line.lstrip().startswith("{") for line in text.splitlines())


def _read_until_closed(fd: int, deadline: float) -> bytes:
    chunks = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)
