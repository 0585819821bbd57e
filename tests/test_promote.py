"""`ddtreed remediate promote`: a remembered flag degradation is tried away, kept only if it verifies."""

from __future__ import annotations

import json
import os

import pytest

from ddtreed.context import service_context
from ddtreed.service.host import LocalHost, port_in_use
from ddtreed.incidents import Store
from ddtreed.paths import shipped
from ddtreed.remediation import Engine, load_remediations
from tests.daemon_helpers import ddtreed, demo_config

pytestmark = pytest.mark.slow


def _engine(config) -> Engine:
    return Engine(LocalHost(), config.paths.state_dir, load_remediations([shipped("remediations")]))


def _degrade(config) -> None:
    """What the daemon records after a verified ladder step: budget 14 halved to 7 (width 8 fits)."""
    engine = _engine(config)
    plan = engine.plan("lower-ddtree-budget", service_context(config, LocalHost()), env=config.service.env)
    application = engine.apply(plan)
    store = Store(config.database)
    store.record_application(None, application, status="verified")
    store.set_degraded(config.source, 1, "lower-ddtree-budget")


def _budget(argv) -> str:
    argv = list(argv)
    return argv[argv.index("--speculative-ddtree-budget") + 1]


def _promote(config):
    result = ddtreed("remediate", "promote", "--config", config.source, "--json", timeout=150)
    return result, (json.loads(result.stdout.splitlines()[-1]) if result.stdout.strip() else None)


def test_promote_keeps_the_degradation_until_a_precise_fix_exists_then_promotes(tmp_path):
    config = demo_config(tmp_path, budget=14)
    _degrade(config)
    store = Store(config.database)

    # No precise fix yet: the better launch (budget 14) crashes; the degradation goes back.
    result, answer = _promote(config)
    assert result.returncode == 1, result.stderr[-2000:]
    assert answer["promoted"] is False and answer["undone"] == ["lower-ddtree-budget"]
    assert answer["restored"] == ["lower-ddtree-budget"]
    assert _budget(answer["argv"]) == "7"
    [applied] = _engine(config).status()
    assert applied.remediation_id == "lower-ddtree-budget" and _budget(applied.launch.argv) == "7"
    assert store.degraded(config.source)["step_id"] == "lower-ddtree-budget"
    assert not port_in_use("127.0.0.1", config.service.port)

    # The operator installs the precise fix; promotion now verifies and keeps budget 14.
    patched = ddtreed("remediate", "apply", "ddtree-verify-graph-width", "--config", config.source)
    assert patched.returncode == 0, patched.stderr
    result, answer = _promote(config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert answer["promoted"] is True and answer["restored"] == []
    assert _budget(answer["argv"]) == "14" and answer["accept_length"] > 1.5
    assert store.degraded(config.source) is None
    assert [a.remediation_id for a in _engine(config).status()] == ["ddtree-verify-graph-width"]
    assert not port_in_use("127.0.0.1", config.service.port)


def test_promote_without_a_degradation_says_so(tmp_path):
    config = demo_config(tmp_path)
    Store(config.database)
    result, _ = _promote(config)
    assert result.returncode == 1
    assert "not degraded" in result.stderr and result.stderr.count("\n") == 1


def test_promote_refuses_while_a_daemon_supervises_the_service(tmp_path):
    config = demo_config(tmp_path)
    _degrade(config)
    (tmp_path / "state" / "ddtreed.pid").write_text(f"{os.getpid()}\n")  # a live process
    result, _ = _promote(config)
    assert result.returncode == 1
    assert f"pid {os.getpid()}" in result.stderr and "stop it" in result.stderr
    assert Store(config.database).degraded(config.source) is not None
