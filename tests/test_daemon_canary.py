"""The canary inside the daemon loop: garbage output with /health green becomes an incident,
the DDTree ladder steps down, and the step is kept only when the canary passes again."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import structlog.testing

from ddtreed.config import load
from daemon_helpers import run_daemon
from ddtreed.demo import prepare

pytestmark = pytest.mark.slow


ANCHOR = "    num_tokens_per_bs = server_args.speculative_num_draft_tokens\n"
WIDTH_FIX = ANCHOR + ("    if server_args.speculative_algorithm == 'DDTREE':\n"
                      "        num_tokens_per_bs = server_args.speculative_ddtree_budget + 1\n")


def _config(demo_dir, **options):
    """The demo with its verify width already right for any budget: only the canary can fail."""
    config = load(prepare(demo_dir, tp=1, device="cpu", load_seconds=0.2, **options))
    runner = Path(config.service.site_packages) / "ddtreed_demo_engine" / "cuda_graph_runner.py"
    runner.write_text(runner.read_text().replace(ANCHOR, WIDTH_FIX))
    probe = replace(config.probe, verify_window_s=0.5)
    return replace(config, probe=probe, preflight=replace(config.preflight, enabled=False))


def _with_budget(config, budget: int):
    argv = list(config.service.argv)
    argv[argv.index("--speculative-ddtree-budget") + 1] = str(budget)
    return replace(config, service=replace(config.service, argv=tuple(argv)))


def test_silent_corruption_is_caught_by_the_canary_and_fixed_by_lowering_the_budget(tmp_path):
    # A trusted configuration first: budget 3 is below the garbage threshold, its outputs are golden.
    config = _config(tmp_path, budget=3, garbage_above_budget=4)
    trusted, code = run_daemon(config, timeout=120, stop_when_healthy=True)
    assert code == 0
    assert trusted.board.current.canary["passed"] is True

    # Budget 8 emits wrong tokens (above 4) while /health stays green.
    with structlog.testing.capture_logs() as logged:
        daemon, code = run_daemon(_with_budget(config, 8), timeout=180, stop_after_incident=True)
    assert code == 0
    incident = daemon.store.get(daemon.outcomes[0].incident_id)
    assert incident["source"] == "canary"
    assert incident["category"] == "silent-corruption"
    assert incident["status"] == "resolved"
    assert incident["remediation_id"] == "lower-ddtree-budget"
    steps = [step["step"] for step in incident["steps"]]
    assert steps[:3] == ["detected", "diagnosed", "applied"] and steps[-1] == "verified"
    assert "--speculative-ddtree-budget" in daemon.argv
    assert daemon.argv[daemon.argv.index("--speculative-ddtree-budget") + 1] == "4"
    assert daemon.board.current.canary["passed"] is True
    # the garbage-emitting service still answered: it was drained (SIGTERM to its launcher alone,
    # like real SGLang wants), not killed as a crash; the final stop drains the fixed one too
    stops = [(entry["reason"], entry["drain"]) for entry in logged if entry["event"] == "service.stopping"]
    assert stops[0] == ("degraded: draining before the fix", True), stops
