"""Session 8's adversarial pass on the diagnosis warm-up (perfdetect, ddtreed/loop/warmup.py): the
real `Daemon` loop, rules, scorer and SQLite store on a scripted service. A warm-up whose diagnosis
raises is logged, not retried, and the daemon goes on to record the real crash; a service that dies
at once (its crash lines with its first output) is recorded as it is, the warm-up never in its
path; a service that prints a handled error and keeps serving gets no warm-up inside its judgement."""

from __future__ import annotations

import sys
from pathlib import Path

from ddtreed.loop.daemon import EXIT_OK
from ddtreed.loop.warmup import WARM_MARK
from ddtreed.records import Outcome
from ddtreed.testing import Launch, READY_LINE, founding_traceback

sys.path.insert(0, str(Path(__file__).parent))
from test_loop_middle import Loop  # noqa: E402

FOUNDING = founding_traceback("TP0") + founding_traceback("TP1")


def spy(loop: Loop, fail_warm: bool = False) -> list[dict]:
    rules, calls = loop.daemon.rules, []
    original = rules.diagnose

    def diagnose(crashes, *args, **kwargs):
        warm = any(WARM_MARK in (crash.message or "") for crash in crashes)
        calls.append({"warm": warm, "incidents": len(loop.daemon.store.list_incidents()),
                      "state": loop.daemon.lifecycle.state})
        if warm and fail_warm:
            raise RuntimeError("a rule set that fails on the warm-up's crash")
        return original(crashes, *args, **kwargs)

    rules.diagnose = diagnose
    return calls


def test_a_warm_up_that_raises_is_not_retried_and_the_real_crash_is_recorded(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(crash_after_s=30.0, crash_lines=FOUNDING)
                if start == 1 else Launch(), policy={"mode": "off"})
    calls = spy(loop, fail_warm=True)
    assert loop.run() == EXIT_OK
    assert [call["warm"] for call in calls].count(True) == 1  # tried once, never in a loop
    assert loop.daemon.warm_up.history == []
    outcome = next(event for event in loop.events if isinstance(event, Outcome))
    incident = loop.incident(outcome.incident_id)
    assert incident["category"] == "cuda-graph-shape-mismatch"
    assert len(loop.daemon.store.list_incidents()) == 1


def test_a_service_dying_with_its_first_output_is_recorded_and_the_warm_up_is_not_in_its_path(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(lines=FOUNDING, exit_code=1) if start == 1 else Launch(),
                policy={"mode": "off"})
    calls = spy(loop)
    assert loop.run() == EXIT_OK
    outcome = next(event for event in loop.events if isinstance(event, Outcome))
    assert loop.incident(outcome.incident_id)["category"] == "cuda-graph-shape-mismatch"
    first_real = next(index for index, call in enumerate(calls) if not call["warm"])
    assert not any(call["warm"] for call in calls[:first_real])  # nothing ran before the crash's diagnosis
    assert all(WARM_MARK not in (i.get("message") or "") for i in
               (loop.incident(row["id"]) for row in loop.daemon.store.list_incidents()))


def test_the_warm_up_never_runs_inside_the_judgement_of_a_handled_error(tmp_path):
    handled = ("Traceback (most recent call last):", '  File "/srv/app.py", line 3, in handle',
               "    raise ValueError(text)", "ValueError: Invalid request: 'max_new_tokens' must be positive", "")
    loop = Loop(tmp_path, lambda argv, env, start: Launch(lines=(READY_LINE,), crash_after_s=1.0, crash_lines=handled,
                                                         crash_exit_code=None), stop_on=None, policy={"mode": "off"})
    loop.clock.at(loop.clock.now + 60.0, loop.daemon.request_stop)
    calls = spy(loop)
    assert loop.run() == EXIT_OK
    warm = [index for index, call in enumerate(calls) if call["warm"]]
    real = [index for index, call in enumerate(calls) if not call["warm"]]
    assert len(warm) <= 1 and real
    assert not warm or warm[0] < real[0]
    assert {row["status"] for row in loop.daemon.store.list_incidents()} == {"observed"}
