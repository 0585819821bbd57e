"""A service that crashes on every start: each fix fails and is undone, then ddtreed gives up (exit 75)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from ddtreed.config import load
from ddtreed.incidents import Store
from tests.daemon_helpers import ROOT, crash_loop_config, run_daemon, runner_path, starts, steps_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def crash_loop(tmp_path_factory):
    """`ddtreed run` against the crash loop, to the end: (directory, config, exit code, pre-image)."""
    directory = tmp_path_factory.mktemp("crashloop")
    config_path = crash_loop_config(directory, max_restarts=3)
    config = load(config_path)
    before = runner_path(config).read_bytes()
    result = subprocess.run([sys.executable, "-m", "ddtreed", "run", "--config", str(config_path),
                             "--log-format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return directory, config, result, before


def _events(result) -> list[dict]:
    events = []
    for line in result.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def test_crash_loop_gives_up_with_exit_75_within_the_restart_budget(crash_loop):
    directory, config, result, _ = crash_loop
    assert result.returncode == 75, result.stderr[-2000:]
    # The first start is not a restart: at most max_restarts more.
    assert len(starts(directory)) == config.policy.max_restarts + 1
    assert "restart_budget_spent" in [event.get("event") for event in _events(result)]
    assert not (directory / "state" / "ddtreed.pid").exists()


def test_each_failed_fix_is_reverted_then_the_next_tried_then_escalated_and_frozen(crash_loop):
    directory, config, _, before = crash_loop
    store = Store(config.database)
    first = store.get(min(incident["id"] for incident in store.list_incidents()))
    assert first["status"] == "escalated"
    assert first["rule_id"] == "ddtree-verify-graph-width"
    names = steps_of(store, first["id"])
    assert names.count("applied") == 2 and names.count("reverted") == 2, names
    assert names[-1] == "escalated"
    tried = [step["detail"].split(" did not hold")[0] for step in first["steps"] if step["step"] == "reverted"]
    assert tried == ["ddtree-verify-graph-width", "disable-cuda-graph"]
    # The demo engine's "sglang" has no DFLASH: that rung is skipped, not tried.
    assert any(s["step"] == "skipped" and s["detail"].startswith("ddtree-to-dflash") for s in first["steps"])
    assert {a["status"] for a in first["applications"]} == {"reverted"}
    assert first["frozen"] and store.is_frozen(first["fingerprint"])
    # The patch was undone byte for byte; each launch remediation was undone before the next.
    assert hashlib.sha256(runner_path(config).read_bytes()).digest() == hashlib.sha256(before).digest()
    launches = [line.split(" ", 1)[1] for line in starts(directory)]
    assert "--disable-cuda-graph" in launches[2]
    # Escalation relaunches the configuration it started from, not the failed flag change.
    assert launches[3] == launches[0]


def test_crash_loop_keeps_the_incident_store_small(crash_loop):
    directory, config, _, _ = crash_loop
    store = Store(config.database)
    incidents = store.list_incidents(limit=100)
    assert 1 <= len(incidents) <= len(starts(directory))
    assert config.database.stat().st_size < 2 * 1024 * 1024


def test_a_frozen_signature_is_not_remediated_again(tmp_path):
    """A second daemon over the same store: the crash is recorded, nothing applied, then it gives up."""
    config_path = crash_loop_config(tmp_path, max_restarts=1)
    config = load(config_path)
    store = Store(config.database)
    _, code = run_daemon(config, timeout=60)
    assert code == 75
    fingerprint = store.list_incidents()[-1]["fingerprint"]
    store.freeze(fingerprint, "test: frozen by hand")
    before = runner_path(config).read_bytes()
    _, code = run_daemon(config, timeout=60)
    assert code == 75
    latest = store.get(store.list_incidents()[0]["id"])
    assert latest["status"] == "escalated" and latest["outcome"].startswith("restart budget spent")
    assert "not-remediated" in steps_of(store, latest["id"])
    assert not latest["applications"]
    assert runner_path(config).read_bytes() == before
