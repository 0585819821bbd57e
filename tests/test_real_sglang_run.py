"""What the real ddtreed run saw on the H200 (docs/gpu-real-sglang.md), replayed on the CPU: the
service logs of that run (tests/fixtures/sglang-0.5.16/h200-run), one launch at a time, through
the milestone tracker, the traceback assembler and the serving watch."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ddtreed.health.probes import MilestoneTracker
from ddtreed.records import LogChunk
from ddtreed.health.serving import ServingSettings, ServingWatch, parse_decode_line, without_echoes
from ddtreed.tracebacks import Assembler

RUN = Path(__file__).parent / "fixtures" / "sglang-0.5.16" / "h200-run"
RESULTS = Path(__file__).parent.parent / "docs" / "gpu-real-sglang"


def launches(name: str) -> list[list[str]]:
    """The service log cut at each launch's `server_args=` line (the files hold several launches)."""
    lines = gzip.decompress((RUN / f"{name}.service.log.gz").read_bytes()).decode().splitlines()
    starts = [i for i, line in enumerate(lines) if "server_args=ServerArgs(" in line]
    return [lines[a:b] for a, b in zip(starts, starts[1:] + [len(lines)])]


def replay(lines: list[str], watch: ServingWatch | None = None):
    tracker, assembler, groups, events = MilestoneTracker(), Assembler(eager=True), [], []
    for index, line in enumerate(lines):
        chunk = LogChunk("service.stderr.log", index + 1, (line,), 1000.0 + index / 100)
        tracker.feed(chunk)
        assembler.feed(chunk)
        if watch is not None:
            events += watch.feed(chunk)
        groups += assembler.take(chunk.received_at)
    groups += assembler.take(1e9, final=True)
    return tracker, groups, events


class _NoProbe:
    def health(self, deadline):  # pragma: no cover - interval 0: never probed
        raise AssertionError("probed")


def test_the_injected_narrow_width_launch_falls_back_and_the_patched_one_replays_graphs():
    settings = ServingSettings(interval_s=0, eager_lines=5)
    verdicts = []
    for lines in launches("width-silent"):
        tracker = MilestoneTracker()
        for index, line in enumerate(lines):
            tracker.feed(LogChunk("s", index + 1, (line,), 0.0))
        watch = ServingWatch(settings, _NoProbe(), captured_graphs=tracker.captured_graphs)
        _, _, events = replay(lines, watch)
        graphs = {s.cuda_graph for s in map(parse_decode_line, lines) if s}
        verdicts.append((tracker.ready, [e.kind for e in events], graphs))
        # the capture line names 12 in both launches: it does not show the injected width
        assert tracker.widths == {"target verify": 12}
    assert sorted(verdicts, key=str) == sorted([(True, ["eager-fallback"], {False}),
                                                (True, [], {True})], key=str)


def test_a_killed_detokenizer_is_one_child_death_and_its_sigquit_echo_is_dropped():
    (launch,) = [lines for lines in launches("ngram") if any("Subprocess detokenizer" in text for text in lines)]
    _, groups, _ = replay(launch)
    crashes = without_echoes(tuple(c for g in groups for c in g))
    assert [c.kind for c in crashes] == ["child-death"]
    assert crashes[0].message.startswith("Subprocess detokenizer (pid=1242) crashed with exit code -9")


def test_the_gpu_hog_oom_names_the_holder_ddtreed_recorded():
    hog_pid = next(r for r in json.loads((RESULTS / "r2.results.json").read_text())
                   if r["scenario"] == "hog")["hog"]["pid"]
    _, groups, _ = replay(launches("hog")[0])
    messages = [c.message for g in groups for c in g]
    assert any(f"Process {hog_pid} has 136.79 GiB memory in use" in m for m in messages), messages


def test_the_taken_port_launch_never_reached_its_false_ready():
    for name in ("portinuse", "portinuse-nopreflight"):
        trackers = [replay(lines)[0] for lines in launches(name)]
        assert not any(t.ready for t in trackers), name  # ddtreed stopped it at the bind error
        assert trackers[0].bind_error.startswith("ERROR:    [Errno 98]"), name
