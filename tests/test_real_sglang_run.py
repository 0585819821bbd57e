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


# ---- runs r6-r8 (this branch's daemon, docs/gpu-real-sglang.md) ------------------------------------

def _results(run: str, scenario: str) -> dict:
    return next(r for r in json.loads((RESULTS / f"{run}.results.json").read_text()) if r["scenario"] == scenario)


def _server_args(lines: list[str]) -> str:
    return next(line for line in lines if "server_args=ServerArgs(" in line)


def test_the_kv_pool_crash_is_closed_by_the_raised_fraction_that_real_sglang_accepted(tmp_path, capsys):
    from ddtreed.cli import main
    from ddtreed.loop.wiring import catalog_for
    from ddtreed.records import ServiceContext
    from ddtreed.remediation.argv_edit import value_of
    from ddtreed.remediation.launchplan import plan_argv

    crashed, healthy = sorted(launches("kvpool-r7"), key=lambda lines: "mem_fraction_static=1e-05" not in
                              _server_args(lines))
    (tmp_path / "crash.log").write_text("\n".join(crashed) + "\n")
    assert main(["diagnose", str(tmp_path / "crash.log"), "--json"]) == 0
    (incident,) = json.loads(capsys.readouterr().out)["incidents"]
    assert incident["category"] == "kv-pool-too-small" and incident["remediations"][0] == "raise-mem-fraction-static"
    argv = ("python3", "-m", "sglang.launch_server", "--model-path", "/tmp/model", "--mem-fraction-static", "1e-05")
    planned = plan_argv(catalog_for(None).get("raise-mem-fraction-static"), ServiceContext(argv=argv))
    raised = value_of(list(planned), ("--mem-fraction-static",))[1]
    assert f"mem_fraction_static={raised}," in _server_args(healthy)  # what ddtreed relaunched with
    tracker, groups, _ = replay(healthy)
    assert tracker.ready and groups == []
    assert [i["status"] for i in _results("r7", "kvpool")["incidents"]] == ["resolved"]


def test_the_random_dflash_draft_accepts_nothing_and_the_launch_without_it_serves_on_graphs():
    by_algorithm = {("DFLASH" if "speculative_algorithm='DFLASH'" in _server_args(lines) else "off"): lines
                    for lines in launches("dflash-r7")}
    spec = [s for s in map(parse_decode_line, by_algorithm["DFLASH"]) if s]
    assert spec and {s.accept_length for s in spec} == {1.0}  # the collapse the canary measured
    tracker, groups, _ = replay(by_algorithm["off"])
    assert tracker.ready and groups == []
    assert {s.cuda_graph for s in map(parse_decode_line, by_algorithm["off"]) if s} == {True}
    (incident,) = _results("r7", "dflash")["incidents"]
    assert (incident["category"], incident["status"]) == ("acceptance-collapse", "resolved")


def test_an_orphaned_service_is_removed_by_the_next_ddtreed_without_any_incident():
    result = _results("r7", "orphan")
    assert result["orphan"]["alive"] and result["orphan"]["gpu"]  # left serving, holding the GPU
    assert result["orphan_left_alive"] == [] and result["incidents"] == []
    assert result["ready_again_s"] is not None
    for lines in launches("orphan-r7"):
        tracker, groups, _ = replay(lines)
        assert tracker.ready and groups == []  # the leftover was stopped, not crashed


def test_a_blocked_launch_never_started_the_service_until_the_port_was_free():
    (launch,) = launches("portinuse-blocked-r6")  # one launch: none while the port was taken
    tracker, groups, _ = replay(launch)
    assert tracker.ready and tracker.bind_error is None and groups == []
    (incident,) = _results("r6", "portinuse")["incidents"]
    assert [step for step, _ in incident["steps"]] == ["detected", "diagnosed", "cleared"]
    assert _results("r6", "portinuse")["verdict_status"]["state"] == "blocked"


def test_the_eager_fallback_stop_drained_the_service_before_the_patch():
    (incident,) = _results("r8", "width-silent")["incidents"]
    assert (incident["rule"], incident["status"]) == ("serving-eager-fallback", "resolved")
    text = gzip.decompress((RUN / "width-silent-r8.service.log.gz").read_bytes()).decode()
    assert "crashed with exit code -15" not in text  # no scheduler killed mid-drain
    assert text.count("Draining requests and shutting down") == 2  # the fix's stop and the final one


# ---- runs r9-r11 (main 739e07a, docs/gpu-real-sglang.md) --------------------------------------------

def test_the_gpu_hog_wait_ends_in_a_verified_relaunch_once_the_holder_lets_go():
    result = _results("r9", "hog")
    hog_pid = result["hog"]["pid"]
    # ddtreed's verdict while the hog held the GPU: blocked on the named holder, nothing relaunched
    assert result["verdict"]["state"] == "blocked" and result["verdict"]["restarts"] == 0
    assert f"pid {hog_pid}" in result["verdict"]["status_text"]
    (incident,) = result["incidents"]
    assert (incident["rule"], incident["status"], incident["outcome"]) == (
        "cuda-oom-gpu-held-by-another-process", "resolved", "restarted; healthy")
    assert incident["remediation"] is None  # never a blind lower-mem-fraction-static
    assert [step for step, _ in incident["steps"]] == [
        "detected", "diagnosed", "waiting", "cleared", "restarting", "restarted", "healthy"]
    times = result["step_times"][str(incident["id"])]
    assert times["waiting"] <= times["cleared"] <= times["restarting"]  # no relaunch before it let go
    # two launches (the file's rotated parts come in any order): the crash and the relaunch
    (crashed,), (healthy,) = ([r for r in map(replay, launches("hog-r9")) if bool(r[1]) is want]
                              for want in (True, False))
    assert any(f"Process {hog_pid} has 136.79 GiB memory in use" in c.message for g in crashed[1] for c in g)
    assert healthy[0].ready and healthy[1] == []


def test_a_remediation_cut_off_by_a_kill_and_found_undone_is_reverted_not_counted_as_held():
    # r9's width-capture was killed by the device's time limit between the patch and its
    # verification; the next machine command re-installed SGLang's files. The next ddtreed run
    # found the application's file back at its original bytes: it marked it undone and reverted
    # that incident, then diagnosed the (still injected) capture crash anew and fixed it.
    result = _results("r10", "width-capture")
    by_id = {i["id"]: i for i in result["incidents"]}
    assert by_id[1]["status"] == "reverted" and "no longer in place" in by_id[1]["outcome"]
    assert by_id[2]["status"] == "resolved" and by_id[2]["remediation"] == "verify-graph-capture-width"
    assert result["runner_after"] == {"injected": True, "ddtreed_marker": True}
    # four launches over both runs (the rotated parts in any order): two capture crashes, the
    # patched launch r9 cut off during its load, and r10's patched launch, serving on graphs
    replays = [(lines, *replay(lines)) for lines in launches("width-capture-r10")]
    crashes = [groups for _, _, groups, _ in replays if groups]
    assert len(crashes) == 2 and all(any("shared logits buffer holds 576 rows but caller needs 624" in c.message
                                         for g in groups for c in g) for groups in crashes)
    (served,) = [lines for lines, tracker, groups, _ in replays if tracker.ready]
    assert {s.cuda_graph for s in map(parse_decode_line, served) if s} == {True}


def test_every_scenario_of_the_last_runs_ended_in_the_state_it_should():
    expected = {  # scenario -> (statuses of its incidents, rules)
        ("r9", "ngram"): (["resolved", "resolved"], {"worker-died-without-traceback"}),
        ("r10", "width-silent"): (["resolved"], {"serving-eager-fallback"}),
        ("r11", "kvpool"): (["resolved"], {"kv-pool-no-room-weights-fill-fraction"}),
        ("r11", "dflash"): (["resolved"], {"canary-acceptance-collapse"}),
        ("r11", "portinuse"): (["advised"], {"preflight:port-in-use"}),
    }
    for (run, scenario), (statuses, rules) in expected.items():
        result = _results(run, scenario)
        assert "error" not in result, (run, scenario)
        assert sorted(i["status"] for i in result["incidents"]) == statuses, (run, scenario)
        assert {i["rule"] for i in result["incidents"]} == rules, (run, scenario)
        assert result["stop"]["rc"] == 0 and result["gpu_after"] == [], (run, scenario)
        facts = result["service_log_facts"]
        assert facts["draining"] and not facts["scheduler_killed_by_sigterm"], (run, scenario)


def test_run_s16b_child_kills_assemble_to_the_deaths_and_the_quoted_crash_to_nothing():
    """Run s16b (probekill, servecrash): each killed child is the first crash of its launch, the
    launcher's SIGQUIT line after it is not; a prompt quoting a crash (logged by --log-requests)
    assembles to nothing, the injected scheduler exception to its traceback."""
    firsts = []
    for lines in launches("probekill-s16b"):
        tracker, groups, _ = replay(lines)
        assert tracker.ready
        firsts += [(group[0].kind, group[0].message.split(" (pid=")[0], group[0].exit_code)
                   for group in groups[:1]]
    assert sorted(firsts) == [("child-death", "Subprocess detokenizer", -9),
                              ("child-death", "Subprocess scheduler_0", -9)]
    lines = gzip.decompress((RUN / "servecrash-s16b.service.log.gz").read_bytes()).decode().splitlines()
    quoted = [line for line in lines if "Please explain this log" in line]
    assert quoted and all("obj=GenerateReqInput(" in line for line in quoted)  # the request log's lines
    assert replay(quoted)[1] == []
    firsts = [(group[0].kind, group[0].exception, group[0].message) for group in replay(lines)[1]]
    assert firsts[0] == ("traceback", "RuntimeError", "CUDA error: an illegal memory access was encountered")
    assert all(kind != "traceback" for kind, _, _ in firsts[1:])  # the SIGQUIT line after it, no echo
