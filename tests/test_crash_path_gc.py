"""Python's cyclic collector is paused on the crash path, from the first diagnosis of crash text
to the incident's durable row, and on again right after it: a collection there (gen-0 passes of
~0.3 ms hit 6 of 20 detections in the benchmark's trace, docs/performance.md session 12) would
delay the row, while the few thousand objects the path allocates wait safely for the next one.
The pause never outlives its turn: the observed incident of a healthy service ends it, and so
does the service's next pump turn (crash text in a verification window, judged elsewhere).
The real loop, rules and SQLite store on a fake host; the collector made eager (threshold 10) so
that any unpaused allocation run collects."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

from ddtreed.loop.daemon import EXIT_OK
from ddtreed.service import gcpause
from ddtreed.testing import Launch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_adversary_prompt_echo import _logged  # noqa: E402
from test_loop_middle import Loop  # noqa: E402


@pytest.fixture
def eager_collector():
    """gc's collections counted, split by whether the crash path's window is open."""
    seen = {"open": False, "inside": 0, "outside": 0, "windows": 0}

    def on_gc(phase, info):
        if phase == "start":
            seen["inside" if seen["open"] else "outside"] += 1

    threshold = gc.get_threshold()
    assert gc.isenabled()
    gc.set_threshold(10)
    gc.callbacks.append(on_gc)
    try:
        yield seen
    finally:
        gc.callbacks.remove(on_gc)
        gc.set_threshold(*threshold)
        gcpause.resume()
        gc.enable()


def watch_window(loop: Loop, seen: dict, monkeypatch) -> None:
    """The window: the loop's judging of crash text (observed) or its crash path (handle_crash)
    opens it, the durable row closes it."""
    import ddtreed.loop.daemon as daemon_module

    store = loop.daemon.store
    make_durable = store.make_durable

    def opening(function):
        def opened(*args, **kwargs):
            if not seen["open"]:
                seen["open"], seen["windows"] = True, seen["windows"] + 1
            return function(*args, **kwargs)
        return opened

    def durable(*args, **kwargs):
        result = make_durable(*args, **kwargs)
        seen["open"] = False
        return result

    monkeypatch.setattr(daemon_module, "observed", opening(daemon_module.observed))
    monkeypatch.setattr(daemon_module, "handle_crash", opening(daemon_module.handle_crash))
    store.make_durable = durable


def test_no_collection_between_the_crash_text_and_its_durable_row(tmp_path, eager_collector, monkeypatch):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(
        crash_after_s=30.0, crash_lines=_logged("illegal-memory-access", "user-logger")), policy={"mode": "off"})
    watch_window(loop, eager_collector, monkeypatch)
    assert loop.run() == EXIT_OK
    [outcome] = loop.outcomes
    assert loop.incident(outcome.incident_id)["category"] == "illegal-memory-access"
    assert eager_collector["windows"] == 1 and not eager_collector["open"]
    assert eager_collector["inside"] == 0  # paused from the diagnosis to the durable row
    assert eager_collector["outside"] > 0 and gc.isenabled()  # and collecting again after it


def test_a_healthy_service_s_observed_text_leaves_the_collector_on(tmp_path, eager_collector):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(crash_after_s=30.0, crash_exit_code=None,
                                                         crash_lines=_logged("illegal-memory-access", "user-logger")),
                stop_on=None)
    after: list[bool] = []
    observed_at = loop.clock.monotonic() + 200.0
    loop.clock.at(observed_at, lambda: after.append(gc.isenabled()))
    loop.clock.at(loop.clock.monotonic() + 300.0, loop.daemon.request_stop)
    assert loop.run() == EXIT_OK
    [incident] = loop.daemon.store.list_incidents()
    assert incident["status"] == "observed" and len(loop.host.launches) == 1
    assert after == [True] and gc.isenabled()


def test_a_pause_left_by_crash_text_judged_elsewhere_ends_at_the_next_pump_turn(tmp_path):
    loop = Loop(tmp_path, lambda argv, env, start: Launch(crash_after_s=1e9, crash_exit_code=None), stop_on=None)
    seen: list[bool] = []
    loop.clock.at(loop.clock.monotonic() + 60.0, lambda: (gcpause.pause(), seen.append(gc.isenabled())))
    loop.clock.at(loop.clock.monotonic() + 61.0, lambda: seen.append(gc.isenabled()))
    loop.clock.at(loop.clock.monotonic() + 62.0, loop.daemon.request_stop)
    try:
        assert loop.run() == EXIT_OK
    finally:
        gcpause.resume()
        gc.enable()
    assert seen == [False, True]  # paused, then on again by the service's next turn


def test_pause_and_resume_only_undo_their_own_pause():
    gc.disable()
    try:
        gcpause.pause()  # already off (someone else's choice): not ours to turn on again
        gcpause.resume()
        assert not gc.isenabled()
    finally:
        gc.enable()
    gcpause.pause()
    assert not gc.isenabled()
    gcpause.pause()
    gcpause.resume()
    assert gc.isenabled()
    gcpause.resume()
    assert gc.isenabled()
