"""A crash is on disk before the rules judge it (issue 19, session 15).

When every crash of a group has one signature (the ranks printed the same error: the founding
crash on 2 or 8 ranks), the incident's fingerprint does not depend on which crash the rules
choose, so the crash path commits the incident's row first and diagnoses it after; the diagnosis
joins the row before the one fdatasync that makes both durable, and before the daemon does
anything to the service. A diagnosis that fails (a bug in a rule, an exhausted regex budget)
loses no crash: the row is there for the next start, whose recovery closes the incident.
Crashes of different errors are diagnosed first, as before: which one is the cause, and so the
incident's signature, is the rules' call. Crash text read from a live service is still diagnosed
while the service exits (that wait hides the rules' time; handle_crash then reuses the result);
a diagnosis that fails there is logged and the wait goes on.

Measured (docs/performance.md, session 15): no change to detection (the row waits for the
service's exit either way) and none to the durable point.

The real loop, rules and SQLite store on a fake host (tests/test_loop_middle.py's harness).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddtreed.loop.daemon import EXIT_OK
from ddtreed.loop.incident_path import sole_signature
from ddtreed.records import Crash, Frame
from ddtreed.testing import crashing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_loop_middle import Loop  # noqa: E402


def _seen_at_diagnosis(loop: Loop) -> list[list[tuple[str, list[str]]]]:
    """For every diagnosis the daemon asks of its rules: the incidents on disk at that moment,
    as (category, steps) pairs, read through a second connection (what `ddtreed incidents` sees)."""
    from ddtreed.incidents import Store

    rules = loop.daemon.rules
    diagnose = rules.diagnose
    seen: list[list[tuple[str, list[str]]]] = []

    def watched(crashes, context=None, *args, **kwargs):
        with Store(loop.daemon.store.path, create=False) as reader:
            seen.append([(row["category"], [step["step"] for step in reader.get(row["id"])["steps"]])
                         for row in reader.list_incidents()])
        return diagnose(crashes, context, *args, **kwargs)

    rules.diagnose = watched  # type: ignore[method-assign]
    return seen


def test_the_crash_is_recorded_before_the_rules_judge_it(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: crashing(), policy={"mode": "off"})
    seen = _seen_at_diagnosis(loop)
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    incident = loop.incident(outcome.incident_id)
    assert incident["category"] == "cuda-graph-shape-mismatch"  # the rules' verdict joined the row
    assert incident["rule_id"] and incident["diagnosis"] and "33" in incident["diagnosis"]
    assert loop.steps(outcome.incident_id)[:2] == ["detected", "diagnosed"]
    # the incident's own diagnosis ran with its row already committed, not yet diagnosed
    assert [("unknown", ["detected"])] in seen
    assert seen[-1] == [("unknown", ["detected"])]


def test_a_diagnosis_that_fails_loses_no_crash(tmp_path):
    """The rules raise on the crash: the daemon stops with the error, as before, and the crash it
    read is in the store for the next start (whose recovery closes the incident)."""
    loop = Loop(tmp_path, lambda argv, env, start: crashing(), policy={"mode": "off"})
    rules = loop.daemon.rules
    diagnose = rules.diagnose

    def failing(crashes, context=None, *args, **kwargs):
        if all(crash.source == "<warm-up>" for crash in crashes):
            return diagnose(crashes, context, *args, **kwargs)  # the warm-up's synthetic crash
        raise RuntimeError("a rule's bug")

    rules.diagnose = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="a rule's bug"):
        loop.run()
    [incident] = loop.daemon.store.list_incidents()
    whole = loop.incident(incident["id"])
    assert whole["exception"] == "RuntimeError" and "must match the size of tensor b (33)" in whole["message"]
    assert whole["tracebacks"] and [step["step"] for step in whole["steps"]] == ["detected"]


def _crash(message: str, rank: str) -> Crash:
    frames = (Frame(file="/x/sglang/srt/model_executor/cuda_graph_runner.py", line=1, function="replay"),)
    return Crash(kind="traceback", exception="RuntimeError", message=message, frames=frames, rank=rank)


def test_only_crashes_of_one_signature_are_recorded_before_their_diagnosis():
    same = (_crash("size of tensor a (8) must match b (33) on cuda:0", "TP0"),
            _crash("size of tensor a (8) must match b (33) on cuda:1", "TP1"))
    signature = sole_signature(same)
    assert signature is not None and signature.params["n0"] == 8  # ranks and numbers normalised away
    other = (same[0], _crash("CUDA error: an illegal memory access was encountered", "TP1"))
    assert sole_signature(other) is None  # which one is the cause is the rules' call


class _DyingService:
    """A live service that read as crash text, then exits after `turns` polls."""

    def __init__(self, turns: int):
        self.turns = turns

    def poll(self):
        from ddtreed.records import ExitStatus

        self.turns -= 1
        return ExitStatus(code=1, signal=None) if self.turns < 0 else None


class _Rules:
    def __init__(self):
        self.calls = 0

    def diagnose(self, crashes, context=None):
        self.calls += 1
        raise RuntimeError("a rule's bug")


def test_a_failing_diagnosis_of_live_text_does_not_stop_the_wait_for_the_exit():
    """The early diagnosis of live crash text (made while the service exits) fails: the failure
    is logged, the wait goes on, and the exit confirms the crash (observed() says "not observed":
    handle_crash comes next, which records the crash before it asks the rules again)."""
    from ddtreed.loop import incident_path
    from ddtreed.testing import FakeClock as Clock

    clock = Clock()

    class Loop:
        service = _DyingService(turns=3)
        rules = _Rules()
        context = None

        def __init__(self):
            self.clock = clock

        def wait(self, seconds, condition=lambda: False, sleep=None):
            clock.sleep(seconds)

    loop = Loop()
    crashes = (_crash("size of tensor a (8) must match b (33)", "TP0"),)
    assert incident_path.observed(loop, crashes) is False  # a crash: handle_crash follows
    assert loop.rules.calls == 1
