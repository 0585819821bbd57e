"""The follower's flood pacing tells timestamped SGLang lines from everything else with
`has_untagged_line` (two cheap searches instead of a regex tried at every position): it must
say exactly what the one-regex definition says, and a read of a non-timestamped line in a
flood must not hold the next read back."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.logs import Follower
from ddtreed.logs.follower import has_untagged_line, has_untagged_line_bytes

# The definition: some line (at the start or after a newline) does not begin "[<digit>".
REFERENCE = re.compile(r"(?:\A|\n)(?!\[\d)")
CALM = b"[2026-07-28 10:00:00 TP0] Decode batch, #running-req: 4, accept len: 3.10\n"

LINES = st.sampled_from([
    "[2026-07-28 10:00:00 TP0] Decode batch, #running-req: 4, accept len: 3.10",
    "[2026-07-28 10:00:00] INFO:     127.0.0.1:5000 - \"GET /health HTTP/1.1\" 200 OK",
    "[rank0]: Traceback (most recent call last):",
    "[rank1]:   File \"/opt/sglang/srt/managers/scheduler.py\", line 2984",
    "  File \"/x.py\", line 1, in f",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "", "[", "[2", "[a", " [2026", "\t[1", "[٣] an Arabic-Indic digit",
    "terminate called after throwing an instance of 'c10::Error'",
])


@given(st.lists(LINES, min_size=1, max_size=30))
@settings(max_examples=400, deadline=None)
def test_matches_the_one_regex_definition(lines):
    text = "\n".join(lines)
    assert has_untagged_line(text) == (REFERENCE.search(text) is not None)


@given(st.text(alphabet="[]0123456789 \n\tab٣", max_size=60))
@settings(max_examples=400, deadline=None)
def test_matches_it_on_any_text(text):
    assert has_untagged_line(text) == (REFERENCE.search(text) is not None)


def test_real_decode_lines_are_calm_a_rank_prefixed_traceback_is_not():
    decode = "\n".join(CALM.decode().rstrip("\n") for _ in range(25))
    assert has_untagged_line(decode) is False
    assert has_untagged_line(decode + "\n[rank0]: Traceback (most recent call last):") is True
    assert has_untagged_line("[rank0]: x\n" + decode) is True


def test_a_rank_prefixed_line_in_a_flood_does_not_hold_the_next_read_back(tmp_path):
    """torch's distributed tracebacks come as "[rankN]: …" lines: not timestamped, so not calm."""
    path = tmp_path / "service.log"
    path.write_bytes(b"")
    with Follower([str(path)], min_read_interval_s=5.0) as follower:
        for _ in range(2):  # two reads well within 5 s: a flood
            with open(path, "ab") as handle:
                handle.write(CALM)
            follower.read()
        with open(path, "ab") as handle:
            handle.write(b"[rank0]: Traceback (most recent call last):\n")
        follower.read()
        with open(path, "ab") as handle:
            handle.write(b'[rank0]:   File "/x/scheduler.py", line 9, in run\n')
        assert follower.wait(10.0) is True
        assert follower.holds == 0
        assert [line for chunk in follower.read() for line in chunk.lines] == \
            ['[rank0]:   File "/x/scheduler.py", line 9, in run']


# The judgement on a BlockChunk's bytes: the same definition with ASCII digits.
REFERENCE_BYTES = re.compile(rb"(?:\A|\n)(?!\[\d)")


@given(st.lists(LINES, min_size=1, max_size=30))
@settings(max_examples=400, deadline=None)
def test_on_bytes_it_matches_the_one_regex_definition_and_the_text_judgement(lines):
    text = "\n".join(lines)
    block = text.encode()
    assert has_untagged_line_bytes(block) == (REFERENCE_BYTES.search(block) is not None)
    if not any("٣" in line for line in lines):  # ASCII digits: the same answer as on the text
        assert has_untagged_line_bytes(block) == has_untagged_line(text)


@given(st.binary(max_size=80) | st.text(alphabet="[]0123456789 \n\tab٣", max_size=60).map(str.encode))
@settings(max_examples=400, deadline=None)
def test_on_bytes_it_matches_it_on_any_bytes(block):
    assert has_untagged_line_bytes(block) == (REFERENCE_BYTES.search(block) is not None)


def test_a_line_with_invalid_utf8_or_another_scripts_digit_in_a_flood_is_not_calm(tmp_path):
    """Judged on the bytes read: neither holds the next read back (no decode needed to tell)."""
    path = tmp_path / "service.log"
    path.write_bytes(b"")
    for odd in (b"\xff\xfe garbage from a crashing writer\n", "[٣] not SGLang's stamp\n".encode()):
        with Follower([str(path)], min_read_interval_s=5.0) as follower:
            follower.read()
            for _ in range(2):  # two reads well within 5 s: a flood
                with open(path, "ab") as handle:
                    handle.write(CALM)
                follower.read()
            with open(path, "ab") as handle:
                handle.write(odd)
            follower.read()
            with open(path, "ab") as handle:
                handle.write(b"RuntimeError: boom\n")
            assert follower.wait(10.0) is True
            assert follower.holds == 0
            assert [line for chunk in follower.read() for line in chunk.lines] == ["RuntimeError: boom"]
