"""Adversary (adv17) of the late diagnosis at start-up (1cd9098, 07779e1): `recover()` closes the
incident a killed daemon left undiagnosed, then `diagnose_recorded()` judges the crash from its
record. Driven here on real SQLite files with the real functions in the order `Daemon.run` calls
them (recover, then diagnose_recorded), the shipped rules, the real DurableStore.

1. A stop (SIGTERM) that arrives while the late diagnosis waits on the database (a lock held by the
   CLI or a backup, a full disk: DurableStore retries through the daemon's `wait`, which raises
   `Stopping` for a queued SIGTERM) is swallowed by diagnose_recorded's `except Exception`:
   `Stopping` is an Exception. The daemon then carries on and launches the service instead of
   stopping (systemd's stop then ends in its SIGKILL after TimeoutStopSec).
2. A daemon killed again during start-up, after recover() closed the incident and before
   diagnose_recorded() wrote its verdict, leaves the incident undiagnosed for good: the next start
   only looks at incidents still *open*, so the crash is never judged (the very symptom 1cd9098
   fixed: an incident with rule_id None), one kill later.
3. The late verdict rewrites the incident's fingerprint from the *redacted* record: a crash whose
   first line held a secret (`--admin-api-key X` in argparse's "unrecognized arguments") was
   recorded under the live signature (the one the same crash gets at every other time); after the
   late diagnosis the incident carries a fingerprint no live crash ever has, so the signature
   history (`find_recent`, `ddtreed diagnose`'s previous incidents) no longer finds it.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))
sys.path.insert(0, str(Path(__file__).parent))

from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.incidents.durable import DurableStore  # noqa: E402
from ddtreed.loop.incident_path import diagnose_recorded, sole_signature  # noqa: E402
from ddtreed.loop.lifecycle import Stopping  # noqa: E402
from ddtreed.loop.recovery import recover  # noqa: E402
from ddtreed.paths import shipped  # noqa: E402
from ddtreed.records import Crash  # noqa: E402
from ddtreed.remediation import Engine, load_remediations  # noqa: E402
from ddtreed.rules import load_rules  # noqa: E402
from ddtreed.service.host import LocalHost  # noqa: E402


def _founding_crashes(rules):
    from fast_service import founding_traceback
    from ddtreed.cli.diagnose_cmd import diagnose_lines

    return diagnose_lines(founding_traceback(["TP0"]).splitlines(), "service.log", rules, None)[0].crashes


def _killed_at_commit(store: Store, crashes) -> int:
    """What handle_crash leaves when killed at `incident:committed`: the row under the crash's sole
    signature, no diagnosis, a `detected` step only."""
    return store.open_incident("crash", crashes, sole_signature(crashes), None, None, service="sglang")


def test_a_stop_during_the_late_diagnosis_is_not_swallowed(tmp_path):
    rules = load_rules([shipped("rules")])
    state = tmp_path / "state"
    state.mkdir()
    path = database_path(state)
    with Store(path) as first:
        incident = _killed_at_commit(first, _founding_crashes(rules))
    waits: list[float] = []

    def daemon_wait(seconds: float) -> None:
        # Daemon.wait runs _turn(), which raises Stopping for a SIGTERM queued meanwhile
        waits.append(seconds)
        raise Stopping()

    store = DurableStore(Store(path, busy_timeout_s=0.2), wait=daemon_wait)
    engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]), incidents=store.current)
    ids = recover(engine, store, LocalHost(), str(state), None, None)
    assert incident in ids
    blocker = sqlite3.connect(str(path), timeout=0.1, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another writer (the CLI, a backup) holds the lock: writes retry
    try:
        # the operator's `systemctl stop` arrives while the verdict waits for the lock: the daemon must stop
        with pytest.raises(Stopping):
            diagnose_recorded(store, rules, None, ids)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        store.current.close()
    assert waits, "the write was expected to wait for the lock (and meet the stop there)"


def test_a_second_kill_during_start_up_leaves_the_recorded_crash_undiagnosed_for_good(tmp_path):
    rules = load_rules([shipped("rules")])
    state = tmp_path / "state"
    state.mkdir()
    crashes = _founding_crashes(rules)
    live = rules.diagnose(crashes, None)
    with Store(database_path(state)) as store:
        incident = _killed_at_commit(store, crashes)
        engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]), incidents=store)
        # the second daemon: recover() closes the incident, then it is killed (OOM killer, the
        # watchdog, a second CI kill) before diagnose_recorded() wrote anything
        recover(engine, store, LocalHost(), str(state), None, None)
        assert store.get(incident)["status"] == "interrupted"
    with Store(database_path(state)) as store:  # the third daemon: Daemon.run's own two calls
        engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]), incidents=store)
        ids = recover(engine, store, LocalHost(), str(state), None, None)
        diagnose_recorded(store, rules, None, ids)
        shown = store.get(incident)
    # the crash is still recorded, and still the one the rules can read: it must be judged at some start
    assert shown["tracebacks"], shown
    assert (shown["rule_id"], shown["category"]) == (live.match.rule_id, live.match.category), (
        shown["rule_id"], shown["category"], [step["step"] for step in shown["steps"]])


def test_the_late_verdict_keeps_the_fingerprint_the_crash_was_recorded_under(tmp_path):
    rules = load_rules([shipped("rules")])
    # the launcher's own error: an argparse line that names a secret flag of a newer SGLang
    crash = Crash(kind="traceback", exception=None, message="launch_server.py: error: unrecognized arguments: "
                                                           "--admin-api-key s3cr3t-v4lue --enable-foo")
    recorded_under = sole_signature((crash,))
    assert rules.diagnose((crash,), None).signature.fingerprint == recorded_under.fingerprint  # the live one
    with Store(database_path(tmp_path)) as store:
        incident = _killed_at_commit(store, (crash,))
        assert store.get(incident)["fingerprint"] == recorded_under.fingerprint
        assert diagnose_recorded(store, rules, None, [incident]) == [incident]
        shown = store.get(incident)
        assert "s3cr3t" not in str(shown)  # redaction holds for what was rewritten
        assert shown["rule_id"] is not None
        # the verdict only: the incident keeps the signature of the crash it recorded, so the same
        # crash met again (live: the same fingerprint) finds this incident in its history
        assert shown["fingerprint"] == recorded_under.fingerprint, (shown["fingerprint"], recorded_under.fingerprint)
        assert [row["id"] for row in store.find_recent(recorded_under.fingerprint)] == [incident]


def test_a_stop_met_during_start_up_recovery_ends_the_daemon_as_stopped_without_a_launch(tmp_path, monkeypatch):
    """The daemon's side of the first test: the `Stopping` the late diagnosis lets through (or that
    recovery's own writes meet) is a stop like any other: `run()` returns 0, the last status says
    `stopped`, and no service is launched. Before, recovery ran outside the loop's `try`, so the stop
    left `run()` as an exception with no final status."""
    from test_loop_middle import Loop

    from ddtreed.loop import daemon as daemon_module
    from ddtreed.loop.daemon import EXIT_OK
    from ddtreed.ops.status import read_status
    from ddtreed.testing import healthy

    def stopped_while_writing(*args, **kwargs):
        raise Stopping()

    monkeypatch.setattr(daemon_module, "diagnose_recorded", stopped_while_writing)
    loop = Loop(tmp_path, lambda argv, env, start: healthy(), policy={"mode": "off"})
    assert loop.run() == EXIT_OK
    assert loop.host.launches == []
    status = read_status(str(tmp_path / "state"))
    assert status is not None and status.state == "stopped", status
