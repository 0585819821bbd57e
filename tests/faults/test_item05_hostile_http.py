"""Item 5 of issue 16 (fixed in ddtreed/health/probes.py): every hostile HTTP answer is one
case of the harness; the prober returns a failed result within its deadline, never raises, never
reads an unbounded body."""

from __future__ import annotations

import threading
import time

import pytest
from hostile import HostileHTTP

from ddtreed.health.probes import Prober

DEADLINE_S = 3.0
GIVE_UP_S = 30.0  # ten times the deadline: only a prober without a whole-request deadline is slower
BODY_CAP_BYTES = 64 * 1024 * 1024  # whatever the prober's cap is, it must be below this

def _generate(base_url: str) -> dict:
    outcome: dict = {}

    def call() -> None:
        prober = Prober(base_url)
        try:
            outcome["result"] = prober.generate("The capital of France is", 4, prober.deadline_in(DEADLINE_S))
        except BaseException as error:  # noqa: BLE001  (the point: it must not raise)
            outcome["raised"] = error

    worker = threading.Thread(target=call, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(GIVE_UP_S)
    outcome["returned"] = not worker.is_alive()
    outcome["elapsed_s"] = time.monotonic() - started
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("mode", HostileHTTP.MODES)
def test_item05_a_hostile_answer_is_a_failed_probe_within_the_deadline(mode):
    with HostileHTTP(mode) as server:
        outcome = _generate(server.base_url)
        sent = server.sent
    assert outcome["returned"], f"{mode}: the prober was still blocked after {GIVE_UP_S}s"
    assert "raised" not in outcome, f"{mode}: {outcome.get('raised')!r}"
    assert outcome["result"].ok is False
    if mode == "huge-body":
        assert sent < BODY_CAP_BYTES, f"the prober read {sent} bytes of an unbounded body"
