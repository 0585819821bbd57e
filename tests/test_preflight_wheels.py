"""The shipped example config against every real sglang wheel layout: the founding finding."""

from __future__ import annotations

from dataclasses import replace

import pytest

import wheels
from ddtreed.config import load
from ddtreed.context import parse_argv, version_in_site_packages
from ddtreed.service.host import LocalHost
from ddtreed.paths import shipped
from ddtreed.preflight import CHECKS, run_preflight
from ddtreed.remediation.flags import parse_version

pytestmark = pytest.mark.wheels


class QuietHost(LocalHost):
    def gpu_holders(self, pids=None):
        return []

    def port_in_use(self, address, port):
        return False


@pytest.mark.parametrize("version", wheels.VERSIONS)
def test_founding_finding_on_each_real_wheel(tmp_path, version):
    site = wheels.site_packages(version)
    config = load(shipped("examples") / "founding-ddtree-tp8.toml").with_state_dir(str(tmp_path))
    context = replace(parse_argv(config.service.argv), site_packages=str(site),
                      sglang_version=version_in_site_packages(LocalHost(), str(site)))
    assert context.sglang_version == version
    findings = run_preflight(config, context, QuietHost(), checks=dict(CHECKS))
    [width] = [f for f in findings if f.check == "ddtree-verify-width"]
    eager = parse_version(version) >= (0, 5, 16)
    assert width.severity == ("warning" if eager else "would-crash")
    assert (width.params["verify_width"], width.params["captured_width"]) == (33, 8)
    assert width.remediations[0] == "ddtree-verify-graph-width"  # the patch fits this layout
    assert width.params["layout"] is not None
    # Released wheels have no DDTree: said as a warning, never as a second crash.
    assert {f.check for f in findings} <= {"ddtree-verify-width", "ddtree-available"}
