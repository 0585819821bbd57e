"""contrib/: the Prometheus alert rules and the Grafana dashboard parse, name only metrics that the
real endpoint exports, and (where promtool is installed, as in CI) pass `promtool check rules` and
fire in `promtool test rules` on the series they are about."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ddtreed.ops.metrics import start_metrics
from ddtreed.ops.status import DaemonStatus

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "contrib" / "prometheus" / "ddtreed-alerts.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "ddtreed-dashboard.json"
PROMTOOL = shutil.which("promtool")
METRIC = re.compile(r"\b((?:ddtreed|process|python)_[a-z_]+)\b")
REQUIRED_ALERTS = {"DdtreedIncidentEscalated", "DdtreedGaveUp", "DdtreedServiceDown", "DdtreedAcceptanceCollapse"}


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """Every sample name a real scrape of a fully populated daemon shows."""
    status = DaemonStatus(pid=1, state="escalated", service_started_at=1.0, restarts=2, last_healthy_at=2.0,
                          last_accept_length=1.1, degraded={"remediations": ["x"], "since": 1.0},
                          canary={"last_run_at": 1.0, "passed": False, "detail": "diverged"})
    counts = {"incidents": [{"category": "nccl-error", "status": "escalated", "outcome": "", "count": 1}],
              "applications": {"applied": 1, "reverted": 1, "verified": 0}, "frozen_signatures": 1}
    server = start_metrics("127.0.0.1:0", lambda: (status, counts))
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.address[1], timeout=30) as answer:
            text = answer.read().decode()
    finally:
        server.close()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def _alert_rules() -> list[dict]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_alert_rules_parse_and_cover_the_four_situations():
    rules = _alert_rules()
    names = {rule["alert"] for rule in rules}
    assert REQUIRED_ALERTS <= names
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def test_alert_expressions_name_only_exported_metrics(exported):
    for rule in _alert_rules():
        for name in METRIC.findall(rule["expr"]):
            assert name in exported, f"{rule['alert']}: {name} is not exported"


def test_dashboard_parses_and_queries_only_exported_metrics(exported):
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"]
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    expressions.append(dashboard["templating"]["list"][1]["query"]["query"])
    assert len(expressions) > 10
    for expr in expressions:
        names = METRIC.findall(expr)
        assert names, expr
        for name in names:
            assert name in exported, f"dashboard: {name} is not exported"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")
def test_promtool_checks_the_rules():
    done = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")
def test_the_alerts_fire_on_the_series_they_are_about(tmp_path):
    # The same rules without their annotations (promtool compares those verbatim, templated).
    document = yaml.safe_load(ALERTS.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(document))
    test = tmp_path / "alerts-test.yml"
    test.write_text(textwrap.dedent(f"""\
        rule_files: [{rules}]
        evaluation_interval: 1m
        tests:
          - interval: 1m
            input_series:
              - series: 'ddtreed_incidents_by_status{{instance="gpu1", job="ddtreed", category="nccl-error", status="escalated"}}'
                values: '1x30'
              - series: 'ddtreed_last_accept_length{{instance="gpu1", job="ddtreed"}}'
                values: '1.05x30'
              - series: 'ddtreed_service_up{{instance="gpu1", job="ddtreed"}}'
                values: '1x30'
              - series: 'ddtreed_service_up{{instance="gpu2", job="ddtreed"}}'
                values: '0x30'
              - series: 'ddtreed_state{{instance="gpu2", job="ddtreed", state="escalated"}}'
                values: '1x30'
            alert_rule_test:
              - eval_time: 5m
                alertname: DdtreedIncidentEscalated
                exp_alerts:
                  - exp_labels: {{severity: critical, instance: gpu1}}
              - eval_time: 15m
                alertname: DdtreedAcceptanceCollapse
                exp_alerts:
                  - exp_labels: {{severity: warning, instance: gpu1, job: ddtreed}}
              - eval_time: 5m
                alertname: DdtreedGaveUp
                exp_alerts:
                  - exp_labels: {{severity: critical, instance: gpu2, job: ddtreed, state: escalated}}
        """))
    done = subprocess.run([PROMTOOL, "test", "rules", str(test)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
