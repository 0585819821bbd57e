"""DurableStore on real SQLite files: a corrupt, deleted or replaced database never stops the loop."""

from __future__ import annotations

import os
import sqlite3
import threading

import sqlite_utils

from ddtreed.incidents import Store, database_path
from ddtreed.incidents.durable import DurableStore, open_store


def _durable(tmp_path) -> DurableStore:
    return DurableStore(Store(database_path(tmp_path)), wait=lambda seconds: None)


def test_item08_a_database_corrupted_in_place_is_moved_aside_and_a_fresh_one_used(tmp_path):
    store = _durable(tmp_path)
    first = store.open_incident("crash", message="before")
    path = database_path(tmp_path)
    store.current.close()
    with open(path, "r+b") as handle:  # the header and first pages overwritten, same inode
        handle.write(b"\x00garbage" * 4096)
    store.current = _reopen_broken(path)  # what the loop holds: a connection on the broken file
    second = store.open_incident("crash", message="after")
    assert store.replaced == 1
    assert [i["message"] for i in store.list_incidents()] == ["after"]
    assert second == 1 and first == 1  # a fresh database numbers from 1 again
    assert [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert store.add_step(99, "diagnosed", "of an incident the old file had") is None  # lost, not fatal


def _reopen_broken(path):
    """A Store object whose connection points at a file that is no longer a database."""
    store = Store.__new__(Store)  # Store(path) itself would refuse the file at open
    store.path = path
    store.busy_timeout_s = 1.0
    store._lock = threading.RLock()
    store.db = sqlite_utils.Database(sqlite3.connect(str(path), isolation_level=None, check_same_thread=False))
    return store


def test_item08_a_deleted_database_is_noticed_and_reopened_not_written_into_the_unlinked_file(tmp_path):
    store = _durable(tmp_path)
    store.open_incident("crash", message="before")
    path = database_path(tmp_path)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.unlink(f"{path}{suffix}")
    store.open_incident("crash", message="after")
    assert path.exists()
    assert [i["message"] for i in Store(path).list_incidents()] == ["after"]


def test_item08_a_corrupt_database_at_start_is_moved_aside(tmp_path):
    path = database_path(tmp_path)
    path.write_bytes(b"not sqlite" * 100)
    store = open_store(path)
    assert store.list_incidents() == []
    [aside] = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert aside.read_bytes().startswith(b"not sqlite")
