"""The Prometheus endpoint, scraped over real HTTP and read by Prometheus' own tools.

The text is parsed with prometheus_client's parsers (0.0.4 and OpenMetrics) and, where the
`prometheus` package is installed (CI installs it), linted by `promtool check metrics`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families

from ddtreed.ops.metrics import CONTENT_TYPE, FAMILIES, parse_listen, render, start_metrics
from ddtreed.records import Application, RuleMatch
from ddtreed.ops.status import STATES, DaemonStatus

PROMTOOL = shutil.which("promtool")
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def families_of(text: str) -> dict[str, dict]:
    """{sample name: {labels tuple: value}} and the family types, via prometheus_client's parser."""
    parsed: dict[str, dict] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            series = parsed.setdefault(sample.name, {})
            key = tuple(sorted(sample.labels.items()))
            assert key not in series, f"duplicate series {sample.name}{sample.labels}"
            series[key] = sample.value
    parsed["__types__"] = types
    return parsed


def value(families, name, **labels):
    return families[name][tuple(sorted(labels.items()))]


def promtool_problems(text: str) -> str:
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60)
    return "" if done.returncode == 0 else (done.stdout + done.stderr)


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


def scrape(url: str, accept: str | None = None) -> tuple[int, str, str]:
    call = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(call, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


SERVING = dict(pid=1, state="running", service_pid=2, service_started_at=1000.0, restarts=3,
               last_healthy_at=2000.0, last_accept_length=3.4,
               canary={"last_run_at": 1900.0, "passed": True, "detail": "ok"})


@pytest.fixture
def endpoint(store):
    status = DaemonStatus(**SERVING)
    server = start_metrics("127.0.0.1:0", lambda: (status, store.counts()))
    yield server, "http://127.0.0.1:%d/metrics" % server.address[1]
    server.close()


def test_scrape_over_http_shows_service_state_incidents_and_the_process(endpoint):
    _, url = endpoint
    code, content_type, body = scrape(url)
    assert code == 200 and content_type == CONTENT_TYPE
    families = families_of(body)
    assert value(families, "ddtreed_build_info", version=__import__("ddtreed").__version__) == 1
    assert value(families, "ddtreed_service_up") == 1
    assert [dict(k)["state"] for k, v in families["ddtreed_state"].items() if v == 1] == ["running"]
    assert {dict(k)["state"] for k in families["ddtreed_state"]} == set(STATES)
    assert value(families, "ddtreed_service_restarts_total") == 3
    assert value(families, "ddtreed_last_accept_length") == 3.4
    assert value(families, "ddtreed_canary_passed") == 1
    assert value(families, "ddtreed_last_healthy_probe_timestamp_seconds") == 2000.0
    assert value(families, "ddtreed_incidents_total", category="cuda-graph-shape-mismatch") == 2
    assert value(families, "ddtreed_incidents_total", category="unknown") == 1
    assert value(families, "ddtreed_incidents_by_status", category="cuda-graph-shape-mismatch",
                 status="resolved") == 1
    assert value(families, "ddtreed_incidents_by_status", category="cuda-graph-shape-mismatch",
                 status="open") == 1
    # Two counters: summing everything named remediations never counts a reverted one twice.
    assert value(families, "ddtreed_remediations_applied_total") == 3
    assert value(families, "ddtreed_remediations_reverted_total") == 1
    assert value(families, "process_resident_memory_bytes") > 0 and "process_open_fds" in families
    assert "python_info" in families


def test_no_family_is_both_a_counter_and_a_gauge(endpoint):
    """The old `ddtreed_incidents` gauge shared its family with the `ddtreed_incidents_total` counter."""
    _, url = endpoint
    text = scrape(url)[2]
    assert family_clashes(text) == []
    types = families_of(text)["__types__"]
    exported = {name for name in types if name.startswith("ddtreed_")}
    counters = {name for name, kind in types.items() if kind == "counter"}
    expected = {name.removesuffix("_total") if name.removesuffix("_total") in counters else name
                for name in FAMILIES}
    expected = {f.removesuffix("_info") if types.get(f.removesuffix("_info")) == "info" else f for f in expected}
    assert exported == expected, exported ^ expected
    for name in counters:
        assert f"{name}_total" in families_of(text), name


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")
def test_promtool_lints_the_exposition_clean(endpoint, store):
    _, url = endpoint
    assert promtool_problems(scrape(url)[2]) == ""
    assert promtool_problems(render(None, {})) == ""


def family_clashes(text: str) -> list[str]:
    names = [family.name for family in text_string_to_metric_families(text)]
    return sorted({name for name in names if names.count(name) > 1})


def test_the_clash_check_catches_the_old_exposition():
    old = ("# HELP ddtreed_incidents_total Incidents.\n# TYPE ddtreed_incidents_total counter\n"
           'ddtreed_incidents_total{category="x"} 1\n'
           "# HELP ddtreed_incidents Incidents by status.\n# TYPE ddtreed_incidents gauge\n"
           'ddtreed_incidents{category="x",status="open"} 1\n')
    assert family_clashes(old) == ["ddtreed_incidents"]


def test_openmetrics_is_negotiated(endpoint):
    _, url = endpoint
    code, content_type, body = scrape(url, accept=OPENMETRICS)
    assert code == 200 and content_type.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n")
    parsed = {family.name: family for family in parse_openmetrics(body)}
    assert parsed["ddtreed_build"].type == "info" and parsed["ddtreed_incidents"].type == "counter"
    assert parsed["ddtreed_incidents_by_status"].type == "gauge"


def test_the_healthy_timestamp_stays_fresh_while_serving(store):
    """Each passing probe of the serving service moves the timestamp (it no longer grows as an age)."""
    status = DaemonStatus(**SERVING)
    server = start_metrics("127.0.0.1:0", lambda: (status, store.counts()))
    try:
        url = "http://127.0.0.1:%d/metrics" % server.address[1]
        before = value(families_of(scrape(url)[2]), "ddtreed_last_healthy_probe_timestamp_seconds")
        server.healthy_probe(at=5000.0)
        after = value(families_of(scrape(url)[2]), "ddtreed_last_healthy_probe_timestamp_seconds")
        server.healthy_probe(at=4000.0)  # an older report never moves it back
        again = value(families_of(scrape(url)[2]), "ddtreed_last_healthy_probe_timestamp_seconds")
    finally:
        server.close()
    assert (before, after, again) == (2000.0, 5000.0, 5000.0)


def test_before_any_state_the_service_is_down_and_unknowns_are_absent():
    families = families_of(render(None, {}))
    assert value(families, "ddtreed_service_up") == 0
    assert all(v == 0 for v in families["ddtreed_state"].values())
    for name in ("ddtreed_last_accept_length", "ddtreed_last_healthy_probe_timestamp_seconds",
                 "ddtreed_canary_passed", "ddtreed_service_restarts_total",
                 "ddtreed_remediations_applied_total"):
        assert name not in families, name


def test_a_service_still_loading_is_not_up():
    """Healthy once, then restarted: not up until a probe passes after the new start."""
    status = DaemonStatus(pid=1, state="running", service_started_at=3000.0, last_healthy_at=2000.0,
                          canary={"last_run_at": 1.0, "passed": False, "detail": "diverged"})
    families = families_of(render(status, {}))
    assert value(families, "ddtreed_service_up") == 0
    assert value(families, "ddtreed_last_healthy_probe_timestamp_seconds") == 2000
    assert value(families, "ddtreed_service_start_timestamp_seconds") == 3000
    assert value(families, "ddtreed_canary_passed") == 0


def test_label_values_are_escaped():
    counts = {"incidents": [{"category": 'we"ird\\cat\nx', "status": "open", "outcome": "", "count": 1}]}
    families = families_of(render(None, counts))
    assert value(families, "ddtreed_incidents_by_status", category='we"ird\\cat\nx', status="open") == 1


def test_other_paths_404_and_a_failing_snapshot_is_a_500():
    def broken():
        raise RuntimeError("database is locked")

    server = start_metrics("127.0.0.1:0", broken)
    try:
        base = "http://127.0.0.1:%d" % server.address[1]
        assert scrape(base + "/")[0] == 404
        code, _, body = scrape(base + "/metrics")
        assert code == 500 and "database is locked" in body
        assert scrape(base + "/metrics")[0] == 500  # the server survived it
    finally:
        server.close()


def test_idle_connections_hold_no_thread_and_the_endpoint_keeps_answering(endpoint):
    """Slowloris: 200 clients connect and send nothing. The old server spent a thread on each."""
    server, url = endpoint
    threads_before = threading.active_count()
    idle = []
    try:
        for _ in range(200):
            idle.append(socket.create_connection(server.address, timeout=10))
            idle[-1].sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        code, _, body = scrape(url)
        assert code == 200 and "ddtreed_service_up 1.0" in body
        assert threading.active_count() <= threads_before + 1  # urllib's own, at most
        assert server.open_connections <= 32
    finally:
        for sock in idle:
            sock.close()


def test_a_client_that_never_finishes_its_request_is_dropped(endpoint, monkeypatch):
    from ddtreed.ops import metrics

    server, _ = endpoint
    monkeypatch.setattr(metrics, "REQUEST_TIMEOUT_S", 0.5)
    sock = socket.create_connection(server.address, timeout=30)
    sock.sendall(b"GET /metr")
    deadline = time.monotonic() + 30
    closed = False
    while time.monotonic() < deadline and not closed:
        closed = sock.recv(1) == b""
    sock.close()
    assert closed


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
    families = families_of(render(status, {"frozen_signatures": 2}))
    assert value(families, "ddtreed_degraded") == 1 and value(families, "ddtreed_frozen_signatures") == 2


def test_an_oversized_request_is_refused_and_the_server_goes_on(endpoint):
    server, url = endpoint
    with socket.create_connection(server.address, timeout=30) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Junk: " + b"a" * 20000)
        answer = b""
        while not answer.endswith(b"request too large\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431")
    assert scrape(url)[0] == 200
