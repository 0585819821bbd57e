"""Follower.wait on inotify in the calling thread: no threads, one fd closed with the follower,
bursts coalesced, polling when inotify is unavailable."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ddtreed.logs import Follower

REPO = Path(__file__).resolve().parent.parent
CALM = b"[2026-07-28 10:00:00 TP0] Decode batch, #running-req: 4, accept len: 3.10\n"


def lines_of(chunks):
    return [line for chunk in chunks for line in chunk.lines]


def inotify_fds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            continue
    return count


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def append(path, data: bytes):
    with open(path, "ab") as handle:
        handle.write(data)


def append_later(path, data: bytes, delay_s: float) -> threading.Thread:
    """A writer that appends once the test thread is already blocked in wait()."""
    writer = threading.Timer(delay_s, append, (path, data))
    writer.start()
    return writer


def timed_wait(follower, timeout: float) -> tuple[bool, float]:
    started = time.monotonic()
    changed = follower.wait(timeout)
    return changed, time.monotonic() - started


@pytest.fixture
def log_path(tmp_path):
    path = str(tmp_path / "service.log")
    append(path, b"")
    return path


def test_one_inotify_fd_no_threads_and_close_releases_it(log_path):
    fds, threads = inotify_fds(), native_threads()
    follower = Follower([log_path])
    assert inotify_fds() == fds + 1
    append(log_path, CALM)
    assert follower.wait(1.0) is True
    assert native_threads() == threads
    follower.close()
    assert inotify_fds() == fds
    follower.close()  # twice is fine


def test_dropped_follower_releases_its_inotify_instance(log_path):
    fds = inotify_fds()
    followers = [Follower([log_path]) for _ in range(5)]
    assert inotify_fds() == fds + 5
    del followers
    gc.collect()
    assert inotify_fds() == fds


def test_write_wakes_wait_through_inotify_not_polling(log_path):
    with Follower([log_path], poll_interval_s=30.0) as follower:
        follower.read()
        writer = append_later(log_path, b"Traceback (most recent call last):\n", 0.1)
        changed, waited = timed_wait(follower, 10.0)
        writer.join()
        assert changed is True and waited < 5.0  # polling every 30 s would still be asleep
        assert lines_of(follower.read()) == ["Traceback (most recent call last):"]


def test_writes_to_a_sibling_file_do_not_end_wait(tmp_path, log_path):
    sibling = tmp_path / "other.log"
    with Follower([log_path], poll_interval_s=30.0) as follower:
        writer = append_later(sibling, b"noise\n" * 10, 0.05)
        changed, waited = timed_wait(follower, 0.4)
        writer.join()
        assert changed is False and waited >= 0.39


def test_calm_flood_is_read_in_few_wakeups_and_nothing_is_lost(log_path):
    """A subprocess appends 600 timestamped lines, one write each, ~1 per ms."""
    script = ("import os, sys, time\nfd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
              "for i in range(600):\n"
              "    os.write(fd, b'[2026-07-28 10:00:00 TP0] Decode batch %d\\n' % i)\n"
              "    time.sleep(0.001)\n")
    interval = 0.02
    with Follower([log_path], min_read_interval_s=interval) as follower:
        writer = subprocess.Popen([sys.executable, "-c", script, log_path])
        lines, reads, started = [], 0, time.monotonic()
        deadline = started + 30
        while len(lines) < 600 and time.monotonic() < deadline:
            if follower.wait(1.0):
                lines += lines_of(follower.read())
                reads += 1
        elapsed = time.monotonic() - started
        assert writer.wait(10) == 0
    assert [int(line.rsplit(" ", 1)[1]) for line in lines] == list(range(600))
    assert reads <= elapsed / interval + 3, (reads, elapsed)


def test_calm_read_in_a_flood_holds_the_next_one_back_a_traceback_line_does_not(log_path):
    hold = 2.0
    with Follower([log_path], min_read_interval_s=hold) as follower:
        append(log_path, CALM)
        assert len(follower.read()) == 1
        append(log_path, CALM)
        assert len(follower.read()) == 1  # a second read within `hold` of the first: a flood
        read_at = time.monotonic()
        append(log_path, CALM)
        assert follower.wait(0.1) is True  # the deadline comes first: a change, unread
        assert follower.wait(10.0) is True
        assert time.monotonic() - read_at >= hold - 0.01
        assert follower.holds == 2
        follower.read()
        append(log_path, b'  File "/x/scheduler.py", line 9, in run\n')
        follower.read()
        append(log_path, b"RuntimeError: boom\n")
        holds = follower.holds
        assert follower.wait(10.0) is True
        assert follower.holds == holds  # an untagged line was read last: nothing held back
        assert lines_of(follower.read()) == ["RuntimeError: boom"]


def test_a_line_after_a_quiet_spell_is_read_without_hold_off(log_path):
    """20 decode lines/s is one read per 50 ms, more than the interval apart: never held back,
    so a crash right after ordinary traffic is read at once."""
    interval = 0.05
    with Follower([log_path], min_read_interval_s=interval) as follower:
        for _ in range(5):
            append(log_path, CALM)
            assert follower.wait(10.0) is True
            assert len(follower.read()) == 1
            time.sleep(interval * 2)  # the quiet spell: longer than the interval, on any box
        append(log_path, b"[2026-07-28 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n")
        assert follower.wait(10.0) is True
        assert lines_of(follower.read())[0].endswith("Traceback (most recent call last):")
        assert (follower.reads, follower.holds) == (6, 0)


def test_a_traceback_header_in_a_flood_does_not_hold_the_next_read_back(log_path):
    """In a flood the rest of a crash is not held back behind its tagged header line."""
    with Follower([log_path], min_read_interval_s=5.0) as follower:
        append(log_path, CALM)
        follower.read()
        append(log_path, CALM)
        follower.read()  # within 5 s of the first: a flood
        append(log_path, b"[2026-07-28 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n")
        follower.read()
        append(log_path, b'  File "/x/scheduler.py", line 9, in run\n')
        assert follower.wait(10.0) is True
        assert follower.holds == 0
        assert lines_of(follower.read()) == ['  File "/x/scheduler.py", line 9, in run']


def test_lines_that_keep_coming_during_a_hold_off_keep_the_pacing(log_path):
    """A flood stays paced: the read after a hold-off that found new lines is held back again."""
    hold = 2.0
    with Follower([log_path], min_read_interval_s=hold) as follower:
        append(log_path, CALM)
        follower.read()
        append(log_path, CALM)
        follower.read()  # within `hold` of the first (generous on a loaded box): the flood begins
        for round_ in range(2):
            append(log_path, CALM)
            assert follower.wait(10.0) is True
            assert follower.holds == round_ + 1
            append(log_path, CALM)  # more came while it was held back
            follower.read()


def test_unfinished_line_is_not_calm(log_path):
    with Follower([log_path], min_read_interval_s=5.0) as follower:
        append(log_path, CALM + b"[2026-07-28 10:00:00 TP0] Sched")
        follower.read()
        append(log_path, b"uler hit an exception: Traceback (most recent call last):\n")
        changed, waited = timed_wait(follower, 10.0)
        assert changed is True and waited < 4.0


def test_renamed_away_file_still_written_wakes_wait_by_polling(log_path):
    with Follower([log_path], poll_interval_s=0.05) as follower:
        follower.read()
        os.rename(log_path, log_path + ".1")
        assert follower.read() == []
        writer = append_later(log_path + ".1", b"late line\n", 0.1)
        changed, waited = timed_wait(follower, 10.0)
        writer.join()
        assert changed is True and waited < 5.0
        assert lines_of(follower.read()) == ["late line"]


def test_directory_replaced_while_waiting(tmp_path):
    directory = tmp_path / "logs"
    directory.mkdir()
    path = str(directory / "service.log")
    append(path, b"before\n")
    with Follower([path], poll_interval_s=0.05) as follower:
        assert lines_of(follower.read()) == ["before"]
        shutil.rmtree(directory)
        assert follower.wait(0.2) is False  # the watch went with the directory: polling now
        directory.mkdir()
        writer = append_later(path, b"after\n", 0.05)
        assert follower.wait(10.0) is True
        writer.join()
        assert lines_of(follower.read()) == ["after"]
        append(path, b"watched again\n")  # the new directory is watched: inotify wakes us
        follower._poll_interval_s = 30.0
        changed, waited = timed_wait(follower, 10.0)
        assert changed is True and waited < 5.0


NO_INOTIFY = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[2])
import structlog
events = []
structlog.configure(processors=[lambda _l, _m, event: events.append(event) or ""],
                    logger_factory=structlog.ReturnLoggerFactory())
from ddtreed.logs import Follower
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1, hard))
spare = []
try:
    while True:
        spare.append(os.open("/dev/null", os.O_RDONLY))  # fill the holes below the limit too
except OSError:
    pass
follower = Follower([sys.argv[1]], poll_interval_s=0.05)  # no fd left for inotify_init: EMFILE
for fd in spare:
    os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
with open(sys.argv[1], "a") as handle:
    handle.write("polled\n")
started = time.monotonic()
changed = follower.wait(10.0)
print(json.dumps({"changed": changed, "waited": time.monotonic() - started,
                  "lines": [l for c in follower.read() for l in c.lines],
                  "events": [e["event"] for e in events], "errors": [e.get("error") for e in events]}))
"""


def test_polls_when_no_inotify_instance_can_be_made(tmp_path):
    path = tmp_path / "service.log"
    result = subprocess.run([sys.executable, "-c", NO_INOTIFY, str(path), str(REPO)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "log_watch_unavailable" in report["events"]
    # EMFILE itself, or what inotify_simple's first use (it locates libc then) says without fds.
    unavailable = report["errors"][report["events"].index("log_watch_unavailable")]
    assert "Too many open files" in unavailable or "temporary directory" in unavailable, unavailable
    assert report["changed"] is True and report["waited"] < 5.0
    assert report["lines"] == ["polled"]


def test_a_flood_that_goes_on_is_held_back_its_longer_hold_pacing_begun_by_two_reads_is_not(log_path):
    """Two close reads begin the pacing with the interval's hold; only a read that follows a
    hold-off which found new lines waiting (the flood goes on) holds the next one back the
    flood's longer hold. So a burst of lines (8 ranks' lines of one batch, 20 lines/s) is never
    held more than the interval, and a flood costs one wake-up per flood hold."""
    interval, flood = 0.3, 3.0
    with Follower([log_path], min_read_interval_s=interval, flood_hold_s=flood) as follower:
        append(log_path, CALM)
        follower.read()
        append(log_path, CALM)
        follower.read()  # within the interval of the first (generous on a loaded box): pacing begins
        read_at = time.monotonic()
        append(log_path, CALM)
        assert follower.wait(10.0) is True
        held = time.monotonic() - read_at
        assert interval - 0.01 <= held < flood - 0.5  # the interval's hold, not the flood's
        assert follower.holds == 1
        append(log_path, CALM)  # more came while it was held back: the flood goes on
        follower.read()
        read_at = time.monotonic()
        append(log_path, CALM)
        assert follower.wait(10.0) is True
        assert time.monotonic() - read_at >= flood - 0.01  # now the flood's hold
        assert follower.holds == 2
        follower.read()  # it followed the flood's hold, which found the line waiting: still a flood
        append(log_path, b"[2026-07-28 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n")
        assert follower.wait(10.0) is True  # the price: a crash begun inside the flood waits its hold
        assert follower.holds == 3
        assert lines_of(follower.read())[0].endswith("Traceback (most recent call last):")
        append(log_path, b'  File "/x/scheduler.py", line 9, in run\n')
        assert follower.wait(10.0) is True
        assert follower.holds == 3  # the header was read last: the rest of the crash is not held
        assert lines_of(follower.read()) == ['  File "/x/scheduler.py", line 9, in run']
