"""Item 6 of issue 16: log paths are never followed through symlinks and a FIFO in place of a log
neither blocks nor spins. Each hostile entry (tests/faults/hostile.py) is one case."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hostile import (
    HOSTILE_LOG_FILES,
    DaemonProcess,
    fifo,
    service_config,
    symlink_out,
    wait_for,
)
from structlog.testing import capture_logs

from ddtreed.service import rotation
from ddtreed.logs import Follower
from ddtreed.ops.status import read_status

WATCH_S = 3.0


@pytest.mark.parametrize("hostile", sorted(HOSTILE_LOG_FILES))
def test_item06_follower_refuses_a_hostile_entry_once_and_keeps_following_the_others(tmp_path, hostile):
    planted = HOSTILE_LOG_FILES[hostile](tmp_path / "logs" / "bad.log", tmp_path / "outside")
    good = tmp_path / "logs" / "good.log"
    good.write_text("")
    wakeups = lines = 0
    with capture_logs() as events, Follower([str(planted.path), str(good)]) as follower:
        deadline = time.monotonic() + WATCH_S
        written = 0
        while time.monotonic() < deadline:
            if written < 5:
                with open(good, "a") as handle:
                    handle.write(f"line {written}\n")
                written += 1
            wakeups += follower.wait(0.2)
            for chunk in follower.read():
                assert chunk.source == str(good), chunk  # nothing is read through the hostile entry
                lines += len(chunk.lines)
    warnings = [e for e in events if e["log_level"] == "warning"]
    assert [e["event"] for e in warnings] == ["log_file_refused"], warnings
    assert lines == 5
    # A spinning follower wakes tens of thousands of times here; a calm one about once per write.
    assert wakeups <= 5 + 10, wakeups
    if planted.outside is not None:
        assert planted.outside.read_bytes() == planted.outside_bytes


def test_item06_a_regular_file_replacing_a_refused_entry_is_followed(tmp_path):
    planted = fifo(tmp_path / "logs" / "x.log")
    with capture_logs() as events, Follower([str(planted.path)]) as follower:
        assert follower.read() == []
        planted.path.unlink()
        planted.path.write_text("hello\n")
        wait_for(lambda: follower.wait(0.1) or True, 5)
        chunks = wait_for(follower.read, 5, what="the new regular file's line")
    assert chunks[0].lines == ("hello",)
    assert [e["event"] for e in events if e["log_level"] == "warning"] == ["log_file_refused"]


@pytest.mark.parametrize("copy_truncate", [True, False], ids=["running", "start"])
def test_item06_rotation_never_reads_or_truncates_through_a_symlink(tmp_path, copy_truncate):
    planted = symlink_out(tmp_path / "logs" / "service.stdout.log", tmp_path / "outside")
    with capture_logs() as events:
        for _ in range(3):  # three size checks: one warning
            rotation.rotate(rotation.LocalFiles, str(planted.path), 2, over_bytes=10, copy_truncate=copy_truncate)
    assert planted.outside.read_bytes() == planted.outside_bytes
    warned = [e["event"] for e in events if e["log_level"] == "warning"]
    if copy_truncate:
        assert warned == ["log_rotation_refused"]
        assert planted.path.is_symlink() and not Path(f"{planted.path}.1").exists()
    else:  # before a start the link itself is moved aside: the service gets a fresh regular file
        assert warned == ["log_moved_aside"]
        assert not planted.path.exists() and Path(f"{planted.path}.1").is_symlink()


def test_item06_a_link_planted_at_path_1_is_replaced_not_written_through(tmp_path):
    log_path = tmp_path / "logs" / "service.stdout.log"
    log_path.parent.mkdir()
    log_path.write_bytes(b"x" * 100)
    planted = symlink_out(Path(f"{log_path}.1"), tmp_path / "outside")
    assert rotation.rotate(rotation.LocalFiles, str(log_path), 1, over_bytes=10, copy_truncate=True)
    assert planted.outside.read_bytes() == planted.outside_bytes
    assert Path(f"{log_path}.1").read_bytes() == b"x" * 100 and log_path.stat().st_size == 0


def _running(state_dir: Path, daemon: DaemonProcess) -> bool:
    status = read_status(state_dir)
    return status is not None and status.pid == daemon.pid and status.state == "running"


@pytest.mark.slow
def test_item06_a_symlink_planted_at_a_live_service_log_leaves_its_target_untouched(tmp_path):
    """The size check runs every 5 s while the service serves; the link points at a big file."""
    config = service_config(tmp_path / "run", extra_args=("--disable-cuda-graph",),
                            paths={"log_max_bytes": 1000})
    state_dir, log_dir = tmp_path / "run" / "state", tmp_path / "run" / "logs"
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: _running(state_dir, daemon), 60, what="the service to serve")
        planted = symlink_out(log_dir / "service.stdout.log", tmp_path / "outside")
        wait_for(lambda: daemon.has("log_rotation_refused") or planted.outside.read_bytes() != planted.outside_bytes,
                 60, what="the next size check of the logs")
        assert planted.outside.read_bytes() == planted.outside_bytes
        time.sleep(11)  # two more size checks: still one warning (absence can only be waited for)
        assert len(daemon.events("log_rotation_refused")) == 1
        assert planted.outside.read_bytes() == planted.outside_bytes
        assert daemon.process.poll() is None and _running(state_dir, daemon)
    finally:
        assert daemon.stop() == 0
    assert planted.outside.read_bytes() == planted.outside_bytes


@pytest.mark.slow
@pytest.mark.parametrize("hostile", sorted(HOSTILE_LOG_FILES))
def test_item06_a_hostile_entry_at_a_service_log_before_start_is_moved_aside(tmp_path, hostile):
    """Before: a FIFO blocked the spawn forever; a link was appended through."""
    config = service_config(tmp_path / "run", extra_args=("--disable-cuda-graph",))
    state_dir, log_dir = tmp_path / "run" / "state", tmp_path / "run" / "logs"
    planted = HOSTILE_LOG_FILES[hostile](log_dir / "service.stderr.log", tmp_path / "outside")
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: _running(state_dir, daemon), 60, what="the service to serve")
        assert daemon.has("log_moved_aside")
        stderr_log = log_dir / "service.stderr.log"
        assert stderr_log.is_file() and not stderr_log.is_symlink()
        assert b"Load weight begin" in stderr_log.read_bytes()
    finally:
        assert daemon.stop() == 0
    if planted.outside is not None:
        assert planted.outside.read_bytes() == planted.outside_bytes
    assert os.path.lexists(f"{planted.path}.1")
