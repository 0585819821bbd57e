"""Adversary (adv17) of the late diagnosis at start-up (1cd9098, 07779e1): the crash a killed daemon
recorded is judged at the next start under the *next daemon's* launch context, not under the
context the crash ran with (the incident row keeps that one in its `context` column).

Real processes: a real `ddtreed run` supervising a service launched with `--speculative-ddtree-budget
32` meets the founding crash (a verify graph 8 wide, 33 needed) and is SIGKILLed right after the
crash's row is committed (DDTREED_KILL_AT=incident:committed). The operator then edits the config
(the budget to 16: a workaround, or any other change) and starts ddtreed again. The late verdict
on the first incident is given with budget 16: the precise rule (`ddtree-verify-graph-width`: 8 =
the block size, 33 = budget 32 + 1) no longer applies, and the incident says the generic reading,
"Without the launch context (--config) ddtreed cannot tell which setting sized the graph", about a
crash whose launch context was recorded with it and explains it exactly. `incidents show` then
tells the operator something untrue about what crashed under the old config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "programs"))
sys.path.insert(0, str(Path(__file__).parent))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, kill_service_sessions, killed_at_commit, wait_for  # noqa: E402

from ddtreed.cli import main  # noqa: E402
from ddtreed.demo import free_port  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402

LINGER = Path(__file__).resolve().parent / "programs" / "crash_and_linger.py"


def _config(directory: Path, port: int, budget: int) -> Path:
    """The founding crash (printed whatever the flags say) under policy off, with this budget."""
    return fast_service.write_config(
        directory, port=port, policy={"mode": "off", "max_restarts": 1},
        service={"argv": [sys.executable, str(LINGER), "--speculative-algorithm", "DDTREE",
                          "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", str(budget),
                          "--port", str(port)]})


def test_the_late_verdict_judges_the_crash_under_the_context_it_ran_with(tmp_path, capsys):
    directory = tmp_path / "run"
    directory.mkdir()
    port = free_port()
    state = directory / "state"
    first = killed_at_commit(_config(directory, port, budget=32), directory / "first.jsonl")
    second = None
    try:
        with Store(database_path(state), create=False) as store:
            [killed] = store.list_incidents()
            recorded = store.get(killed["id"])
        assert killed["rule_id"] is None  # the row, not yet judged
        assert recorded["context"]["ddtree_budget"] == 32 and recorded["context"]["block_size"] == 8
        # the operator edits the config, then starts ddtreed again
        second = DaemonProcess(_config(directory, port, budget=16), directory / "second.jsonl")
        wait_for(lambda: second.has("restart_budget_spent"), 90,
                 what="the next daemon to recover, meet the crash again and give up")
    finally:
        first.kill()
        if second is not None:
            second.stop()
        kill_service_sessions(directory)
    capsys.readouterr()
    assert main(["incidents", "show", str(killed["id"]), "--state-dir", str(state), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["context"]["ddtree_budget"] == 32  # what the incident itself says the crash ran with
    [late] = [step for step in shown["steps"] if step["step"] == "diagnosed"]
    assert late["data"]["late"] is True
    # judged under budget 32 (its own context), the crash is exactly the founding fault
    assert "cannot tell which setting" not in shown["diagnosis"], shown["diagnosis"]
    assert shown["rule_id"] == "ddtree-verify-graph-width", (shown["rule_id"], shown["diagnosis"])
    assert "32+1 = 33" in shown["diagnosis"], shown["diagnosis"]
