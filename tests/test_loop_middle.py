"""The middle tier: the real daemon loop driven through a fake host and a fake clock.

Rules, remediation engine, incident store (a real SQLite file), restart budget and lifecycle are
the real code; only the service is a script (ddtreed.testing). Each test runs in milliseconds of
wall time whatever the probe budgets say, because time moves only when the loop waits.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from ddtreed.config import from_mapping
from ddtreed.loop.daemon import EXIT_GAVE_UP, EXIT_OK, Daemon
from ddtreed.loop.lifecycle import IllegalTransition, Lifecycle, allowed
from ddtreed.ops.notify import Notifier
from ddtreed.preflight import Finding
from ddtreed.preflight.checks import check_port
from ddtreed.preflight.finding import WOULD_CRASH
from ddtreed.loop.preflight_gate import BLOCKED_RECHECK_S
from ddtreed.records import DAEMON_STATES, STEPS, Crash, Healthy, Outcome
from ddtreed.testing import FakeClock, FakeHost, Launch, crashing, founding_traceback, healthy
from ddtreed.loop.wiring import build

FOUNDING_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/target",
                 "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/models/draft",
                 "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "32",
                 "--tp-size", "2", "--port", "30000"]


def config_for(tmp_path, *, policy=None, preflight=False, probe=None):
    return from_mapping({
        "service": {"argv": FOUNDING_ARGV},
        "paths": {"log_dir": str(tmp_path / "logs"), "state_dir": str(tmp_path / "state")},
        "policy": {"mode": "auto", "max_restarts": 5, "restart_window_s": 600.0, "backoff_initial_s": 1.0,
                   "backoff_max_s": 8.0, "stop_grace_s": 5.0, **(policy or {})},
        "probe": {"startup_timeout_s": 600.0, "verify_window_s": 60.0, "poll_interval_s": 0.5, **(probe or {})},
        "preflight": {"enabled": preflight},
        "canary": {"enabled": False},
    }, source=str(tmp_path / "ddtreed.toml"))


class Loop:
    """A daemon on a fake host, the events it emitted, and a stop after the first `stop_on` event."""

    def __init__(self, tmp_path, behaviour, stop_on=Outcome, checks=None, **options):
        self.clock = FakeClock()
        self.host = FakeHost(behaviour, self.clock)
        self.config = config_for(tmp_path, **options)
        wiring = build(self.config, host=self.host, clock=self.clock, prober=self.host.prober,
                       preflight_checks=checks)
        self.daemon = Daemon(self.config, wiring=wiring, notifier=Notifier(None))
        self.events: list[object] = []
        self.daemon.subscribe(self._on_event)
        self.stop_on = stop_on

    def _on_event(self, event) -> None:
        self.events.append(event)
        if self.stop_on is not None and isinstance(event, self.stop_on):
            self.daemon.request_stop()

    def run(self) -> int:
        return self.daemon.run()

    @property
    def outcomes(self) -> list[Outcome]:
        return [event for event in self.events if isinstance(event, Outcome)]

    def steps(self, incident_id: int) -> list[str]:
        return [step["step"] for step in self.daemon.store.get(incident_id)["steps"]]

    def incident(self, incident_id: int) -> dict:
        return self.daemon.store.get(incident_id)


def fixed_by(flag: str):
    """A service that crashes with the founding traceback unless its argv carries `flag`."""
    return lambda argv, env, start: healthy() if flag in argv else crashing()


def test_crash_is_diagnosed_fixed_restarted_verified_and_resolved(tmp_path):
    loop = Loop(tmp_path, fixed_by("--disable-cuda-graph"))
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    assert outcome.status == "resolved"
    incident = loop.incident(outcome.incident_id)
    assert incident["category"] == "cuda-graph-shape-mismatch"
    assert incident["remediation_id"] == "disable-cuda-graph"
    # the patch needs a site-packages the fake host has not: skipped, then the flag fix held
    assert loop.steps(outcome.incident_id) == ["detected", "diagnosed", "skipped", "applied", "restarting",
                                               "restarted", "healthy", "verified"]
    [application] = incident["applications"]
    assert application["status"] == "verified" and application["verified_at"] is not None
    assert "--disable-cuda-graph" in loop.host.launches[-1] and len(loop.host.launches) == 2
    history = loop.daemon.lifecycle.history
    assert history[history.index("crashed"):] == ["crashed", "diagnosing", "remediating", "restarting",
                                                  "starting", "verifying", "running", "stopping", "stopped"]
    assert isinstance(loop.events[-2], Healthy)


def test_a_fix_that_does_not_hold_is_reverted_and_the_next_one_tried(tmp_path):
    def behaviour(argv, env, start):
        if "DFLASH" in argv:
            return healthy()
        if "--disable-cuda-graph" in argv:  # up and healthy, then the same crash within the window
            return Launch(crash_after_s=20.0, crash_lines=founding_traceback())
        return crashing()

    loop = Loop(tmp_path, behaviour)
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    assert outcome.status == "resolved"
    steps = loop.steps(outcome.incident_id)
    # The first fix was healthy when probed (the step says when), then crashed within the window.
    assert steps == ["detected", "diagnosed", "skipped", "applied", "restarting", "restarted", "healthy", "failed",
                     "reverted", "applied", "restarting", "restarted", "healthy", "verified"]
    statuses = {a["remediation_id"]: a["status"] for a in loop.incident(outcome.incident_id)["applications"]}
    assert statuses == {"disable-cuda-graph": "reverted", "ddtree-to-dflash": "verified"}
    assert "--disable-cuda-graph" not in loop.host.launches[-1]  # the revert took the flag back out
    failed = next(s for s in loop.incident(outcome.incident_id)["steps"] if s["step"] == "failed")
    assert failed["data"]["stage"] == "window"
    assert loop.daemon.store.degraded(loop.config.source)["step_id"] == "ddtree-to-dflash"


def test_nothing_left_to_try_escalates_freezes_and_relaunches_unchanged(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: crashing(), stop_on=None, policy={"max_restarts": 4})
    assert loop.run() == EXIT_GAVE_UP  # escalated, then crash-looped unchanged until the budget was spent
    first = loop.outcomes[0]
    assert first.status == "escalated"
    incident = loop.incident(first.incident_id)
    assert loop.steps(first.incident_id)[-1] == "escalated"
    assert incident["frozen"] and [a["status"] for a in incident["applications"]] == ["reverted", "reverted"]
    later = loop.outcomes[1:]
    assert later and all(outcome.status == "open" for outcome in later)
    # The frozen signature's crash loop is one incident that recurred, escalated when the budget ran out.
    assert len({o.incident_id for o in later}) == 1 and later[0].incident_id != first.incident_id
    looping = loop.incident(later[0].incident_id)
    assert looping["recurrences"] == len(later) - 1 and looping["status"] == "escalated"
    assert "frozen" in " ".join(s["detail"] for s in looping["steps"])
    assert "restart budget spent" in looping["outcome"]
    assert loop.host.launches[-1] == FOUNDING_ARGV  # back to the launch that was configured
    assert loop.daemon.board.current.state == "gave-up"
    assert "escalated" in loop.daemon.lifecycle.history


def test_restart_budget_spent_gives_up_with_exit_75(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: crashing(), stop_on=None,
                policy={"mode": "off", "max_restarts": 2, "backoff_initial_s": 2.0})
    started = loop.clock.monotonic()
    assert loop.run() == EXIT_GAVE_UP
    assert EXIT_GAVE_UP == 75
    assert len(loop.host.launches) == 3  # the start and two restarts
    assert [o.status for o in loop.outcomes] == ["open", "open", "open"]
    # One cause, one incident: two recurrences, then escalated when the budget was spent.
    [incident_id] = {o.incident_id for o in loop.outcomes}
    incident = loop.incident(incident_id)
    assert incident["recurrences"] == 2 and incident["status"] == "escalated"
    assert "policy off" in " ".join(s["detail"] for s in incident["steps"])
    assert incident["outcome"].startswith("restart budget spent: 3 starts")
    assert loop.clock.monotonic() - started >= 2.0 + 4.0  # the backoff doubled, in fake seconds
    assert loop.daemon.lifecycle.history[-3:] == ["escalated", "stopping", "gave-up"]


def test_preflight_prevents_the_crash_before_the_first_launch(tmp_path):
    def width_check(inputs):
        yield Finding(check="ddtree-verify-width", severity=WOULD_CRASH, what="verify graph too narrow",
                      why="8 wide, DDTree verifies 33", category="cuda-graph-shape-mismatch",
                      remediations=("disable-cuda-graph",))

    loop = Loop(tmp_path, fixed_by("--disable-cuda-graph"), stop_on=Healthy, preflight=True,
                checks={"ddtree-verify-width": width_check})
    assert loop.run() == EXIT_OK
    assert loop.outcomes == [] and len(loop.host.launches) == 1
    assert "--disable-cuda-graph" in loop.host.launches[0]
    [incident] = loop.daemon.store.list_incidents()
    assert incident["status"] == "prevented" and incident["source"] == "preflight"
    assert loop.steps(incident["id"]) == ["detected", "diagnosed", "applied", "verified"]
    assert [a["status"] for a in loop.incident(incident["id"])["applications"]] == ["verified"]
    assert loop.daemon.lifecycle.history[:5] == ["starting", "preflight", "remediating", "starting", "running"]


def test_a_taken_port_blocks_the_launch_by_default_as_one_incident_until_it_is_freed(tmp_path):
    """SGLang binds its port only after the whole model load: a taken port is a certain crash ten
    minutes later. The default `block_on` stops the launch; each re-check of the blocked launch is
    the same incident (not one per 30 s), and the launch goes ahead once the port is free."""
    rounds = []

    def port_check(inputs):
        rounds.append(inputs.host.busy_ports.copy())
        if len(rounds) == 4:  # whoever held it lets go during the third wait
            inputs.host.busy_ports.clear()
        yield from check_port(inputs)

    loop = Loop(tmp_path, lambda argv, env, start: healthy(), stop_on=Healthy, preflight=True,
                checks={"port-in-use": port_check})
    assert loop.config.preflight.block_on == ("port-in-use",)
    loop.host.busy_ports.add(30000)
    started = loop.clock.monotonic()
    assert loop.run() == EXIT_OK
    assert loop.daemon.lifecycle.history.count("blocked") == 3 and len(loop.host.launches) == 1
    assert loop.clock.monotonic() - started >= 3 * BLOCKED_RECHECK_S
    [incident] = loop.daemon.store.list_incidents()
    assert (incident["source"], incident["category"], incident["status"]) == ("preflight", "port-in-use", "advised")
    assert loop.steps(incident["id"]) == ["detected", "diagnosed", "cleared"]


def _real_hog_crash() -> tuple[str, ...]:
    """Real SGLang 0.5.16 on the H200 (run r2), another process holding all but 3 GiB of the GPU."""
    lines = gzip.decompress((Path(__file__).parent / "fixtures" / "sglang-0.5.16" / "h200-run" /
                             "hog.service.log.gz").read_bytes()).decode().splitlines()
    start = next(i for i, line in enumerate(lines) if "Scheduler hit an exception" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("torch.OutOfMemoryError"))
    return tuple(lines[start:end + 1])


def test_another_process_holding_the_gpu_blocks_the_relaunch_until_it_lets_go(tmp_path):
    """Real 0.5.16's OOM names the holder (pid 4458). No remediation shrinks SGLang for it, and a
    relaunch while it still holds the GPU would fail again after the load: blocked, one incident,
    re-checked every 30 s; once NVML no longer sees the pid, relaunched and verified."""
    holder_checks = []

    def gpu_holders(pids=None):  # NVML: the service's own pids are never on the GPU here
        if 4458 not in (pids or []):
            return []
        holder_checks.append(list(pids))
        return [4458] if len(holder_checks) <= 3 else []  # it lets go during the third wait

    loop = Loop(tmp_path, lambda argv, env, start: crashing(_real_hog_crash()) if start == 1 else healthy(),
                stop_on=Outcome)
    loop.host.gpu_holders = gpu_holders
    started = loop.clock.monotonic()
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    incident = loop.incident(outcome.incident_id)
    assert (incident["category"], incident["rule_id"], incident["status"]) == (
        "cuda-oom", "cuda-oom-gpu-held-by-another-process", "resolved")
    assert "4458" in incident["diagnosis"] and incident["outcome"] == "restarted; healthy"
    steps = loop.steps(outcome.incident_id)
    assert steps[:4] == ["detected", "diagnosed", "waiting", "cleared"] and "healthy" in steps
    assert "applied" not in steps  # never "fixed" by shrinking SGLang
    assert holder_checks[0] == [4458] and len(loop.host.launches) == 2
    assert loop.clock.monotonic() - started >= 3 * 30.0
    assert "blocked" in loop.daemon.lifecycle.history


def test_a_named_holder_that_is_already_gone_is_relaunched_at_once(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: crashing(_real_hog_crash()) if start == 1 else healthy(),
                stop_on=Outcome)
    [outcome] = (loop.run(), loop.outcomes)[1]
    assert "waiting" not in loop.steps(outcome.incident_id)
    assert "blocked" not in loop.daemon.lifecycle.history


def test_a_refused_write_is_recorded_and_the_next_remediation_tried(tmp_path):
    """An ApplyError/OSError from the engine is an `apply-failed` step, never the end of the daemon."""
    loop = Loop(tmp_path, fixed_by("DFLASH"))
    engine = loop.daemon.engine
    real_apply = engine.apply

    def refusing(plan, incident_id=None):
        if plan.remediation_id == "disable-cuda-graph":
            raise OSError(28, "No space left on device")
        return real_apply(plan, incident_id=incident_id)

    engine.apply = refusing
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    assert outcome.status == "resolved"
    steps = loop.steps(outcome.incident_id)
    assert steps[:4] == ["detected", "diagnosed", "skipped", "apply-failed"] and steps[-1] == "verified"


def test_a_probe_failure_without_a_traceback_is_a_probe_failed_crash_rules_may_name(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(healthy=start > 1), policy={"mode": "off"})
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    incident = loop.incident(outcome.incident_id)
    assert incident["tracebacks"][0]["kind"] == "probe-failed"
    assert "probe failed" in incident["message"]


def test_every_step_the_loop_wrote_is_in_the_vocabulary(tmp_path):
    loop = Loop(tmp_path, fixed_by("DFLASH"))
    loop.run()
    written = {step["step"] for incident in loop.daemon.store.list_incidents()
               for step in loop.daemon.store.get(incident["id"])["steps"]}
    assert written and written <= set(STEPS)


def test_an_illegal_transition_is_a_bug_that_raises():
    seen = []
    lifecycle = Lifecycle(lambda state, text: seen.append(state))
    lifecycle.enter("preflight", "checks")
    with pytest.raises(IllegalTransition, match="preflight -> running"):
        lifecycle.enter("running", "serving")
    lifecycle.enter("stopping", "bye")
    lifecycle.enter("stopped", "bye")
    with pytest.raises(IllegalTransition):
        lifecycle.enter("starting", "again")
    with pytest.raises(ValueError, match="daemon state must be one of"):
        lifecycle.enter("dancing", "")
    assert seen == ["preflight", "stopping", "stopped"]
    assert all(allowed(state, "stopping") for state in DAEMON_STATES if state not in ("stopped", "gave-up"))


def test_crash_kinds_are_checked_at_write():
    with pytest.raises(ValueError, match="crash kind must be one of"):
        Crash(kind="segfault", exception=None, message="")
    assert Crash(kind="probe-failed", exception=None, message="").kind == "probe-failed"


def test_sighup_rebuilds_the_wiring_and_the_next_start_uses_the_new_launch(tmp_path):
    import signal

    from ddtreed.config import load
    from ddtreed.demo import to_toml

    tables = {"service": {"argv": FOUNDING_ARGV}, "preflight": {"enabled": False}, "canary": {"enabled": False},
              "paths": {"log_dir": str(tmp_path / "logs"), "state_dir": str(tmp_path / "state")}}
    path = tmp_path / "ddtreed.toml"
    path.write_text(to_toml(tables))
    loop = Loop(tmp_path, lambda argv, env, start: healthy(), stop_on=None)
    loop.daemon.wiring = build(load(path), host=loop.host, clock=loop.clock, prober=loop.host.prober)
    first = loop.daemon.wiring

    def on_healthy(event):
        if isinstance(event, Healthy):
            path.write_text(to_toml({**tables, "service": {"argv": FOUNDING_ARGV + ["--enable-metrics"]},
                                     "policy": {"max_restarts": 9}}))
            loop.daemon.signals.put(signal.SIGHUP)
            loop.daemon.request_stop()

    loop.daemon.subscribe(on_healthy)
    assert loop.run() == EXIT_OK
    assert loop.daemon.reloads == 1 and loop.daemon.wiring is not first
    assert loop.daemon.wiring.host is first.host and loop.daemon.wiring.store is first.store
    assert loop.daemon.budget.max_restarts == 9 and loop.daemon.budget is not first.budget
    assert loop.daemon.launch.argv[-1] == "--enable-metrics"  # used from the next (re)start
    assert loop.host.launches == [FOUNDING_ARGV]


HANDLED = (
    "[2026-01-01 00:00:00] ERROR:    Exception in ASGI application",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/starlette/routing.py", line 76, in app',
    "    await response(scope, receive, send)",
    "ValueError: Invalid request: 'max_new_tokens' must be a positive integer, got -3",
)


def test_item04_a_handled_traceback_while_healthy_is_observed_and_nothing_restarts(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(crash_after_s=30.0, crash_lines=HANDLED,
                                                          crash_exit_code=None), stop_on=None)
    loop.clock.at(loop.clock.monotonic() + 300.0, loop.daemon.request_stop)
    assert loop.run() == EXIT_OK
    assert loop.outcomes == [] and len(loop.host.launches) == 1  # never restarted
    [incident] = loop.daemon.store.list_incidents()
    assert incident["status"] == "observed" and incident["category"] == "unknown"
    assert loop.steps(incident["id"]) == ["detected", "diagnosed", "observed"]
    assert "crashed" not in loop.daemon.lifecycle.history


def test_item04_a_traceback_with_the_service_dying_is_still_a_crash(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(crash_after_s=30.0, crash_lines=HANDLED),
                policy={"mode": "off"})
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes  # the loop stops on this event, before the relaunch
    assert outcome.status == "open" and loop.incident(outcome.incident_id)["source"] == "crash"
    assert "observed" not in loop.steps(outcome.incident_id) and "crashed" in loop.daemon.lifecycle.history
