"""A log that already holds lines when the follower opens it (a daemon started beside a running
service, a benchmark's pre-written file): inotify announces nothing, so the first wait must not
sit out its timeout before the first read."""

from ddtreed.logs.follower import Follower


def test_lines_already_in_the_file_are_announced_by_the_first_wait(tmp_path):
    log = tmp_path / "service.log"
    log.write_text("[2026-01-01 00:00:00] first\n[2026-01-01 00:00:01] second\n")
    with Follower([str(log)]) as follower:
        assert follower.wait(30.0) is True  # at once: a 30 s wait would fail the suite's time
        lines = [line for chunk in follower.read() for line in chunk.lines]
        assert lines == ["[2026-01-01 00:00:00] first", "[2026-01-01 00:00:01] second"]
        assert follower.wait(0.05) is False  # nothing more: the next wait waits again


def test_an_empty_file_or_one_followed_from_its_end_waits_as_before(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    full = tmp_path / "full.log"
    full.write_text("old line\n")
    with Follower([str(empty)]) as follower:
        assert follower.wait(0.05) is False
    with Follower([str(full)], from_end=True) as follower:
        assert follower.wait(0.05) is False
        assert follower.read() == []
