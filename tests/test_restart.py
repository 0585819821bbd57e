"""RestartBudget: backoff and give-up, on a fake clock; and a real crash loop that gives up."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from ddtreed.service.host import LocalHost
from ddtreed.service.launch import Supervisor
from ddtreed.records import ExitStatus
from ddtreed.restart import RestartBudget

from supervision_helpers import make_config, program, wait_for


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_up_to_the_cap_then_gives_up():
    clock = FakeClock()
    budget = RestartBudget(max_restarts=4, window_s=600, backoff_initial_s=1, backoff_max_s=5,
                           clock=clock)
    delays = []
    for _ in range(5):
        budget.record_start()
        delays.append(budget.next_delay())
        clock.now += 10
    assert delays == [1, 2, 4, 5, None]


def test_starts_outside_the_window_are_forgotten():
    clock = FakeClock()
    budget = RestartBudget(max_restarts=2, window_s=60, backoff_initial_s=1, backoff_max_s=30,
                           clock=clock)
    for _ in range(3):
        budget.record_start()
        clock.now += 5
    assert budget.next_delay() is None
    clock.now += 61  # a long healthy run: the crash loop is over
    budget.record_start()
    assert budget.starts_in_window == 1
    assert budget.next_delay() == 1


def test_reset_after_a_verified_fix():
    budget = RestartBudget(1, 60, 2, 8, clock=FakeClock())
    budget.record_start()
    budget.record_start()
    assert budget.next_delay() is None
    budget.reset()
    assert budget.next_delay() == 2  # nothing started yet: the first delay


def test_zero_restarts_allowed_gives_up_after_the_first_crash():
    budget = RestartBudget(0, 60, 1, 1, clock=FakeClock())
    budget.record_start()
    assert budget.next_delay() is None


@pytest.mark.parametrize("arguments", [(-1, 60, 1, 2), (1, 0, 1, 2), (1, 60, 3, 2)])
def test_nonsense_limits_are_refused(arguments):
    with pytest.raises(ValueError):
        RestartBudget(*arguments)


@pytest.mark.slow
def test_a_crash_loop_is_given_up_instead_of_storming(tmp_path: Path):
    config = make_config(tmp_path, program("crash_loop.py"))
    supervisor = Supervisor(LocalHost(), config, list(config.service.argv), {})
    budget = RestartBudget(max_restarts=3, window_s=60, backoff_initial_s=0.01,
                           backoff_max_s=0.05)
    statuses, waited = [], []
    with capture_logs() as logs:
        while True:
            supervisor.start()
            budget.record_start()
            statuses.append(wait_for(supervisor.poll, 20, what="the crash"))
            delay = budget.next_delay()
            if delay is None:
                break
            waited.append(delay)
            time.sleep(delay)  # the backoff itself: the caller sleeps, the budget decides
    assert statuses == [ExitStatus(code=1, signal=None)] * 4  # the first start + 3 restarts
    assert waited == [0.01, 0.02, 0.04]
    assert [entry["log_level"] for entry in logs if entry["event"] == "restart.give_up"] == ["error"]
    assert "must match the size" in Path(supervisor.log_paths[1]).read_text()
