"""The follower goes by what inotify says: a file only written to is read without looking at its
path again (no stat), anything else (a rename, a deletion, a directory replaced) makes the next read
look at every path; what no event tells (a directory above ours renamed, a write through another
link, a rewrite to the same size) is still found, by the read itself or by the periodic look."""

from __future__ import annotations

import os
import shutil
import time

from ddtreed.logs import Follower

CALM = b"[2026-07-28 10:00:00 TP0] Decode batch, #running-req: 4, accept len: 3.10\n"


def lines_of(chunks):
    return [line for chunk in chunks for line in chunk.lines]


def append(path, data: bytes):
    with open(path, "ab") as handle:
        handle.write(data)


def read_until(follower, predicate, deadline_s=10.0):
    seen = []
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        seen += lines_of(follower.read())
        if predicate(seen):
            return seen
        follower.wait(0.05)
    raise AssertionError(f"condition not met within {deadline_s}s; read {seen[-5:]}")


def test_writes_are_read_without_looking_again_a_rename_makes_the_next_read_look(tmp_path):
    out, err = str(tmp_path / "out.log"), str(tmp_path / "err.log")
    append(out, b"")
    append(err, b"")
    with Follower([out, err], poll_interval_s=3600.0) as follower:
        follower.read()
        assert follower.looks == 1  # the first read looks at every path
        for number in range(20):
            append(out if number % 2 else err, b"line %d\n" % number)
            assert follower.wait(10.0) is True
            assert lines_of(follower.read()) == ["line %d" % number]
        assert follower.looks == 1  # twenty reads of writes: no path looked at again
        os.rename(out, out + ".1")
        append(out, b"new file\n")
        assert follower.wait(10.0) is True
        assert lines_of(follower.read()) == ["new file"]
        assert follower.looks == 2


def test_a_rewrite_to_the_same_size_between_reads_starts_over(tmp_path):
    path = str(tmp_path / "service.log")
    append(path, b"[2026-07-28 10:00:00] aaaa\n")
    with Follower([path], poll_interval_s=3600.0) as follower:
        assert lines_of(follower.read()) == ["[2026-07-28 10:00:00] aaaa"]
        with open(path, "r+b") as handle:  # copytruncate and regrowth to exactly our offset...
            handle.truncate(0)
            handle.write(b"[2026-07-28 11:11:11] bbbb\n")
        append(path, b"more\n")  # ...then one line more
        assert lines_of(follower.read()) == ["[2026-07-28 11:11:11] bbbb", "more"]
        assert follower.looks == 1  # found by the read itself, with only writes said


def test_a_directory_above_renamed_and_made_again_is_found(tmp_path):
    """Renaming a directory above the watched one sends no event about our directory."""
    above = tmp_path / "run"
    (above / "logs").mkdir(parents=True)
    path = str(above / "logs" / "service.log")
    append(path, b"before\n")
    with Follower([path], poll_interval_s=0.05) as follower:
        assert lines_of(follower.read()) == ["before"]
        above.rename(tmp_path / "run.old")
        (above / "logs").mkdir(parents=True)
        append(path, b"after\n")
        assert read_until(follower, lambda seen: "after" in seen)[-1] == "after"
        append(path, b"watched again\n")  # the new directory is watched: its writes wake us
        assert follower.wait(10.0) is True
        assert read_until(follower, lambda seen: "watched again" in seen)[-1] == "watched again"


def test_a_write_through_another_link_is_read(tmp_path):
    """A writer that opened the file by a link in another directory: no event in ours."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    path = str(tmp_path / "logs" / "service.log")
    link = str(tmp_path / "elsewhere" / "service.log")
    append(path, CALM)
    os.link(path, link)
    with Follower([path], poll_interval_s=0.05) as follower:
        assert len(lines_of(follower.read())) == 1
        append(link, b"through the link\n")
        assert read_until(follower, lambda seen: "through the link" in seen) == ["through the link"]


def test_directory_deleted_while_only_writes_were_said_polls_then_watches_again(tmp_path):
    directory = tmp_path / "logs"
    directory.mkdir()
    path = str(directory / "service.log")
    append(path, b"one\n")
    with Follower([path], poll_interval_s=0.05) as follower:
        assert lines_of(follower.read()) == ["one"]
        append(path, b"two\n")
        assert follower.wait(10.0) is True
        shutil.rmtree(directory)  # after wait() took the write's event, before the read
        assert lines_of(follower.read()) == ["two"]  # the open file still has it
        directory.mkdir()
        append(path, b"three\n")
        assert read_until(follower, lambda seen: "three" in seen) == ["three"]


def test_a_read_cut_at_its_budget_goes_on_with_the_next_read_without_a_new_event(tmp_path):
    path = str(tmp_path / "service.log")
    append(path, b"")
    with Follower([path], poll_interval_s=3600.0, max_bytes_per_read=64 * 1024) as follower:
        follower.read()
        append(path, b"".join(b"line %d\n" % number for number in range(100_000)))
        assert follower.wait(10.0) is True
        lines, reads = [], 0
        while len(lines) < 100_000:
            read = lines_of(follower.read())
            assert read, f"a read after {len(lines)} lines found nothing"
            lines += read
            reads += 1
        assert lines == ["line %d" % number for number in range(100_000)] and reads > 1
        assert follower.looks == 1


def test_an_unfinished_line_read_before_a_copytruncate_is_still_a_line(tmp_path):
    # The service's last words without a newline ("Fatal Python error: Aborted" then a dying
    # process), then logrotate's copytruncate: the follower read them already; they are a line, as
    # at a rename rotation, not dropped with the old content (the fast read and the periodic look).
    for look in (False, True):
        path = str(tmp_path / f"service-{look}.log")
        append(path, CALM + b"Fatal Python error: Aborted")
        with Follower([path]) as follower:
            assert lines_of(follower.read()) == [CALM.decode().rstrip("\n")]
            shutil.copy(path, path + ".1")
            os.truncate(path, 0)
            append(path, CALM)
            if look:
                os.rename(path, path + ".moving")  # away and back: the same file, but the next read
                os.rename(path + ".moving", path)  # looks at every path (lstat) instead of a pread
            seen = read_until(follower, lambda lines: CALM.decode().rstrip("\n") in lines)
            assert seen == ["Fatal Python error: Aborted", CALM.decode().rstrip("\n")]


def test_a_service_that_keeps_writing_after_a_create_rotation_is_still_read(tmp_path):
    # logrotate's default `create`: the log renamed, a new empty file made at its path. A service
    # that never reopens its log (SGLang: its stdout is the file ddtreed opened for it) writes on
    # into the renamed file; its crash must still be read, not lost to the follower switching to
    # the empty new file. Once the new file is written to (a writer that reopens), that one is
    # followed, after the old one's last lines.
    path = str(tmp_path / "service.log")
    writer = open(path, "ab", buffering=0)  # the service's own descriptor, never reopened
    writer.write(CALM)
    with Follower([path]) as follower:
        assert lines_of(follower.read()) == [CALM.decode().rstrip("\n")]
        os.rename(path, path + ".1")
        open(path, "wb").close()  # `create`
        assert lines_of(follower.read()) == []
        writer.write(b"Traceback (most recent call last):\nRuntimeError: boom\n")
        seen = read_until(follower, lambda lines: "RuntimeError: boom" in lines)
        assert seen == ["Traceback (most recent call last):", "RuntimeError: boom"]
        writer.write(b"still the old file\n")
        append(path, b"the new file\n")  # a writer that reopened: the new file from now on
        seen = read_until(follower, lambda lines: "the new file" in lines)
        assert seen == ["still the old file", "the new file"]
        writer.write(b"never read: the old file is left\n")
        append(path, b"more\n")
        assert read_until(follower, lambda lines: "more" in lines) == ["more"]
    writer.close()
