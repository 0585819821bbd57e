"""The status snapshot is written without fsync: what a reader and a power cut can see."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from ddtreed.ops.status import DaemonStatus, read_status, status_path, write_status

REPO = Path(__file__).resolve().parent.parent


def test_snapshot_replaced_whole_with_mode_0600_and_no_temp_left(tmp_path):
    write_status(tmp_path, DaemonStatus(pid=os.getpid(), state="starting", status_text="starting"))
    write_status(tmp_path, DaemonStatus(pid=os.getpid(), state="running", status_text="serving"))
    assert read_status(tmp_path).state == "running"
    assert stat.S_IMODE(os.stat(status_path(tmp_path)).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [status_path(tmp_path).name]


def test_empty_snapshot_after_a_power_cut_reads_as_no_daemon(tmp_path):
    # Unsynced data lost, the rename kept (file systems without rename ordering): an empty file.
    status_path(tmp_path).write_bytes(b"")
    assert read_status(tmp_path) is None
    done = subprocess.run([sys.executable, "-m", "ddtreed", "status", "--state-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr  # not running, and no error line
    assert "error" not in done.stderr
