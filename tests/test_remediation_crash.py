"""Crash safety: SIGKILL a real child process in the middle of apply/revert, many times.

Every trial asserts the target file is entirely the old or entirely the new bytes, then that
`reconcile()` on the next start leaves a consistent state (recorded applications match the
file, no journal left) and says what it did.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtreed.service.host import LocalHost, sha256_bytes
from ddtreed.paths import shipped
from ddtreed.remediation import Engine, load_remediations
from ddtreed.remediation.sitepackages import record_hash

REPO = Path(__file__).resolve().parent.parent
ID = "ddtree-verify-graph-width"
DEMO_SOURCE = b'''"""Demo engine: the width its verify graph is captured with."""


def target_verify_width(server_args, is_draft_worker=False):
    num_tokens_per_bs = server_args.speculative_num_draft_tokens
    return num_tokens_per_bs
'''
CHILD = r"""
import sys
from ddtreed.service.host import LocalHost
from ddtreed.paths import shipped
from ddtreed.remediation import Engine, load_remediations
site, state, mode = sys.argv[1:4]
engine = Engine(LocalHost(), state, load_remediations([shipped("remediations")]))
print("ready", flush=True)
while True:
    plan = engine.plan("ddtree-verify-graph-width", site_packages=site)
    if plan.applicable and mode in ("loop", "apply"):
        engine.apply(plan)
        print("applied", flush=True)
    elif mode in ("loop", "revert"):
        for application in engine.status():
            engine.revert(application.application_id)
        print("reverted", flush=True)
    if mode != "loop":
        break
"""
STEPS = ("apply:backups", "apply:journal", "apply:write:0", "apply:recorded",
         "revert:journal", "revert:write:0", "revert:recorded")
RANDOM_TRIALS = 45
trial_count = {"n": 0}


def make_demo_site(root: Path) -> Path:
    site = root / "site-packages"
    (site / "ddtreed_demo_engine").mkdir(parents=True)
    (site / "ddtreed_demo_engine" / "__init__.py").write_text("")
    (site / "ddtreed_demo_engine" / "cuda_graph_runner.py").write_bytes(DEMO_SOURCE)
    dist = site / "ddtreed_demo_engine-0.1.0.dist-info"
    dist.mkdir()
    (dist / "RECORD").write_text(
        f"ddtreed_demo_engine/__init__.py,{record_hash(b'')},0\n"
        f"ddtreed_demo_engine/cuda_graph_runner.py,{record_hash(DEMO_SOURCE)},{len(DEMO_SOURCE)}\n"
        "ddtreed_demo_engine-0.1.0.dist-info/RECORD,,\n")
    return site


def start_child(site: Path, state: Path, mode: str, kill_at: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("DDTREED_REMEDIATION_KILL_AT", None)
    if kill_at:
        env["DDTREED_REMEDIATION_KILL_AT"] = kill_at
    return subprocess.Popen([sys.executable, "-c", CHILD, str(site), str(state), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)


def wait_ready(child: subprocess.Popen, word: bytes = b"ready") -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if line.startswith(word):
            return
        if not line and child.poll() is not None:
            raise AssertionError(f"child exited early with {child.returncode}")
    raise AssertionError("child never became ready")


def check_consistent(site: Path, state: Path, patched: bytes) -> list[str]:
    """File is old or new; after reconcile the record matches the file and no journal is left."""
    target = site / "ddtreed_demo_engine" / "cuda_graph_runner.py"
    assert target.read_bytes() in (DEMO_SOURCE, patched)
    engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]))
    sentences = engine.reconcile()
    data = target.read_bytes()
    assert data in (DEMO_SOURCE, patched)
    applied = engine.status()
    if data == patched:
        assert len(applied) == 1 and applied[0].files[0].after_sha256 == sha256_bytes(patched)
    else:
        assert applied == []
    assert engine.store.journal() is None
    trial_count["n"] += 1
    return sentences


@pytest.fixture()
def demo(tmp_path):
    site = make_demo_site(tmp_path)
    engine = Engine(LocalHost(), str(tmp_path / "probe-state"), load_remediations([shipped("remediations")]))
    plan = engine.plan(ID, site_packages=str(site))
    assert plan.applicable and plan.layout == "demo", plan.reason
    return site, plan.files[0].after


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS)
def test_kill_at_each_step_then_reconcile(step, demo, tmp_path):
    site, patched = demo
    for repetition in range(2):
        state = tmp_path / f"state-{repetition}"
        operation = step.split(":")[0]
        if operation == "revert":
            engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]))
            engine.apply(engine.plan(ID, site_packages=str(site)))
        child = start_child(site, state, operation, kill_at=step)
        assert child.wait(timeout=30) == -signal.SIGKILL
        sentences = check_consistent(site, state, patched)
        target = (site / "ddtreed_demo_engine" / "cuda_graph_runner.py").read_bytes()
        if step in ("apply:write:0", "apply:recorded"):
            assert target == patched and sentences and sentences[0].startswith("finished")
        elif step == "apply:journal":
            # Killed before the write: nothing to undo, and reconcile must not claim a restore.
            assert target == DEMO_SOURCE and sentences[0].endswith(": no file had been changed")
        elif step == "apply:backups":
            assert target == DEMO_SOURCE and sentences == []
        else:
            assert target == DEMO_SOURCE and sentences[0].startswith("completed the interrupted revert")
        engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]))
        for application in engine.status():  # back to pristine for the next repetition
            engine.revert(application.application_id)
        assert (site / "ddtreed_demo_engine" / "cuda_graph_runner.py").read_bytes() == DEMO_SOURCE


@pytest.mark.slow
def test_kill_at_random_times_during_an_apply_revert_loop(demo, tmp_path):
    site, patched = demo
    state = tmp_path / "state"
    rng = random.Random(20260728)
    outcomes = {"old": 0, "new": 0}
    for _ in range(RANDOM_TRIALS):
        child = start_child(site, state, "loop")
        wait_ready(child)
        # Where in the loop the kill lands is the experiment: after the child said it finished a
        # random apply or revert (so both sides are reached however slow this machine is today),
        # then a random few milliseconds into the next operation, or between two.
        wait_ready(child, rng.choice((b"applied", b"reverted")))
        time.sleep(rng.uniform(0.0, 0.01))
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        check_consistent(site, state, patched)
        data = (site / "ddtreed_demo_engine" / "cuda_graph_runner.py").read_bytes()
        outcomes["new" if data == patched else "old"] += 1
    assert outcomes["old"] and outcomes["new"], outcomes  # kills landed on both sides


def test_trial_count_reported():
    """Runs last in this module: the number of kill trials that were checked (≥ 50 when slow ran)."""
    if trial_count["n"]:
        assert trial_count["n"] >= 50, trial_count
        print(f"\ncrash-safety trials checked: {trial_count['n']}")
