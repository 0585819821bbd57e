"""The diagnosis warm-up (ddtreed/loop/warmup.py): the daemon runs the diagnosis path once on a
built-in synthetic crash after the service launched and its logs were first read, before the first
real crash; it writes nothing, and a crash that arrives while it runs is still detected and recorded.

The middle tier (the real `Daemon` loop, rules, scorer and SQLite store; a scripted service on a
fake clock) for the order of events, then a real `ddtreed run` supervising a real service process.
"""

from __future__ import annotations

import gc
import signal
import sys
import weakref
from pathlib import Path

from ddtreed.loop.daemon import EXIT_OK
from ddtreed.loop.warmup import WARM_MARK, DiagnosisWarmUp
from ddtreed.records import ExitStatus, Healthy, Outcome
from ddtreed.testing import Launch, founding_traceback

sys.path.insert(0, str(Path(__file__).parent / "programs"))
sys.path.insert(0, str(Path(__file__).parent))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, wait_for  # noqa: E402
from test_loop_middle import Loop  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402

FOUNDING = founding_traceback("TP0") + founding_traceback("TP1")


def serving_then_crashing(after_s: float = 30.0):
    """Healthy at start, then dies of the founding traceback `after_s` into its life (first launch only)."""
    return lambda argv, env, start: Launch(crash_after_s=after_s, crash_lines=FOUNDING) if start == 1 else Launch()


class Watch:
    """Every `RuleSet.diagnose` call of the daemon, in order: warm-up or real, and what was true then."""

    def __init__(self, loop: Loop):
        self.loop, self.calls = loop, []
        rules = loop.daemon.rules
        original = rules.diagnose

        def diagnose(crashes, *args, **kwargs):
            warm = any(WARM_MARK in (crash.message or "") for crash in crashes)
            service = loop.daemon.service
            catch_alls = rules._prefilter.catch_alls
            self.calls.append({"warm": warm, "launches": len(loop.host.launches),
                               "reads": service.reads if service is not None else 0,
                               "incidents": len(loop.daemon.store.list_incidents()),
                               "state": loop.daemon.lifecycle.state,
                               "frozen": gc.get_freeze_count(),  # objects the collector skips (freeze_heap)
                               # the catch-all message patterns of the RuntimeError rules: searched yet?
                               "catch_alls_warm": {p.pattern: p.warm for rule in rules.rules
                                                   if "RuntimeError" in rule.conditions.exceptions
                                                   for p in rule.conditions.messages if p.pattern in catch_alls}})
            if warm and self.during_warm_up is not None:
                self.during_warm_up()
            return original(crashes, *args, **kwargs)

        self.during_warm_up = None
        rules.diagnose = diagnose


def test_the_warm_up_runs_once_before_the_first_crash_after_the_first_log_read(tmp_path):
    loop = Loop(tmp_path, serving_then_crashing(), policy={"mode": "off"})
    watch = Watch(loop)
    assert loop.run() == EXIT_OK
    warm = [call for call in watch.calls if call["warm"]]
    real = [call for call in watch.calls if not call["warm"]]
    assert len(warm) == 1 and real, watch.calls
    assert watch.calls.index(warm[0]) < watch.calls.index(real[0])  # before the first crash
    assert warm[0]["launches"] == 1 and warm[0]["reads"] >= 1  # the launch and its first read came first
    assert warm[0]["state"] in ("starting", "running")
    assert [w.rule_id for w in loop.daemon.warm_up.history] == ["sglang-internal-error"]
    assert loop.daemon.warm_up.history[0].crashes == 2  # both synthetic ranks assembled
    # The catch-alls every RuntimeError's candidates meet were searched by the warm-up, not by
    # the first real crash's diagnosis (RuleSet.warm).
    assert warm[0]["catch_alls_warm"] and not any(warm[0]["catch_alls_warm"].values())
    assert real[0]["catch_alls_warm"] == dict.fromkeys(warm[0]["catch_alls_warm"], True)
    assert set(loop.daemon.warm_up.history[0].catch_alls) >= set(real[0]["catch_alls_warm"])
    # The heap was frozen after the warm-up: the first crash's diagnosis ran with the start-up
    # heap out of the collector's walk; the daemon's end gave it back.
    assert warm[0]["frozen"] == 0 and loop.daemon.warm_up.history[0].frozen > 0
    assert real[0]["frozen"] > 0  # (fewer than frozen: frozen objects freed by reference counting leave it)
    assert gc.get_freeze_count() == 0


def test_the_warm_up_writes_no_incident(tmp_path):
    """A healthy service: the warm-up ran and the store holds nothing, neither then nor after."""
    loop = Loop(tmp_path, lambda argv, env, start: Launch(), stop_on=None)
    loop.clock.at(loop.clock.now + 30.0, loop.daemon.request_stop)  # 30 s of serving, then a stop
    watch = Watch(loop)
    assert loop.run() == EXIT_OK
    assert any(isinstance(event, Healthy) for event in loop.events)
    assert [call["incidents"] for call in watch.calls if call["warm"]] == [0]
    assert len(loop.daemon.warm_up.history) == 1
    assert loop.daemon.store.list_incidents() == []


def test_a_crash_arriving_during_the_warm_up_is_detected_and_recorded(tmp_path):
    loop = Loop(tmp_path, serving_then_crashing(after_s=3600.0), policy={"mode": "off"})
    watch = Watch(loop)

    def crash_now() -> None:  # the service dies of the founding traceback while the warm-up runs
        process = loop.host.current
        loop.host.write(process.pid, FOUNDING)
        process.crashed, process.status = True, ExitStatus(code=1, signal=None)

    watch.during_warm_up = crash_now
    assert loop.run() == EXIT_OK
    assert len(loop.daemon.warm_up.history) == 1  # the warm-up finished
    outcome = next(event for event in loop.events if isinstance(event, Outcome))
    incident = loop.incident(outcome.incident_id)
    assert incident["category"] == "cuda-graph-shape-mismatch"
    assert WARM_MARK not in (incident["message"] or "")
    assert [step["step"] for step in incident["steps"]][:2] == ["detected", "diagnosed"]
    assert len(loop.daemon.store.list_incidents()) == 1


def test_a_reload_thaws_the_heap_so_the_old_rules_are_collected_and_the_new_ones_warm_and_refreeze(tmp_path):
    """SIGHUP while serving: the old wiring (frozen with the heap after the first warm-up) is
    collectable again, the new rule set is warmed, the heap frozen again; nothing of the old rule
    set survives the new freeze's collection."""
    loop = Loop(tmp_path, lambda argv, env, start: Launch(), stop_on=None)
    seen: dict = {}

    def hang_up() -> None:  # 30 s into serving: the first warm-up has run
        seen["warm_ups_before"] = len(loop.daemon.warm_up.history)
        seen["frozen_before"] = gc.get_freeze_count()
        seen["old"] = weakref.ref(loop.daemon.rules)
        loop.daemon.signals.put(signal.SIGHUP)

    reload = loop.daemon.reload

    def reloading() -> None:
        reload()
        seen["frozen_after_reload"] = gc.get_freeze_count()

    def check_then_stop() -> None:
        seen["old_alive"] = seen["old"]() is not None
        seen["frozen_later"] = gc.get_freeze_count()
        loop.daemon.request_stop()

    loop.daemon.reload = reloading
    loop.clock.at(loop.clock.now + 30.0, hang_up)
    loop.clock.at(loop.clock.now + 60.0, check_then_stop)
    assert loop.run() == EXIT_OK
    assert loop.daemon.reloads == 1
    first, second = loop.daemon.warm_up.history  # one warm-up per rule set
    assert seen["warm_ups_before"] == 1 and first.frozen > 0 and seen["frozen_before"] > 0
    assert seen["frozen_after_reload"] == 0  # thawed by the reload
    assert second.frozen > 0 and seen["frozen_later"] > 0
    assert not seen["old_alive"]  # the replaced rule set was collected, not kept frozen
    assert gc.get_freeze_count() == 0


def test_not_due_before_a_read_while_a_traceback_is_assembled_or_off_the_idle_states():
    class Assembler:
        busy = False

    class Service:
        reads, assembler = 0, Assembler()

    class Rules:
        pass

    warm_up, service, rules = DiagnosisWarmUp(), Service(), Rules()
    assert not warm_up.due(rules, "starting", service)  # the first log read has not happened
    service.reads = 1
    assert warm_up.due(rules, "starting", service) and warm_up.due(rules, "running", service)
    assert not warm_up.due(rules, "crashed", service) and not warm_up.due(rules, "backoff", service)
    assert not warm_up.due(rules, "starting", None)
    Assembler.busy = True  # a traceback on its way: the warm-up waits
    assert not warm_up.due(rules, "starting", service)


def test_a_real_daemon_warms_up_before_its_first_crash_and_records_only_the_real_one(tmp_path):
    """`ddtreed run` supervising a real service that serves, then dies of the founding crash."""
    config = fast_service.write_config(tmp_path, port=free_port(), extra_args=("--crash-after", "1.5"),
                                       policy={"mode": "off", "max_restarts": 1})
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("incident_opened"), 60, what="the first incident")
    finally:
        daemon.stop()
    names = [event.get("event") for event in daemon.events()]
    assert names.count("diagnosis_warmed") == 1, names
    warmed = next(event for event in daemon.events() if event.get("event") == "diagnosis_warmed")
    assert warmed["heap_frozen"] > 0  # the daemon process froze its start-up heap
    assert names.index("diagnosis_warmed") < names.index("incident_opened")
    from ddtreed.config import load
    from ddtreed.incidents import Store

    store = Store(load(config).database)
    incidents = store.list_incidents()
    assert incidents and all(WARM_MARK not in (row["message"] or "") for row in incidents)
    assert incidents[-1]["category"] == "cuda-graph-shape-mismatch"


def test_the_assembler_is_busy_while_a_traceback_is_on_its_way():
    from ddtreed.records import LogChunk
    from ddtreed.tracebacks.assembler import Assembler

    assembler = Assembler(eager=True)
    assert not assembler.busy
    assembler.feed(LogChunk("log", 1, FOUNDING[:3], 0.0))  # header and frames, no error line yet
    assert assembler.busy and assembler.take(0.0) == []
    assembler.feed(LogChunk("log", 4, FOUNDING[3:], 0.0))
    assert assembler.take(0.0) and not assembler.busy


def test_no_warm_up_once_the_rules_diagnosed_a_crash():
    """A crash before the warm-up (the store retrying a locked write answers the loop's turns while
    the state is still `running`): the warm-up never runs inside that crash path, nor after it."""
    class Assembler:
        busy = False

    class Service:
        reads, assembler = 1, Assembler()

    from ddtreed.paths import shipped
    from ddtreed.rules import load_rules
    from ddtreed.tracebacks.assembler import assemble_lines

    rules, warm_up = load_rules([shipped("rules")]), DiagnosisWarmUp()
    assert warm_up.due(rules, "running", Service())
    rules.diagnose(assemble_lines(FOUNDING)[0])
    assert not warm_up.due(rules, "running", Service())


def test_a_warm_that_raises_is_logged_once_and_the_real_crash_is_still_recorded(tmp_path):
    """`RuleSet.warm` failing (a rule set it cannot handle) ends that warm-up, never the daemon."""
    loop = Loop(tmp_path, serving_then_crashing(), policy={"mode": "off"})
    calls = []

    def warm(crashes):
        calls.append(len(crashes))
        raise RuntimeError("a rule set whose catch-alls cannot be searched")

    loop.daemon.rules.warm = warm
    assert loop.run() == EXIT_OK
    assert calls == [2]  # tried once, on both synthetic ranks, never again
    assert loop.daemon.warm_up.history == []
    outcome = next(event for event in loop.events if isinstance(event, Outcome))
    assert loop.incident(outcome.incident_id)["category"] == "cuda-graph-shape-mismatch"
    assert len(loop.daemon.store.list_incidents()) == 1
