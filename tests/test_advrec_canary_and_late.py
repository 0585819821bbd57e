"""Adversary's tests of record-before-diagnosis (71e2591) on two paths that rewrite the row.

A failed canary's incident is recorded with source `canary` before the rules judge it, and
`set_diagnosis` then rewrites the row's diagnosis: it must keep that source. Ranks that finish
their tracebacks while the tree goes down (`late`) are diagnosed anew with the first ones: the
row then carries the rules' choice over all of them (its fingerprint included), and the
metrics' counts follow its category.

The real crash path (`handle_crash`), rules and SQLite store of a daemon on a fake host
(tests/test_loop_middle.py's harness), the service started and then handed the failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddtreed.loop.incident_path import handle_crash, sole_signature
from ddtreed.records import Crash, Frame
from ddtreed.testing import healthy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_loop_middle import Loop  # noqa: E402


def _started(tmp_path) -> Loop:
    loop = Loop(tmp_path, lambda argv, env, start: healthy(), policy={"mode": "off"})
    assert loop.daemon.start_service()
    return loop


def _rows_at_diagnosis(loop: Loop) -> list[list[tuple[str, str]]]:
    """(source, category) of every incident on disk each time the rules are asked (a second
    connection: what `ddtreed incidents` sees)."""
    from ddtreed.incidents import Store

    rules = loop.daemon.rules
    diagnose = rules.diagnose
    seen: list[list[tuple[str, str]]] = []

    def watched(crashes, context=None, *args, **kwargs):
        with Store(loop.daemon.store.path, create=False) as reader:
            seen.append([(row["source"], row["category"]) for row in reader.list_incidents()])
        return diagnose(crashes, context, *args, **kwargs)

    rules.diagnose = watched  # type: ignore[method-assign]
    return seen


def test_a_failed_canary_recorded_before_its_diagnosis_keeps_its_source(tmp_path):
    loop = _started(tmp_path)
    seen = _rows_at_diagnosis(loop)
    crash = Crash(kind="canary", exception=None, source="canary", detected_at=loop.clock.time(),
                  message="canary: output diverged at token 3 of 16 (prompt 1 of 3)")
    outcome = handle_crash(loop.daemon, (crash,), None)
    assert seen[0] == [("canary", "unknown")]  # the row came first, its source already right
    incident = loop.incident(outcome.incident_id)
    assert (incident["source"], incident["category"]) == ("canary", "silent-corruption")
    assert incident["rule_id"] and loop.steps(outcome.incident_id)[:2] == ["detected", "diagnosed"]
    counts = loop.daemon.store.current.counts()["incidents"]
    assert [(row["category"], row["count"]) for row in counts] == [("silent-corruption", 1)]


def _rank(rank: str, exception: str, message: str, function: str) -> Crash:
    frames = (Frame(file=f"/venv/lib/python3.11/site-packages/sglang/srt/managers/{function}.py", line=1,
                    function=function),)
    return Crash(kind="traceback", exception=exception, message=message, frames=frames, rank=rank,
                 prefix="Scheduler hit an exception")


def test_ranks_that_fail_after_the_stop_rewrite_the_row_with_the_rules_choice_over_all(tmp_path):
    loop = _started(tmp_path)
    first = (_rank("TP0", "RuntimeError", "NCCL communicator was aborted on rank 0", "scheduler"),)
    late = (_rank("TP1", "torch.AcceleratorError", "CUDA error: an illegal memory access was encountered",
                  "model_runner"),)
    recorded = sole_signature(first)
    assert recorded is not None  # recorded before the rules ran, under TP0's signature
    drain = loop.daemon.service.drain
    loop.daemon.service.drain = lambda *args, **kwargs: late + tuple(drain(*args, **kwargs))
    outcome = handle_crash(loop.daemon, first, None)
    chosen = loop.daemon.rules.diagnose(first + late, loop.daemon.context)
    assert chosen.signature.fingerprint != recorded.fingerprint  # the late rank is the cause
    incident = loop.incident(outcome.incident_id)
    assert incident["source"] == "crash"
    assert incident["fingerprint"] == chosen.signature.fingerprint
    assert incident["category"] == chosen.match.category and incident["rule_id"] == chosen.match.rule_id
    assert sorted(incident["ranks"]) == ["TP0", "TP1"]
    counts = loop.daemon.store.current.counts()["incidents"]
    assert [(row["category"], row["count"]) for row in counts] == [(chosen.match.category, 1)]
