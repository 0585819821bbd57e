"""Real second processes against the same database: readers, writers, locks, a full disk."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import uuid

import pytest
from test_incidents_support import Holder, founding_crashes, record_founding

from ddtreed.incidents import MIGRATIONS, Store, StoreError, database_path

pytestmark = pytest.mark.slow


@pytest.fixture
def path(tmp_path):
    path = database_path(tmp_path / "state")
    with Store(path) as store:
        record_founding(store)
    return path


def test_writes_proceed_while_another_process_holds_a_read_transaction(path):
    reader = Holder(path, "read")
    try:
        assert reader.rows == 1
        started = time.monotonic()
        with Store(path, busy_timeout_s=1.0) as store:
            for _ in range(50):
                incident_id = store.open_incident("crash", founding_crashes(2))
                store.add_step(incident_id, "diagnosed", "while a reader holds its snapshot")
        elapsed = time.monotonic() - started
        assert elapsed < 10.0, f"50 incidents took {elapsed:.1f} s beside a reader"
        # The reader's snapshot still shows the one incident it started with (WAL isolation).
        assert reader.release() == "still 1\n"
    finally:
        reader.kill()
    with Store(path, create=False) as store:
        assert len(store.list_incidents(limit=100)) == 51


def test_the_cli_reads_while_the_daemon_holds_a_write_transaction(path):
    writer = Holder(path, "write")  # an uncommitted insert, the write lock held
    try:
        done = subprocess.run([sys.executable, "-m", "ddtreed", "incidents", "--json",
                               "--state-dir", str(path.parent)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert '"category": "cuda-graph-shape-mismatch"' in done.stdout
        assert "uncommitted" not in done.stdout
    finally:
        writer.release()
        writer.kill()


def test_a_held_write_lock_is_a_clear_error_then_the_write_succeeds(path):
    with Store(path, busy_timeout_s=0.3) as store:
        incident_id = store.list_incidents()[0]["id"]
        writer = Holder(path, "write")
        try:
            started = time.monotonic()
            with pytest.raises(StoreError) as error:
                store.add_step(incident_id, "verified", "the lock is taken")
            waited = time.monotonic() - started
            assert error.value.reason == "locked" and error.value.retryable
            assert "locked by another connection" in str(error.value) and str(path) in str(error.value)
            assert 0.25 <= waited < 5.0
        finally:
            writer.release()
            writer.kill()
        store.add_step(incident_id, "verified", "after the lock was released")
        assert store.get(incident_id)["steps"][-1]["detail"] == "after the lock was released"


def test_an_exclusive_locking_mode_connection_blocks_readers_clearly(path):
    holder = Holder(path, "exclusive-mode")
    try:
        with pytest.raises(StoreError) as error:
            with Store(path, busy_timeout_s=0.3, create=False) as store:
                store.list_incidents()
        assert error.value.reason == "locked"
    finally:
        holder.release()
        holder.kill()
    with Store(path, busy_timeout_s=0.3, create=False) as store:
        assert len(store.list_incidents()) == 1


WRITER = r"""
import sys
from ddtreed.incidents import Store
with Store(sys.argv[1], busy_timeout_s=10.0) as store:
    for n in range(int(sys.argv[3])):
        store.add_step(1, "reconciled", f"{sys.argv[2]} {n}")
"""


def test_two_writer_processes_both_land_every_step(path):
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, "40"])
               for name in ("daemon", "cli")]
    for writer in writers:
        assert writer.wait(timeout=60) == 0
    with Store(path, create=False) as store:
        details = [s["detail"] for s in store.get(1)["steps"] if s["step"] == "reconciled"]
    assert sorted(details) == sorted(f"{name} {n}" for name in ("daemon", "cli") for n in range(40))


def test_processes_opening_a_fresh_database_together_migrate_it_once(tmp_path):
    path = database_path(tmp_path / "fresh")
    opener = "import sys; from ddtreed.incidents import Store; Store(sys.argv[1]).close()"
    processes = [subprocess.Popen([sys.executable, "-c", opener, str(path)]) for _ in range(4)]
    assert all(process.wait(timeout=60) == 0 for process in processes)
    with Store(path, create=False) as store:
        names = [row["name"] for row in store.db.query("SELECT name FROM _migrations")]
    assert len(names) == len(set(names)) == len(MIGRATIONS)


def test_opening_waits_for_a_writer_of_a_rollback_journal_database(tmp_path):
    """SQLite does not run the busy handler for the switch to WAL: a writer holding a rollback
    journal's lock (another process creating the file, an old database) made the open fail at once
    with "waited 5 s" (CI, four processes opening a fresh database). The open waits its timeout."""
    import sqlite3
    import threading

    path = database_path(tmp_path / "old")
    path.parent.mkdir(mode=0o700)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("CREATE TABLE other (x)")
    writer.execute("BEGIN IMMEDIATE")  # RESERVED lock of a rollback-journal database
    writer.execute("INSERT INTO other VALUES (1)")
    outcome: list[object] = []

    def open_store() -> None:
        try:
            with Store(path, busy_timeout_s=10.0) as store:
                outcome.append(store.db.journal_mode)
        except StoreError as error:
            outcome.append(error)

    opener = threading.Thread(target=open_store)
    opener.start()
    opener.join(timeout=1.0)
    assert opener.is_alive() and outcome == [], f"gave up while the writer held it: {outcome}"
    writer.execute("COMMIT")
    writer.close()
    opener.join(timeout=30)
    assert outcome == ["wal"]


@pytest.fixture
def small_filesystem(tmp_path):
    """A 1 MiB tmpfs of our own; skipped (with the reason) where mounting is not allowed."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755",
                           f"ddtreed-test-{uuid.uuid4().hex[:8]}", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(directory) -> str:
    """Write a file until the filesystem says ENOSPC; return its path."""
    filler = os.path.join(directory, "filler")
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(descriptor, b"\0" * 4096)
    except OSError as error:
        assert error.errno == errno.ENOSPC, error
    finally:
        os.close(descriptor)
    return filler


def test_a_full_filesystem_is_a_clear_error_and_nothing_recorded_is_lost(small_filesystem):
    path = database_path(small_filesystem / "state")
    with Store(path) as store:
        first = record_founding(store)
        filler = fill(small_filesystem)
        big = "x" * 200_000  # needs new pages: the WAL has to grow
        with pytest.raises(StoreError) as error:
            store.add_step(first, "reconciled", big)
        assert error.value.reason == "full" and error.value.retryable
        assert "disk full" in str(error.value) and str(path) in str(error.value)
        with Store(path, create=False) as reader:
            assert reader.get(first)["status"] == "resolved"
            assert [s["step"] for s in reader.get(first)["steps"]][-1] == "healthy"
        os.unlink(filler)
        store.add_step(first, "reconciled", big)  # the same connection recovers
    with Store(path, create=False) as store:
        assert store.get(first)["steps"][-1]["detail"] == big
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
