"""The one rotation algorithm, on real files (LocalHost's operations)."""

import os

from ddtreed.service._proctree import LocalFiles
from ddtreed.service.rotation import rotate


def test_shift_keeps_at_most_the_configured_backups(tmp_path):
    log = tmp_path / "service.log"
    for text in ("one", "two", "three"):
        log.write_text(text)
        assert rotate(LocalFiles, str(log), 2, None, copy_truncate=False)
    assert not log.exists()
    assert (tmp_path / "service.log.1").read_text() == "three"
    assert (tmp_path / "service.log.2").read_text() == "two"
    assert not (tmp_path / "service.log.3").exists()


def test_small_or_missing_files_are_left_alone(tmp_path):
    log = tmp_path / "service.log"
    assert rotate(LocalFiles, str(log), 2, None, copy_truncate=False) is False
    log.write_text("12345")
    assert rotate(LocalFiles, str(log), 2, over_bytes=5, copy_truncate=False) is False
    assert log.read_text() == "12345"


def test_copy_truncate_keeps_the_writers_inode(tmp_path):
    log = tmp_path / "service.log"
    with open(log, "a") as writer:
        writer.write("before\n")
        writer.flush()
        inode = os.stat(log).st_ino
        assert rotate(LocalFiles, str(log), 1, None, copy_truncate=True)
        writer.write("after\n")
        writer.flush()
    assert os.stat(log).st_ino == inode
    assert log.read_text() == "after\n"
    assert (tmp_path / "service.log.1").read_text() == "before\n"


def test_no_backups_means_truncate_or_remove(tmp_path):
    log = tmp_path / "service.log"
    log.write_text("x")
    assert rotate(LocalFiles, str(log), 0, None, copy_truncate=True)
    assert log.read_text() == ""
    log.write_text("x")
    assert rotate(LocalFiles, str(log), 0, None, copy_truncate=False)
    assert not log.exists()
