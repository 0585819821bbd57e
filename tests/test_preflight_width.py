"""The founding check against installed-package layouts built from the patch's own anchors."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from ddtreed.config import load
from ddtreed.context import parse_argv
from ddtreed.service.host import LocalHost
from ddtreed.paths import shipped
from ddtreed.preflight import CHECKS, run_preflight
from ddtreed.remediation.catalog import load_remediations
from ddtreed.remediation.engine import Engine

EXAMPLE = shipped("examples") / "founding-ddtree-tp8.toml"
WIDTH = "ddtree-verify-graph-width"


class QuietHost(LocalHost):
    def gpu_holders(self, pids=None):
        return []

    def port_in_use(self, address, port):
        return False  # the example's port 30000 may be busy on a dev box; checked elsewhere


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def layout_named(name: str):
    remediation = load_remediations([shipped("remediations")]).get(WIDTH)
    return next(layout for layout in remediation.layouts if layout.name == name)


def installed(tmp_path: Path, layout_name: str, version: str, ddtree: bool = True) -> Path:
    """A site-packages whose width file holds the layout's anchor, vouched for by RECORD."""
    layout = layout_named(layout_name)
    site = tmp_path / f"site-{layout_name}-{version}"
    target = site / layout.target
    target.parent.mkdir(parents=True)
    body = f"class Runner:\n    def __init__(self, model_runner):\n{layout.anchor}"
    target.write_text(body if layout.anchor.startswith(" ") else layout.anchor)
    files = [layout.target]
    if ddtree:
        spec_info = site / "sglang/srt/speculative/spec_info.py"
        spec_info.parent.mkdir(parents=True, exist_ok=True)
        spec_info.write_text('DDTREE = "DDTREE"\n')
    name = layout.distribution.replace("-", "_")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    (info / "RECORD").write_text("".join(
        f"{rel},{record_hash((site / rel).read_bytes())},{(site / rel).stat().st_size}\n" for rel in files))
    return site


def founding(tmp_path, site: Path, budget: int = 32):
    config = load(EXAMPLE).with_state_dir(str(tmp_path / "state"))
    argv = [t if t != "32" else str(budget) for t in config.service.argv]
    context = parse_argv(argv)
    from dataclasses import replace
    from ddtreed.context import version_in_site_packages

    return config, replace(context, site_packages=str(site),
                           sglang_version=version_in_site_packages(LocalHost(), str(site)))


def width_findings(config, context, engine=None):
    checks = {k: CHECKS[k] for k in ("ddtree-verify-width", "ddtree-available")}
    return run_preflight(config, context, QuietHost(), engine=engine, checks=checks)


def test_founding_finding_on_the_0_5_13_layout(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13")
    config, context = founding(tmp_path, site)
    [finding] = width_findings(config, context)
    assert finding.check == "ddtree-verify-width" and finding.severity == "would-crash"
    assert finding.category == "cuda-graph-shape-mismatch"
    assert "The size of tensor a (8) must match the size of tensor b (33)" in finding.what
    assert "budget 32 + 1 root = 33" in finding.why and "block size 8" in finding.why
    assert finding.remediations == (WIDTH, "ddtree-to-dflash")
    assert finding.params["verify_width"] == 33 and finding.params["captured_width"] == 8


def test_patch_applied_by_the_engine_prevents_the_finding(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13")
    config, context = founding(tmp_path, site)
    engine = Engine(QuietHost(), str(tmp_path / "state"), load_remediations([shipped("remediations")]))
    [finding] = width_findings(config, context, engine=engine)
    assert finding.remediations[0] == WIDTH  # the engine can plan it here
    engine.apply(engine.plan(WIDTH, context))
    assert width_findings(config, context, engine=engine) == []


def test_budget_block_size_minus_one_needs_no_wider_graph(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13")
    config, context = founding(tmp_path, site, budget=7)
    assert width_findings(config, context) == []


def test_eager_fallback_layouts_only_warn(tmp_path):
    site = installed(tmp_path, "spec-utils-server-args", "0.5.17")
    config, context = founding(tmp_path, site)
    [finding] = width_findings(config, context)
    assert finding.severity == "warning" and "eagerly" in finding.what


def test_a_build_without_ddtree_warns_and_still_reports_the_width(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13", ddtree=False)
    config, context = founding(tmp_path, site)
    checks = sorted(f.check for f in width_findings(config, context))
    assert checks == ["ddtree-available", "ddtree-verify-width"]


def test_not_ddtree_is_quiet_and_no_installation_is_skipped(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13")
    config, context = founding(tmp_path, site)
    from dataclasses import replace

    assert width_findings(config, replace(context, speculative_algorithm="DFLASH")) == []
    # No installation found: the checks say they were skipped, never that all is well.
    skipped = width_findings(config, replace(context, site_packages=None))
    assert [(f.check, f.kind) for f in skipped] == [("ddtree-verify-width", "skipped"),
                                                   ("ddtree-available", "skipped")]
