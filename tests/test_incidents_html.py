"""Issue 17.7: `incidents show ID --html FILE` and `incidents --html DIR`, seen in a real browser.

The pages are rendered by Debian's headless chromium (tests/browser.py): the DOM it built and the
pixels it drew must show the timeline (service phases, crash marks, the remediation tried, probes,
acceptance length) beside the diagnosis and the service's own error lines, and it must load
nothing from the network.
"""

from __future__ import annotations

import re

import browser
import pytest
from test_incidents_story import record_escalated
from test_incidents_support import record_founding

from ddtreed.cli import main
from ddtreed.incidents import Store, database_path

pytestmark = pytest.mark.slow

GREEN, RED, AMBER, PURPLE = (0x2E, 0x9D, 0x4F), (0xD4, 0x3D, 0x3D), (0xE0, 0xA5, 0x26), (0x6B, 0x3F, 0xC0)


@pytest.fixture
def state(tmp_path, capsys):
    directory = tmp_path / "state"
    with Store(database_path(directory)) as store:
        record_founding(store)  # 1: resolved after a patch, accept length 3.10
        record_escalated(store)  # 2: a crash loop, a flag change reverted, escalated
    capsys.readouterr()
    return directory


def write_page(state, tmp_path, capsys, incident_id: int):
    page = tmp_path / f"page-{incident_id}.html"
    assert main(["incidents", "show", str(incident_id), "--state-dir", str(state), "--html", str(page)]) == 0
    assert capsys.readouterr().out == f"wrote {page}\n"
    return page


def test_the_page_is_self_contained(state, tmp_path, capsys):
    text = write_page(state, tmp_path, capsys, 2).read_text()
    assert "default-src 'none'" in text  # the browser may load nothing at all
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    assert "<script" not in text and "@import" not in text


def test_an_escalated_crash_loop_as_the_browser_shows_it(state, tmp_path, capsys):
    chromium = browser.chromium()
    page = write_page(state, tmp_path, capsys, 2)
    dom = browser.dump_dom(chromium, page)
    assert "<title>incident 2: escalated unknown</title>" in dom
    svg = dom[dom.index('<svg'):dom.index('</svg>')]
    assert svg.count('data-kind="crash"') == 5  # the crash, three recurrences, the failed restart
    assert 'data-state="starting"' in svg and 'data-state="down"' in svg
    assert 'class="remediation" data-status="reverted"' in svg
    assert "lower-cuda-graph-max-bs (reverted)" in svg
    assert "no acceptance length measured" in svg
    assert re.search(r'<pre id="last-error">ModuleNotFoundError: No module named \'sgl_kernel\'</pre>', dom)
    assert "service exited with code 1 during startup" in dom  # the diagnosis, numbers filled in
    assert "tried, reverted" in dom and "--cuda-graph-max-bs 256 → 128" in dom
    pixels = browser.screenshot(chromium, page, "1200,800")
    assert browser.count_colour(pixels, RED) > 500  # the crash marks and the reverted bar are drawn
    assert browser.count_colour(pixels, AMBER) > 500  # the restart that never became healthy
    assert browser.count_colour(pixels, GREEN) < 150  # it never served: only the legend swatch is green


def test_a_resolved_incident_shows_serving_and_acceptance(state, tmp_path, capsys):
    chromium = browser.chromium()
    page = write_page(state, tmp_path, capsys, 1)
    dom = browser.dump_dom(chromium, page)
    svg = dom[dom.index('<svg'):dom.index('</svg>')]
    assert 'data-state="serving"' in svg
    assert 'class="remediation" data-status="verified"' in svg
    assert "<title>accept length 3.10</title>" in svg
    pixels = browser.screenshot(chromium, page, "1200,800")
    assert browser.count_colour(pixels, GREEN) > 1000  # serving band and the verified patch
    assert browser.count_colour(pixels, PURPLE) > 20  # the acceptance-length point


def test_the_index_links_every_incident(state, tmp_path, capsys):
    chromium = browser.chromium()
    target = tmp_path / "report"
    assert main(["incidents", "--state-dir", str(state), "--html", str(target)]) == 0
    assert sorted(p.name for p in target.iterdir()) == ["incident-1.html", "incident-2.html", "index.html"]
    dom = browser.dump_dom(chromium, target / "index.html")
    rows = re.findall(r'<a href="(incident-\d+\.html)">(\d+)</a>', dom)
    assert rows == [("incident-2.html", "2"), ("incident-1.html", "1")]
    assert ">escalated<" in dom and ">resolved<" in dom and ">4x<" in dom
