"""The canary against the real demo service: wrong tokens and collapsed acceptance behind a 200.

Goldens are recorded with a good configuration (DDTree, block 8, budget 8, founding patch applied),
then the demo is restarted emitting unverified tokens above budget 4, or rejecting every draft.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from ladder_helpers import Ladder
from ddtreed.health.canary import Canary, canary_crash, result_from_dict
from ddtreed.config import load
from ddtreed.context import service_context
from ddtreed.demo import REPO_ROOT, prepare, to_toml
from ddtreed.health.probes import Prober
from ddtreed.service.host import LocalHost
from ddtreed.incidents import Store
from ddtreed.paths import shipped
from ddtreed.remediation import Engine, load_remediations
from ddtreed.rules import load_rules

pytestmark = pytest.mark.slow

STARTUP_S = 60.0


class Service:
    """One demo process tree in its own session, ready once /health answers 200."""

    def __init__(self, config, argv: list[str], log_path: Path):
        env = {**os.environ, **config.service.env}
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(argv, env=env, cwd=config.service.cwd, stdout=log,
                                            stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        self.prober = Prober(f"http://127.0.0.1:{config.service.port}")
        deadline = time.monotonic() + STARTUP_S
        while not self.prober.health(self.prober.deadline_in(1.0)).ok:
            assert self.process.poll() is None, f"demo exited: {log_path.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"demo not ready in {STARTUP_S}s"
            time.sleep(0.1)

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=20)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", "canary", *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=120)


def with_argv(base: Path, name: str, argv: list[str]) -> Path:
    """A copy of the demo config launching `argv` (same service, state and port)."""
    tables = tomllib.loads(base.read_text())
    tables["service"]["argv"] = argv
    path = base.with_name(name)
    path.write_text(to_toml(tables))
    return path


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    directory = tmp_path_factory.mktemp("canary-demo")
    config_path = prepare(directory, budget=8, block_size=8, tp=1, device="cpu", load_seconds=0.1)
    config, host = load(config_path), LocalHost()
    engine = Engine(host, config.paths.state_dir, load_remediations([shipped("remediations")]))
    engine.apply(engine.plan("ddtree-verify-graph-width", service_context(config, host)))
    service = Service(config, list(config.service.argv), directory / "good.log")
    try:
        recorded = cli("record", "--config", str(config_path))
        checked = cli("check", "--config", str(config_path), "--json")
    finally:
        service.stop()
    assert recorded.returncode == 0, recorded.stderr
    assert "recorded 4 golden outputs (trusted)" in recorded.stdout
    assert checked.returncode == 0 and json.loads(checked.stdout)["passed"] is True
    store = Store(config.database)
    yield SimpleNamespace(directory=directory, config_path=config_path, config=config, host=host,
                          engine=engine, store=store, rules=load_rules([shipped("rules")]))
    store.close()


def test_garbage_above_budget_is_caught_diagnosed_and_fixed_by_lowering_the_budget(demo):
    argv = list(demo.config.service.argv) + ["--garbage-above-budget", "4"]
    garbage_path = with_argv(demo.config_path, "garbage.toml", argv)
    service = Service(demo.config, argv, demo.directory / "garbage.log")
    try:
        assert service.prober.health(service.prober.deadline_in(5)).ok  # /health sees nothing wrong
        checked = cli("check", "--config", str(garbage_path))
    finally:
        service.stop()
    assert checked.returncode == 1, checked.stderr
    assert "FAILED (silent-corruption)" in checked.stdout and "first divergence" in checked.stdout
    status = cli("status", "--state-dir", demo.config.paths.state_dir, "--json")
    last = json.loads(status.stdout)["last_run"]
    assert status.returncode == 1 and last["category"] == "silent-corruption"
    assert last["prompts"][0]["diff"][0].startswith("golden: ")

    context = service_context(load(garbage_path), demo.host)
    crash = canary_crash(result_from_dict(demo.store.canary_runs(1)[0]["data"]))
    match = demo.rules.diagnose((crash,), context).match
    assert (match.category, match.rule_id) == ("silent-corruption", "canary-silent-corruption-ddtree")
    ladder = Ladder(demo.engine, match.remediations, context, dict(demo.config.service.env))
    plan, _ = ladder.step()
    assert plan.remediation_id == "lower-ddtree-budget"
    fixed = list(ladder.argv)
    assert fixed[fixed.index("--speculative-ddtree-budget") + 1] == "4"

    service = Service(demo.config, fixed, demo.directory / "fixed.log")
    try:
        result = Canary(demo.store, demo.config.canary).check(service.prober,
                                                              context_of(demo, fixed, "fixed.toml"))
    finally:
        service.stop()
    assert result.passed and result.recorded == 0, result.detail
    assert all(prompt.compared_as == "ids" for prompt in result.prompts)
    status = cli("status", "--state-dir", demo.config.paths.state_dir)
    assert status.returncode == 0 and "canary: PASSED" in status.stdout


def test_collapsed_acceptance_steps_down_the_ladder_until_the_canary_passes(demo):
    argv = list(demo.config.service.argv) + ["--collapse-acceptance"]
    context = context_of(demo, argv, "collapse.toml")
    canary = Canary(demo.store, demo.config.canary)
    service = Service(demo.config, argv, demo.directory / "collapse.log")
    try:
        result = canary.check(service.prober, context)
    finally:
        service.stop()
    assert (result.passed, result.category) == (False, "acceptance-collapse"), result.detail
    assert all(p.passed and p.compared_as == "ids" for p in result.prompts)  # outputs are right
    assert result.accept_length < 1.1 and result.baseline > 3  # the prefill token: 32 in 31 steps

    match = demo.rules.diagnose((canary_crash(result),), context).match
    assert match.rule_id == "canary-acceptance-collapse-ddtree"
    ladder = Ladder(demo.engine, match.remediations, context, dict(demo.config.service.env))
    outcomes = []
    while not result.passed and ladder.step() is not None:
        service = Service(demo.config, list(ladder.argv), demo.directory / "ladder.log")
        try:
            result = canary.check(service.prober, context_of(demo, list(ladder.argv), "step.toml"))
        finally:
            service.stop()
        outcomes.append((ladder.applied[-1][0].remediation_id, result.category))
    # Each step is kept only when the canary passes; the demo's engine reports version 0.1.0, which
    # has no DFLASH, so ddtree-to-dflash is skipped there as not applicable (with its reason).
    tried = [remediation for remediation, _ in outcomes] + [skip for skip, _ in ladder.skipped]
    assert sorted(tried) == sorted(match.remediations)
    assert outcomes[-1] == ("disable-speculative-decoding", None)
    assert all(category == "acceptance-collapse" for _, category in outcomes[:-1])
    assert result.passed and not any(flag.startswith("--speculative") for flag in ladder.argv)
    # Without a drafter the key changes; greedy output is still the goldens' output.
    trusted = {g["prompt"]: g["output_tokens"] for g in demo.store.goldens(*result.key._replace(
        draft_model=str(demo.directory / "models" / "demo-draft")))}
    fresh = {g["prompt"]: g["output_tokens"] for g in demo.store.goldens(*result.key)}
    assert result.recorded == 4 and fresh == trusted


def context_of(demo, argv: list[str], name: str):
    """The service context of a launch (algorithm, budget, …), as the daemon derives it."""
    return service_context(load(with_argv(demo.config_path, name, argv)), demo.host)
