"""The real loop against the demo service: resolved, prevented, advised, off, collapsed, recurred."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from ddtreed.demo.engine_install import install_engine
from ddtreed.incidents import Store
from ddtreed.remediation import Engine, load_remediations
from ddtreed.paths import shipped
from ddtreed.service.host import LocalHost
from tests.daemon_helpers import demo_config, ddtreed, run_daemon, runner_path, steps_of, tree_hashes

pytestmark = pytest.mark.slow

FOUNDING_STEPS = ["detected", "diagnosed", "applied", "restarted", "healthy", "verified"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _in_order(names: list[str], wanted: list[str]) -> bool:
    """`wanted` appears in `names` as a subsequence."""
    remaining = iter(names)
    return all(any(name == step for name in remaining) for step in wanted)


@pytest.fixture(scope="module")
def founding(tmp_path_factory):
    """The founding loop, once: (config, daemon, exit code, pre-image of the engine file)."""
    config = demo_config(tmp_path_factory.mktemp("founding"))
    before = runner_path(config).read_bytes()
    daemon, code = run_daemon(config, stop_after_incident=True)
    return config, daemon, code, before


def test_founding_crash_is_diagnosed_patched_restarted_verified_and_resolved(founding):
    config, daemon, code, before = founding
    assert code == 0
    assert [outcome.status for outcome in daemon.outcomes] == ["resolved"]
    store = Store(config.database)
    incident = store.get(daemon.outcomes[0].incident_id)
    assert incident["category"] == "cuda-graph-shape-mismatch"
    assert incident["rule_id"] == "ddtree-verify-graph-width"
    assert incident["remediation_id"] == "ddtree-verify-graph-width"
    assert _in_order(steps_of(store, incident["id"]), FOUNDING_STEPS), steps_of(store, incident["id"])
    verified = next(step for step in incident["steps"] if step["step"] == "verified")
    assert verified["data"]["accept_length"] > 1.5
    [application] = incident["applications"]
    assert application["status"] == "verified"
    assert runner_path(config).read_bytes() != before
    assert application["files"][0]["after_sha256"] == _sha(runner_path(config))


@pytest.fixture(scope="module")
def recurred(founding):
    """A reinstall wipes the verified patch and the same crash comes back: (config, daemon, code)."""
    config, _, _, before = founding
    install_engine(Path(config.service.site_packages))  # what `pip install --force-reinstall` does
    assert runner_path(config).read_bytes() == before
    daemon, code = run_daemon(config, stop_after_incident=True)
    return config, daemon, code


def test_recurrence_after_a_verified_fix_reverts_freezes_and_escalates(founding, recurred):
    config, daemon, code = recurred
    assert code == 0
    store = Store(config.database)
    [outcome] = daemon.outcomes
    assert outcome.status == "escalated"
    incident = store.get(outcome.incident_id)
    names = steps_of(store, incident["id"])
    assert "recurred" in names and names[-1] == "escalated" and "applied" not in names
    fingerprint = incident["fingerprint"]
    assert fingerprint == store.get(founding[1].outcomes[0].incident_id)["fingerprint"]
    assert incident["frozen"] and store.is_frozen(fingerprint)
    assert runner_path(config).read_bytes() == founding[3]


def test_unfreeze_lifts_the_freeze_and_the_next_crash_is_remediated_again(recurred):
    config, daemon, _ = recurred
    store = Store(config.database)
    fingerprint = store.get(daemon.outcomes[0].incident_id)["fingerprint"]
    lifted = ddtreed("remediate", "unfreeze", fingerprint, "--state-dir", config.paths.state_dir)
    assert lifted.returncode == 0, lifted.stderr
    assert fingerprint in lifted.stdout
    assert not store.is_frozen(fingerprint)
    again = ddtreed("remediate", "unfreeze", fingerprint, "--state-dir", config.paths.state_dir)
    assert again.returncode == 1
    assert again.stderr.strip().count("\n") == 0 and fingerprint in again.stderr
    # The fix that did not stick is no longer "verified": the next crash gets a fresh remediation.
    assert store.verified_fix_for(fingerprint) is None, store.applications()
    daemon, code = run_daemon(config, stop_after_incident=True)
    assert [outcome.status for outcome in daemon.outcomes] == ["resolved"]


def test_preflight_prevents_the_crash_before_the_first_launch(tmp_path):
    config = demo_config(tmp_path, preflight=True)
    daemon, code = run_daemon(config, stop_when_healthy=True)
    assert code == 0
    store = Store(config.database)
    [incident] = store.list_incidents()
    assert incident["status"] == "prevented"
    full = store.get(incident["id"])
    assert full["source"] == "preflight"
    assert _in_order(steps_of(store, incident["id"]), ["diagnosed", "applied", "verified"])
    assert not full["tracebacks"]
    log = Path(config.paths.log_dir) / "service.stderr.log"
    assert "The server is fired up and ready to roll!" in log.read_text()
    assert "Traceback" not in log.read_text()


@pytest.fixture(scope="module")
def unpatched_demo(tmp_path_factory):
    return demo_config(tmp_path_factory.mktemp("unpatched"))


@pytest.mark.parametrize("mode, status, reason", [("advise", "advised", "policy advise"),
                                                   ("off", "open", "policy off")])
def test_policy_advise_and_off_record_the_incident_and_change_nothing(unpatched_demo, mode, status, reason):
    config = replace(unpatched_demo, policy=replace(unpatched_demo.policy, mode=mode))
    site_before = tree_hashes(config.service.site_packages)
    daemon, code = run_daemon(config, stop_after_incident=True)
    assert code == 0
    [outcome] = daemon.outcomes
    assert outcome.status == status
    store = Store(config.database)
    incident = store.get(outcome.incident_id)
    assert incident["category"] == "cuda-graph-shape-mismatch"
    names = steps_of(store, incident["id"])
    assert "applied" not in names and "restarted" not in names
    assert ("advised" in names) == (mode == "advise")
    assert any(reason in step["detail"] for step in incident["steps"] if step["step"] == "not-remediated")
    assert not incident["applications"]
    assert tree_hashes(config.service.site_packages) == site_before
    engine = Engine(LocalHost(), config.paths.state_dir, load_remediations([shipped("remediations")]))
    assert engine.status() == []


def test_acceptance_collapse_under_the_floor_is_a_failed_fix(tmp_path):
    """Healthy and correct, but every draft rejected: the patch is recorded as failed and undone."""
    config = demo_config(tmp_path, collapse_acceptance=True, probe={"min_accept_length": 1.5},
                         policy={"max_remediations_per_incident": 1})
    before = runner_path(config).read_bytes()
    daemon, code = run_daemon(config, stop_after_incident=True)
    assert code == 0
    [outcome] = daemon.outcomes
    assert outcome.status == "escalated"
    store = Store(config.database)
    incident = store.get(outcome.incident_id)
    failed = next(step for step in incident["steps"] if step["step"] == "failed")
    assert failed["data"]["stage"] == "acceptance"
    assert failed["data"]["accept_length"] < 1.5
    assert _in_order(steps_of(store, incident["id"]), ["applied", "restarted", "failed", "reverted", "escalated"])
    assert [a["status"] for a in incident["applications"]] == ["reverted"]
    assert runner_path(config).read_bytes() == before


OPERATOR_LADDER_RULE = '''[[rule]]
id = "operator-width-ladder"
category = "cuda-graph-shape-mismatch"
title = "Verify graph too narrow: step the DDTree budget down (operator rule)"
meaning = "An operator prefers the budget ladder to patching the installed package."
priority = 150
precise = true
when = "a == block_size and b == ddtree_budget + 1"
diagnosis = "Verify graph {a} wide, DDTree verifies {b}: lower the budget until it fits."
remediations = ["lower-ddtree-budget"]
[rule.match]
exception = ["RuntimeError"]
message = 'The size of tensor a \\((?P<a>\\d+)\\) must match the size of tensor b \\((?P<b>\\d+)\\)'
'''


def test_a_verified_flag_step_is_remembered_as_degraded_and_survives_a_daemon_restart(tmp_path):
    """Budget 14 → 7 makes the verify width 8 fit: resolved, degraded; a restarted daemon keeps 7."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "operator.toml").write_text(OPERATOR_LADDER_RULE)
    config = demo_config(tmp_path / "demo", budget=14)
    config = replace(config, paths=replace(config.paths, rules_dirs=(shipped("rules"), str(rules))))
    daemon, code = run_daemon(config, stop_after_incident=True)
    assert [outcome.status for outcome in daemon.outcomes] == ["resolved"]
    store = Store(config.database)
    assert store.get(daemon.outcomes[0].incident_id)["remediation_id"] == "lower-ddtree-budget"
    assert store.degraded(config.source)["step_id"] == "lower-ddtree-budget"

    # systemctl restart ddtreed: the degraded launch is still the one in force, no new incident.
    restarted, code = run_daemon(config, stop_when_healthy=True)
    assert code == 0 and restarted.outcomes == []
    assert restarted.argv[restarted.argv.index("--speculative-ddtree-budget") + 1] == "7"
    assert len(store.list_incidents()) == 1
