"""Adversary's tests of record-before-diagnosis (71e2591, f8206c3): the rules fail.

The incident's row is committed before the rules judge a crash whose ranks printed one error;
these tests make the rules raise and look at what the daemon then does: the order of the
row's sync and the daemon's acts on the service (docs/incidents.md "Durability": nothing leaves
the daemon before `make_durable`), what `ddtreed incidents show` says of a crash the rules never
judged, and what a rules failure does to a healthy service that printed crash text.

The real loop, rules and SQLite store on a fake host (tests/test_loop_middle.py's harness).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddtreed.loop.daemon import EXIT_OK
from ddtreed.testing import Launch, crashing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_loop_middle import HANDLED, Loop  # noqa: E402


def _failing_rules(loop: Loop) -> None:
    """The rules raise on every crash but the warm-up's synthetic one (a rule's bug)."""
    rules = loop.daemon.rules
    diagnose = rules.diagnose

    def failing(crashes, context=None, *args, **kwargs):
        if all(crash.source == "<warm-up>" for crash in crashes):
            return diagnose(crashes, context, *args, **kwargs)
        raise RuntimeError("a rule's bug")

    rules.diagnose = failing  # type: ignore[method-assign]


def _acts(loop: Loop) -> list[str]:
    """What the daemon does, in order: the incident row committed ("row"), the WAL synced
    ("durable"), a state published (the status snapshot: "state:NAME"), the service stopped."""
    daemon, store = loop.daemon, loop.daemon.store
    acts: list[str] = []

    def watch(owner, name, label):
        real = getattr(owner, name)

        def watched(*args, **kwargs):
            result = real(*args, **kwargs)
            acts.append(label(*args) if callable(label) else label)
            return result

        setattr(owner, name, watched)

    watch(store, "open_incident", "row")
    watch(store, "make_durable", "durable")
    watch(daemon.lifecycle, "enter", lambda state, *_: f"state:{state}")
    real_stop = daemon.stop_service

    def stop(reason, *args, **kwargs):
        acts.append(f"stop:{reason}")
        return real_stop(reason, *args, **kwargs)

    daemon.stop_service = stop  # type: ignore[method-assign]
    return acts


def test_a_failing_diagnosis_still_syncs_the_row_before_the_daemon_stops_the_service(tmp_path):
    """The rules raise after the row was committed (NORMAL, not synced): the daemon ends with the
    error, and on its way out it publishes `stopping` and stops the service. The row must be
    durable before that, as on every other path (the strace test's rule: at a signal to the
    service, the -wal holds no write not synced after it)."""
    loop = Loop(tmp_path, lambda argv, env, start: crashing(), policy={"mode": "off"})
    _failing_rules(loop)
    acts = _acts(loop)
    with pytest.raises(RuntimeError, match="a rule's bug"):
        loop.run()
    assert "row" in acts, acts
    after = acts[acts.index("row") + 1:]
    first_act = next(index for index, act in enumerate(after) if act.startswith(("state:", "stop:")))
    assert "durable" in after[:first_act], f"the daemon acted before the row was made durable: {acts}"


def test_a_healthy_service_whose_crash_text_the_rules_cannot_judge_is_observed_not_stopped(tmp_path):
    """Crash text from a live service that stays up and healthy is `observed`, whatever the
    rules say of it; here they fail on it every time. The service must not be stopped for it
    (the daemon ending with the rules' error stops it on the way out), and the text is recorded."""
    loop = Loop(tmp_path, lambda argv, env, start: Launch(crash_after_s=30.0, crash_lines=HANDLED,
                                                          crash_exit_code=None), stop_on=None)
    _failing_rules(loop)
    acts = _acts(loop)
    loop.clock.at(loop.clock.monotonic() + 300.0, loop.daemon.request_stop)
    assert loop.run() == EXIT_OK  # supervised until the stop asked for
    assert [act for act in acts if act.startswith("stop:")] == ["stop:ddtreed stopping"]
    assert loop.outcomes == [] and len(loop.host.launches) == 1  # never restarted
    [incident] = loop.daemon.store.list_incidents()
    assert incident["status"] == "observed"
    assert loop.steps(incident["id"])[-1] == "observed"
    assert "crashed" not in loop.daemon.lifecycle.history


def test_a_crash_the_rules_never_judged_does_not_say_no_rule_matched(tmp_path, capsys):
    """The rules failed after the row (or the daemon was killed between the row and its
    diagnosis): the incident is category `unknown` with only its `detected` step, and the next
    start's recovery closes it. `ddtreed incidents show` must not tell a person that no rule
    matched the crash: no rule was asked. When the next start's rules fail on it too, it stays
    "not diagnosed"; at a start whose rules work (session 17), it gets their reading, marked late."""
    from ddtreed.cli import main
    from ddtreed.testing import healthy
    from ddtreed.records import Healthy

    def header(state) -> str:
        capsys.readouterr()
        assert main(["incidents", "show", "1", "--state-dir", str(state)]) == 0
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("incident "))

    loop = Loop(tmp_path, lambda argv, env, start: crashing(), policy={"mode": "off"})
    _failing_rules(loop)
    with pytest.raises(RuntimeError, match="a rule's bug"):
        loop.run()
    still = Loop(tmp_path, lambda argv, env, start: healthy(), stop_on=Healthy, policy={"mode": "off"})
    _failing_rules(still)  # the same bug at the next start: the recorded crash cannot be judged either
    assert still.run() == EXIT_OK  # recovery, then a healthy service: a rule's bug is no outage
    [incident] = still.daemon.store.list_incidents()
    assert incident["category"] == "unknown" and incident["status"] != "open"  # closed by recovery
    shown = header(tmp_path / "state")
    assert "no rule matched" not in shown and "not diagnosed" in shown, shown
    again = Loop(tmp_path, lambda argv, env, start: healthy(), stop_on=Healthy, policy={"mode": "off"})
    assert again.run() == EXIT_OK  # a start with working rules: the recorded crash gets their reading, late
    judged = again.daemon.store.get(incident["id"])
    assert judged["status"] == incident["status"] and judged["category"] == "cuda-graph-shape-mismatch"
    assert [step["step"] for step in judged["steps"]][-1] == "diagnosed"


def test_a_daemon_ended_by_the_rules_error_does_not_say_its_restart_budget_was_spent(tmp_path):
    """The rules fail on every crash: the daemon ends with the error (the row kept for the next
    start). Its last status (what `ddtreed status` reads) must say why it ended, not that it
    gave up on a restart budget it never spent (one start of five)."""
    from ddtreed.ops.status import read_status

    loop = Loop(tmp_path, lambda argv, env, start: crashing(), policy={"mode": "off"})
    _failing_rules(loop)
    with pytest.raises(RuntimeError, match="a rule's bug"):
        loop.run()
    status = read_status(str(tmp_path / "state"))
    assert status is not None and status.state == loop.daemon.lifecycle.state
    assert "restart budget" not in status.status_text, status.status_text
    assert "a rule's bug" in status.status_text, status.status_text


def test_a_failing_diagnosis_of_ranks_with_different_errors_loses_no_crash_either(tmp_path):
    """Ranks that printed different errors are diagnosed before their row (which one is the
    cause is the rules' call). When the rules fail there, the crash must still be recorded for
    the next start, as it is for ranks of one error: the daemon ends with the error either way."""
    from ddtreed.testing import founding_traceback

    other = tuple(line.replace("RuntimeError: The size of tensor a (8) must match the size of tensor b (33) at "
                               "non-singleton dimension 0", "RuntimeError: CUDA error: an illegal memory access "
                               "was encountered") for line in founding_traceback("TP1"))
    loop = Loop(tmp_path, lambda argv, env, start: crashing(founding_traceback("TP0") + other),
                policy={"mode": "off"})
    _failing_rules(loop)
    with pytest.raises(RuntimeError, match="a rule's bug"):
        loop.run()
    [incident] = loop.daemon.store.list_incidents()
    whole = loop.incident(incident["id"])
    assert sorted(whole["ranks"]) == ["TP0", "TP1"] and len(whole["tracebacks"]) == 2
    assert [step["step"] for step in whole["steps"]] == ["detected"]
