"""The serving watch reads a chunk's decode lines with one `findall` and no per-line loop when every
one is SGLang's line as printed (issue 19: the daemon's path while it serves), over the follower's
bytes when it hands a BlockChunk (every fourth chunk here), with the accept length alone when no
decode line says `cuda graph: False`. What it sees must be
what the line-by-line reading sees: the same events (kind, detail, evidence, data), the same last
line, accept length, graph count and runs, on real SGLang 0.5.16 output, the benchmark mixes and
generated streams of healthy, low, eager and odd decode lines, in chunks of any size."""

from __future__ import annotations

import gzip
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddtreed.health.serving import ServingSettings, ServingWatch, _STRICT_DECODE
from ddtreed.logs.follower import BlockChunk
from ddtreed.records import LogChunk

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))
import mixes  # noqa: E402


class LineByLine(ServingWatch):
    """The reference: every chunk read line by line (`str.find` + `decode_fields` + `_decode`)."""

    def feed(self, chunk):
        text = chunk.text if chunk.text is not None else "\n".join(chunk.lines)
        return self._feed_lines(text)


def watches(baseline=None, captured=True, eager=5, collapse=5):
    """(fast, reference), alike: same settings, baseline, capture and wall clock."""
    return tuple(kind(ServingSettings(interval_s=0, eager_lines=eager, collapse_lines=collapse), None,
                      captured_graphs=captured, baseline=baseline, wall=lambda: 1234.5)
                 for kind in (ServingWatch, LineByLine))


def state(watch: ServingWatch):
    return (watch._last_line, watch.decode_accept, watch._graph_lines, list(watch._eager),
            list(watch._low), sorted(watch._reported))


def events(found):
    return [(event.kind, event.detail, event.at, event.evidence, event.data) for event in found]


def feed_both(lines: list[str], sizes, **options) -> tuple[int, int]:
    """Feed `lines` in chunks of the given sizes (cycled) to both watches; compare after each chunk.
    Returns (chunks, events seen)."""
    fast, reference = watches(**options)
    at = chunks = seen = 0
    sizes = list(sizes)
    while at < len(lines):
        size = max(1, sizes[chunks % len(sizes)])
        part = tuple(lines[at:at + size])
        at += size
        raw = "\n".join(part).encode("utf-8", "surrogateescape")
        if chunks % 4 == 3 and b"\r\n" not in raw and b"\x00" not in raw:
            chunk: LogChunk = BlockChunk.of("s", at, raw, 0.0)  # as the follower hands it: bytes
        else:
            chunk = LogChunk("s", at, part, 0.0, text="\n".join(part) if chunks % 3 else None)
        got, want = fast.feed(chunk), reference.feed(chunk)
        assert events(got) == events(want), f"chunk {chunks}"
        assert state(fast) == state(reference), f"chunk {chunks}"
        seen += len(got)
        chunks += 1
    return chunks, seen


def real_lines() -> list[str]:
    lines = []
    for path in sorted((HERE / "fixtures" / "sglang-0.5.16").rglob("*.log*")):
        data = path.read_bytes()
        text = gzip.decompress(data).decode() if path.suffix == ".gz" else data.decode(errors="replace")
        lines += text.splitlines()
    return lines


def test_real_decode_lines_are_the_strict_form():
    """The fast reading applies to what SGLang 0.5.16 really prints (else it would never run)."""
    decode = [line for line in real_lines() if "Decode batch, " in line]
    assert len(decode) > 100
    assert all(len(_STRICT_DECODE.findall(line)) == 1 for line in decode)


def test_the_benchmark_service_decode_lines_are_the_strict_form():
    """tests/programs/fast_service.py ends its decode line with a comma (as older SGLang releases
    did): still one strict match per line, so the daemon under benchmarks/footprint.py reads its
    floods without the per-line path, and what it reads is what the line-by-line reading reads."""
    sys.path.insert(0, str(HERE / "programs"))
    import fast_service

    lines = [fast_service.decode_line(f"TP{step % 2}", step).rstrip("\n") for step in range(200)]
    assert all(line.endswith(",") for line in lines)
    assert all(len(_STRICT_DECODE.findall(line)) == 1 for line in lines)
    for baseline in (None, 3.0, 8.0):
        feed_both(lines, [20, 7, 1], baseline=baseline)


@pytest.mark.parametrize("baseline", [None, 1.0, 3.0, 5.0, 9.0])
@pytest.mark.parametrize("captured", [True, False])
def test_real_logs_read_the_same(baseline, captured):
    lines = real_lines()
    for sizes in ([1], [7], [64, 3], [4096]):
        feed_both(lines, sizes, baseline=baseline, captured=captured)


@pytest.mark.parametrize("mix", mixes.MIXES)
@pytest.mark.parametrize("baseline", [None, 3.0, 6.0])
def test_benchmark_mixes_read_the_same(mix, baseline, tmp_path):
    path = tmp_path / f"{mix}.log"
    mixes.generate(str(path), mix, 6000)
    lines = path.read_text(errors="replace").splitlines()
    for sizes in ([333], [1, 50, 997], [4096]):
        chunks, seen = feed_both(lines, sizes, baseline=baseline)
        assert chunks > 1
    if baseline == 6.0 and mix != "worst":
        assert seen  # every accept length of the mix is below 3.0 = half of 6.0: a collapse


def decode_line(accept: str | None, graph: str, rank: int, odd: str | None) -> str:
    body = ("#running-req: 3, #token: 258, token usage: 0.01, "
            + (f"accept len: {accept}, accept rate: 0.36, " if accept is not None else "")
            + f"cuda graph: {graph}, gen throughput (token/s): 1860.69, #queue-req: 0")
    line = f"[2026-12-01 07:54:47 TP{rank}] Decode batch, {body}"
    if odd == "tail":
        line += ", #retracted-req: 0"
    elif odd == "comma":  # as older releases (and tests/programs/fast_service.py) end it
        line += ","
    elif odd == "comma space":
        line += ", "
    elif odd == "comma field":
        line += ", cuda graph: False"
    elif odd == "cr":
        line += "\r"
    elif odd == "twice":
        line += " Decode batch, accept len: 0.10, cuda graph: False"
    elif odd == "prefix":
        line = "Decode batch, accept len: 0.20 " + line
    elif odd == "loose":
        line = line.replace("accept len: ", "accept len:  ")
    return line


entries = st.one_of(
    st.tuples(st.sampled_from(["4.97", "1.20", "0.50", "3.00", "1.50", "2.99", None]),
              st.sampled_from(["True", "True", "True", "False", "Maybe"]), st.integers(0, 7),
              st.sampled_from([None] * 12 + ["tail", "cr", "twice", "prefix", "loose", "comma", "comma space",
                                              "comma field"])),
    st.sampled_from(["[2026-12-01 07:54:47 TP0] Prefill batch, #new-seq: 1, cuda graph: False",
                     "noise, cuda graph: False, accept len: 0.1", "", "  File \"x.py\", line 1, in f",
                     "noise, cuda graph: False, gen throughput (token/s): 1.00, #queue-req: 0",
                     "\udcff\udcfe invalid UTF-8 é, Decode batch, accept len: 0.10, cuda graph: True"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(entries, min_size=1, max_size=120), st.lists(st.integers(1, 40), min_size=1, max_size=5),
       st.sampled_from([None, 2.0, 3.0, 8.0]), st.booleans(), st.integers(1, 6), st.integers(1, 6))
def test_generated_streams_read_the_same(parts, sizes, baseline, captured, eager, collapse):
    lines = [part if isinstance(part, str) else decode_line(*part) for part in parts]
    feed_both(lines, sizes, baseline=baseline, captured=captured, eager=eager, collapse=collapse)


def test_a_collapse_across_chunks_has_the_lines_of_its_run_as_evidence():
    rng = random.Random(3)
    lines = [decode_line(f"{3 + rng.random():.2f}", "True", 0, None) for _ in range(10)]
    low = [decode_line(f"0.{index}0", "True", index, None) for index in range(1, 8)]
    chunks = [lines + low[:2], low[2:4], low[4:]]
    fast, _ = watches(baseline=3.0)
    found = []
    for number, part in enumerate(chunks):
        found += fast.feed(LogChunk("s", number, tuple(part), 0.0))
    assert [event.kind for event in found] == ["acceptance-collapse"]
    assert found[0].evidence == tuple(low[:5])
    assert found[0].data["accept_length"] == 0.5
    assert "on 5 decode lines in a row" in found[0].detail
