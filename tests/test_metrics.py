"""The Prometheus endpoint, scraped over real HTTP and checked against the text-format rules."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

from ddtreed.metrics import CONTENT_TYPE, parse_listen, render, start_metrics
from ddtreed.records import Application, RuleMatch
from ddtreed.status import STATES, DaemonStatus

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse_exposition(text: str) -> dict[str, dict]:
    """Prometheus text format 0.0.4, strictly: returns {family: {type, help, samples}}."""
    assert text.endswith("\n")
    families: dict[str, dict] = {}
    seen_series = set()
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, keyword, name, rest = line.split(" ", 3)
            assert NAME.match(name), line
            family = families.setdefault(name, {"samples": []})
            assert not family["samples"], f"{keyword} after samples: {line}"
            family["help" if keyword == "HELP" else "type"] = rest
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels_text = match["name"], match["labels"] or ""
        labels = dict(LABEL.findall(labels_text))
        assert ",".join(f'{k}="{v}"' for k, v in LABEL.findall(labels_text)) == labels_text, line
        value = float(match["value"])  # raises on a malformed number
        assert name in families and "type" in families[name], f"sample before its TYPE: {line}"
        series = (name, tuple(sorted(labels.items())))
        assert series not in seen_series, f"duplicate series: {line}"
        seen_series.add(series)
        families[name]["samples"].append((labels, value))
    for name, family in families.items():
        assert family["type"] in ("counter", "gauge"), name
        assert family["type"] != "counter" or name.endswith("_total"), f"counter without _total: {name}"
        assert family.get("help"), f"no HELP for {name}"
        assert name.startswith("ddtreed_")
    return families


def value(families, name, **labels):
    matches = [v for got, v in families[name]["samples"] if got == labels]
    assert len(matches) == 1, (name, labels, families[name]["samples"])
    return matches[0]


@pytest.fixture
def store(tmp_path):
    from ddtreed.incidents import Store

    store = Store(tmp_path / "incidents.sqlite3")
    match = RuleMatch(rule_id="ddtree-verify-graph-width", category="cuda-graph-shape-mismatch",
                      title="t", diagnosis="d", remediations=("ddtree-verify-graph-width",))
    first = store.open_incident("crash", match=match, message="size of tensor a (8) vs b (33)")
    store.finish(first, "resolved", "patched")
    second = store.open_incident("crash", match=match)
    store.open_incident("crash", message="no rule knows this")
    for number, status in enumerate(("verified", "reverted", "applied")):
        store.record_application(second, Application(application_id=f"a{number}", remediation_id="r",
                                                      kind="patch", target="/x", summary="s"), status)
    yield store
    store.close()


def scrape(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_scrape_over_http_shows_service_state_and_incidents(store):
    status = DaemonStatus(pid=1, state="running", service_pid=2, service_started_at=1000.0, restarts=3,
                          last_healthy_at=2000.0, last_accept_length=3.4,
                          canary={"last_run_at": 1900.0, "passed": True, "detail": "ok"})
    server = start_metrics("127.0.0.1:0", lambda: (status, store.counts()))
    try:
        code, content_type, body = scrape("http://127.0.0.1:%d/metrics" % server.address[1])
    finally:
        server.close()
    assert code == 200 and content_type == CONTENT_TYPE
    families = parse_exposition(body)
    assert value(families, "ddtreed_service_up") == 1
    assert [labels["state"] for labels, v in families["ddtreed_state"]["samples"] if v == 1] == ["running"]
    assert {labels["state"] for labels, _ in families["ddtreed_state"]["samples"]} == set(STATES)
    assert value(families, "ddtreed_service_restarts_total") == 3
    assert value(families, "ddtreed_last_accept_length") == 3.4
    assert value(families, "ddtreed_canary_passed") == 1
    assert value(families, "ddtreed_seconds_since_last_healthy_probe") > 0
    assert value(families, "ddtreed_incidents_total", category="cuda-graph-shape-mismatch") == 2
    assert value(families, "ddtreed_incidents_total", category="unknown") == 1
    assert value(families, "ddtreed_incidents", category="cuda-graph-shape-mismatch", status="resolved") == 1
    assert value(families, "ddtreed_incidents", category="cuda-graph-shape-mismatch", status="open") == 1
    assert value(families, "ddtreed_remediations_total", action="applied") == 3
    assert value(families, "ddtreed_remediations_total", action="reverted") == 1


def test_before_any_state_the_service_is_down_and_unknowns_are_absent():
    families = parse_exposition(render(None, {}))
    assert value(families, "ddtreed_service_up") == 0
    assert all(v == 0 for _, v in families["ddtreed_state"]["samples"])
    for name in ("ddtreed_last_accept_length", "ddtreed_seconds_since_last_healthy_probe",
                 "ddtreed_canary_passed", "ddtreed_service_restarts_total"):
        assert families[name]["samples"] == [], name


def test_a_service_still_loading_is_not_up():
    """Healthy once, then restarted: not up until a probe passes after the new start."""
    status = DaemonStatus(pid=1, state="running", service_started_at=3000.0, last_healthy_at=2000.0,
                          canary={"last_run_at": 1.0, "passed": False, "detail": "diverged"})
    families = parse_exposition(render(status, {}, now=3100.0))
    assert value(families, "ddtreed_service_up") == 0
    assert value(families, "ddtreed_seconds_since_last_healthy_probe") == 1100
    assert value(families, "ddtreed_canary_passed") == 0


def test_label_values_are_escaped():
    counts = {"incidents": [{"category": 'we"ird\\cat\nx', "status": "open", "outcome": "", "count": 1}]}
    families = parse_exposition(render(None, counts))
    labels, count = families["ddtreed_incidents"]["samples"][0]
    assert labels["category"] == 'we\\"ird\\\\cat\\nx' and count == 1


def test_other_paths_404_and_a_failing_snapshot_is_a_500():
    def broken():
        raise RuntimeError("database is locked")

    server = start_metrics("127.0.0.1:0", broken)
    try:
        base = "http://127.0.0.1:%d" % server.address[1]
        assert scrape(base + "/")[0] == 404
        code, _, body = scrape(base + "/metrics")
        assert code == 500 and "database is locked" in body
    finally:
        server.close()


def test_off_by_default():
    assert start_metrics(None, lambda: (None, {})) is None


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9477", ("127.0.0.1", 9477)), (":9477", ("0.0.0.0", 9477)), ("[::1]:9477", ("::1", 9477)),
])
def test_parse_listen(text, expected):
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["9477", "localhost:", "host:port", "host:70000"])
def test_parse_listen_rejects(text):
    with pytest.raises(ValueError, match="metrics.listen must be HOST:PORT"):
        parse_listen(text)


def test_degraded_and_frozen_signatures_are_exported():
    status = DaemonStatus(pid=1, state="escalated", degraded={"remediations": ["x"], "since": 1.0})
    families = parse_exposition(render(status, {"frozen_signatures": 2}))
    assert value(families, "ddtreed_degraded") == 1 and value(families, "ddtreed_frozen_signatures") == 2
