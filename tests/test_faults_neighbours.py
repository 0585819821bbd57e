"""Issue 7.5: hostile neighbours around a real `ddtreed run`: the log dir deleted under it, a
long-running reader on its database, the service's port taken, its state dir on a full
filesystem. Each must be reported, the loop must go on, and it must recover once cleared."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import shutil
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, count, wait_for  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402
from ddtreed.service.host import LocalHost  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.paths import shipped  # noqa: E402
from ddtreed.remediation import Engine, load_remediations  # noqa: E402
from ddtreed.ops.status import read_status  # noqa: E402

pytestmark = pytest.mark.slow


def _healthy_service(directory: Path, crash_after: float, **options) -> tuple[Path, Path, int]:
    """A config whose engine is already patched: it serves, then crashes `crash_after` s after each start."""
    port = free_port()
    marks = directory / "service-events.txt"
    # policy off: every crash is recorded and the service relaunched as it is; fixes are not the point here.
    config = fast_service.write_config(directory, port=port, extra_args=(
        "--events", str(marks), "--crash-after", str(crash_after)), policy={"mode": "off"}, **options)
    state = Path(options.get("paths", {}).get("state_dir", directory / "state"))
    engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]))
    engine.apply(engine.plan("ddtree-verify-graph-width", site_packages=str(directory / "site-packages")))
    return config, marks, port


def _incidents(state: Path) -> list[dict]:
    with Store(database_path(state)) as store:
        return store.list_incidents(limit=100)


def _crashes_recorded(state: Path) -> int:
    """Incidents opened plus the recurrences recorded on them."""
    return sum(1 + (incident.get("recurrences") or 0) for incident in _incidents(state))


def _running(state: Path, daemon: DaemonProcess) -> bool:
    status = read_status(state)
    return status is not None and status.pid == daemon.pid and status.state == "running"


def test_log_dir_deleted_under_a_running_daemon(tmp_path):
    config, marks, _ = _healthy_service(tmp_path, crash_after=1.5)
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: _running(tmp_path / "state", daemon), 30, what="the service serving")
        shutil.rmtree(tmp_path / "logs")
        # The service still writes to its (now unlinked) files: the crash there is still found.
        wait_for(lambda: _incidents(tmp_path / "state"), 30, what="the crash in the deleted log to be recorded")
        wait_for(lambda: count(marks, "start") >= 2, 30, what="a relaunch")
        wait_for(lambda: (tmp_path / "logs" / "service.stderr.log").exists(), 10, what="fresh log files")
        # The same crash again: a recurrence of the open incident (one cause, one incident).
        wait_for(lambda: _crashes_recorded(tmp_path / "state") >= 2, 30, what="the next crash, in the new files")
    finally:
        assert daemon.stop() == 0
    assert daemon.has("log_file_missing")


def test_a_long_running_reader_does_not_block_incidents(tmp_path):
    config, marks, _ = _healthy_service(tmp_path, crash_after=1.0)
    state = tmp_path / "state"
    Store(database_path(state)).close()  # the database exists before the reader opens it
    reader = sqlite3.connect(database_path(state))
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM incidents").fetchone() == (0,)  # holds a read snapshot
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("incident_opened"), 30, what="an incident while a reader holds a snapshot")
        assert reader.execute("SELECT COUNT(*) FROM incidents").fetchone() == (0,)  # its snapshot is intact
    finally:
        reader.rollback()
        reader.close()
        assert daemon.stop() == 0
    assert _incidents(state)


def test_service_port_taken_by_another_process(tmp_path):
    config, marks, port = _healthy_service(tmp_path, crash_after=600.0)
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("service.waiting_release") or daemon.has("incident_opened"), 30,
                 what="the taken port to be noticed")
        squatter.close()
        wait_for(lambda: _running(tmp_path / "state", daemon), 60, what="the service serving once the port is free")
    finally:
        squatter.close()
        assert daemon.stop() == 0
    incidents = _incidents(tmp_path / "state")
    assert incidents and incidents[-1]["category"] == "port-in-use", [i["category"] for i in incidents]


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(directory: Path) -> Path:
    """Take every free byte of the filesystem: big writes first, then smaller, down to one byte."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle:
        size = 1 << 20
        while size:
            try:
                handle.write(b"\0" * size)
            except OSError:
                size //= 2
    return filler


def test_state_dir_on_a_full_filesystem(tmp_path, small_tmpfs):
    state = small_tmpfs / "state"
    config, marks, _ = _healthy_service(tmp_path, crash_after=1.5, paths={"state_dir": str(state)})
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: _running(state, daemon), 30, what="the service serving")
        filler = _fill(small_tmpfs)
        wait_for(lambda: count(marks, "exit") >= 1, 30, what="the service to crash on a full disk")
        wait_for(lambda: any(e.get("level") in ("error", "warning") and ("No space" in str(e) or "disk full" in str(e))
                             for e in daemon.events()), 30, what="the full disk to be reported")
        assert daemon.process.poll() is None, "the daemon died of a full state dir"
        filler.unlink()
        wait_for(lambda: _incidents(state), 30, what="the incident recorded once space is back")
    finally:
        assert daemon.stop() == 0
