"""What a user reads of a canary that could not run says it once (incident message, verify log)."""

from __future__ import annotations

from ddtreed.health.canary.results import CanaryResult
from ddtreed.health.verify import Verdict
from ddtreed.loop.incident_path import canary_verdict


def test_a_canary_that_could_not_run_is_said_once():
    detail = "canary could not run: prompt 2: /generate: interrupted: a member of the service's session died (pid 7)"
    verdict = canary_verdict(CanaryResult(False, None, detail, None), Verdict(True, "generate ok"))
    assert not verdict.ok and verdict.stage == "canary"
    assert verdict.detail == detail  # on main: "canary could not run: canary could not run: prompt 2: …"
    other = canary_verdict(CanaryResult(False, None, "/generate: HTTP 503", None), Verdict(True, "ok"))
    assert other.detail == "canary could not run: /generate: HTTP 503"
