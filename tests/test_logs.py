"""Follower: real files, real renames and truncations, inotify wake-ups."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from ddtreed.logs import Follower


def lines_of(chunks):
    return [line for chunk in chunks for line in chunk.lines]


def read_until(follower, predicate, deadline_s=5.0):
    """Read repeatedly until `predicate(all lines so far)` holds; the lines read."""
    seen = []
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        seen += lines_of(follower.read())
        if predicate(seen):
            return seen
        follower.wait(0.05)
    raise AssertionError(f"condition not met within {deadline_s}s; read {seen[-5:]}")


@pytest.fixture
def log_path(tmp_path):
    return str(tmp_path / "service.log")


def append(path, data: bytes):
    with open(path, "ab") as handle:
        handle.write(data)


def test_complete_lines_with_numbers_and_partial_line_held(log_path):
    append(log_path, b"one\ntwo\nthr")
    with Follower([log_path]) as follower:
        chunks = follower.read()
        assert lines_of(chunks) == ["one", "two"]
        assert chunks[0].first_number == 1 and chunks[0].source == log_path
        assert chunks[0].text == "one\ntwo"
        assert follower.read() == []
        append(log_path, b"ee\nfour\n")
        chunks = follower.read()
        assert lines_of(chunks) == ["three", "four"]
        assert chunks[0].first_number == 3


def test_invalid_utf8_nul_and_crlf_are_decoded_not_fatal(log_path):
    append(log_path, b"ok \xff\xfe end\nnul\x00byte\nwin\r\n\x80\n")
    with Follower([log_path]) as follower:
        assert lines_of(follower.read()) == ["ok \ufffd\ufffd end", "nulbyte", "win", "\ufffd"]


def test_overlong_line_is_truncated_with_marker_and_not_buffered(log_path):
    limit = 1000
    with Follower([log_path], max_line_bytes=limit) as follower:
        with open(log_path, "ab") as handle:
            for _ in range(10):  # a 10 MB line arriving in pieces
                handle.write(b"x" * 1_000_000)
                handle.flush()
                follower.read()
                assert len(follower._sources[0].partial) <= limit
            handle.write(b"\nafter\n")
        lines = lines_of(follower.read())
    assert lines == ["after"]  # the truncated head was emitted while the line was still growing


def test_overlong_line_inside_one_block(log_path):
    append(log_path, b"a\n" + b"y" * 5000 + b"\nb\n")
    with Follower([log_path], max_line_bytes=100) as follower:
        lines = lines_of(follower.read())
    assert lines[0] == "a" and lines[2] == "b"
    assert lines[1].startswith("y" * 100) and "truncated at 100 bytes" in lines[1]
    assert len(lines[1]) < 200


def test_ten_megabyte_line_emitted_truncated(log_path):
    append(log_path, b"z" * 10_000_000 + b"\nnext\n")
    with Follower([log_path]) as follower:
        lines = read_until(follower, lambda seen: "next" in seen)
        assert len(follower._sources[0].partial) == 0
    assert len(lines) == 2 and lines[1] == "next"
    assert len(lines[0]) <= 65536 + 100 and "truncated" in lines[0]


def test_file_created_later_is_picked_up(log_path):
    with Follower([log_path]) as follower:
        assert follower.read() == []
        append(log_path, b"hello\n")
        assert read_until(follower, lambda seen: "hello" in seen) == ["hello"]


def test_from_end_skips_existing_content(log_path):
    append(log_path, b"old 1\nold 2\n")
    with Follower([log_path], from_end=True) as follower:
        assert follower.read() == []
        append(log_path, b"new\n")
        assert lines_of(follower.read()) == ["new"]


def test_rotation_by_rename_reads_old_tail_then_new_file(log_path):
    append(log_path, b"a\n")
    with Follower([log_path]) as follower:
        assert lines_of(follower.read()) == ["a"]
        append(log_path, b"b\nunterminated")
        os.rename(log_path, log_path + ".1")
        append(log_path, b"c\n")
        assert lines_of(follower.read()) == ["b", "unterminated", "c"]


def test_copytruncate_restarts_from_zero(log_path):
    append(log_path, b"first line of a long file\nsecond\n")
    with Follower([log_path]) as follower:
        follower.read()
        shutil.copy(log_path, log_path + ".1")
        os.truncate(log_path, 0)
        append(log_path, b"x\n")
        assert lines_of(follower.read()) == ["x"]


def test_truncate_and_regrow_past_offset_is_detected(log_path):
    append(log_path, b"[2026-07-28 10:00:00] aaaa\n")
    with Follower([log_path]) as follower:
        follower.read()
        with open(log_path, "wb") as handle:  # rewritten larger before the follower looked
            handle.write(b"[2026-07-28 11:11:11] bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n")
        assert lines_of(follower.read()) == ["[2026-07-28 11:11:11] bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"]


def test_deleted_file_and_directory_come_back(tmp_path):
    directory = tmp_path / "logs"
    directory.mkdir()
    path = str(directory / "service.log")
    append(path, b"before\n")
    with Follower([path]) as follower:
        assert lines_of(follower.read()) == ["before"]
        shutil.rmtree(directory)
        assert follower.read() == []
        assert follower.wait(0.05) is False
        directory.mkdir()
        append(path, b"after\n")
        assert read_until(follower, lambda seen: "after" in seen) == ["after"]


def test_wait_wakes_on_write_and_times_out_when_idle(log_path):
    append(log_path, b"")
    with Follower([log_path]) as follower:
        follower.read()
        started = time.monotonic()
        assert follower.wait(0.2) is False
        assert time.monotonic() - started >= 0.19
        append(log_path, b"ping\n")
        assert follower.wait(5.0) is True
        assert lines_of(follower.read()) == ["ping"]


def test_flood_is_read_in_bounded_batches(log_path):
    append(log_path, b"".join(b"line %d\n" % i for i in range(200_000)))
    with Follower([log_path], max_bytes_per_read=256 * 1024) as follower:
        first = lines_of(follower.read())
        assert 0 < len(first) < 200_000
        assert follower.wait(0) is True  # backlog left: no need to block
        rest = read_until(follower, lambda seen: len(first) + len(seen) == 200_000)
    numbers = [int(line.split()[1]) for line in first + rest]
    assert numbers == list(range(200_000))


def test_several_files_keep_separate_numbering(tmp_path):
    paths = [str(tmp_path / "out.log"), str(tmp_path / "err.log")]
    append(paths[0], b"o1\no2\n")
    append(paths[1], b"e1\n")
    with Follower(paths) as follower:
        chunks = follower.read()
    by_source = {chunk.source: (chunk.first_number, chunk.lines) for chunk in chunks}
    assert by_source == {paths[0]: (1, ("o1", "o2")), paths[1]: (1, ("e1",))}
