"""The installation probe runs the service's real interpreter, never imports sglang, and caches."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ddtreed.config import from_mapping
from ddtreed.context import probe_installation, service_context, version_in_site_packages
from ddtreed.service.host import LocalHost

PYTHON = sys.executable


class CountingHost(LocalHost):
    """The real local host, counting interpreter starts."""

    def __init__(self):
        self.python_runs = 0

    def run(self, argv, timeout):
        if any("importlib.metadata" in token for token in argv):
            self.python_runs += 1
        return super().run(argv, timeout)


def fake_site_packages(root: Path, version: str = "0.5.13") -> Path:
    site = root / "site-packages"
    (site / "sglang").mkdir(parents=True)
    # Importing it would fail loudly: the probe must find it without importing it.
    (site / "sglang" / "__init__.py").write_text("raise SystemExit('sglang was imported')\n")
    info = site / f"sglang-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\nbody\n")
    return site


def test_probe_finds_version_and_site_packages_without_import(tmp_path):
    site = fake_site_packages(tmp_path)
    host = CountingHost()
    found = probe_installation(PYTHON, host, str(tmp_path / "state"), env={"PYTHONPATH": str(site)})
    assert found == ("0.5.13", str(site))
    assert host.python_runs == 1


def test_probe_is_cached_and_revalidated(tmp_path):
    site = fake_site_packages(tmp_path)
    state = str(tmp_path / "state")
    host = CountingHost()
    env = {"PYTHONPATH": str(site)}
    probe_installation(PYTHON, host, state, env=env)
    assert probe_installation(PYTHON, host, state, env=env) == ("0.5.13", str(site))
    assert host.python_runs == 1  # the second answer came from the cache file
    cache = json.loads((tmp_path / "state" / "installation-probe.json").read_text())
    assert len(cache) == 1
    assert oct(os.stat(tmp_path / "state" / "installation-probe.json").st_mode & 0o777) == "0o600"
    # An upgrade replaces the dist-info directory: the cached answer is stale and re-probed.
    (site / "sglang-0.5.13.dist-info" / "METADATA").unlink()
    (site / "sglang-0.5.13.dist-info").rmdir()
    info = site / "sglang-0.5.20.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.20\n")
    assert probe_installation(PYTHON, host, state, env=env) == ("0.5.20", str(site))
    assert host.python_runs == 2


def test_probe_without_sglang(tmp_path):
    assert probe_installation(PYTHON, LocalHost(), str(tmp_path)) == (None, None)


def test_probe_of_a_missing_interpreter(tmp_path):
    assert probe_installation(str(tmp_path / "nope" / "python3"), LocalHost(), None) == (None, None)


def test_source_checkout_version_from_version_py(tmp_path):
    site = tmp_path / "python"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("raise SystemExit('imported')\n")
    (site / "sglang" / "version.py").write_text('__version__ = "0.5.15.dev7"\n')
    found = probe_installation(PYTHON, LocalHost(), None, env={"PYTHONPATH": str(site)})
    assert found == ("0.5.15.dev7", str(site))


def test_version_in_site_packages_prefers_sglang_then_any_dist_info(tmp_path):
    site = fake_site_packages(tmp_path, "0.5.21")
    (site / "aaa-1.0.dist-info").mkdir()
    (site / "aaa-1.0.dist-info" / "METADATA").write_text("Name: aaa\nVersion: 1.0\n")
    assert version_in_site_packages(LocalHost(), str(site)) == "0.5.21"
    demo = tmp_path / "demo"
    (demo / "ddtreed_demo_engine-0.1.0.dist-info").mkdir(parents=True)
    (demo / "ddtreed_demo_engine-0.1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ddtreed-demo-engine\nVersion: 0.1.0\n")
    assert version_in_site_packages(LocalHost(), str(demo)) == "0.1.0"
    assert version_in_site_packages(LocalHost(), str(tmp_path / "missing")) is None


def config_for(tmp_path, argv, **service):
    return from_mapping({"service": {"argv": argv, **service},
                         "paths": {"state_dir": str(tmp_path / "state"), "log_dir": str(tmp_path)}})


def test_service_context_with_site_packages_override(tmp_path):
    site = fake_site_packages(tmp_path, "0.5.13")
    argv = ["python3", "-m", "sglang.launch_server", "--speculative-algorithm", "DDTREE",
            "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "32", "--port", "30000"]
    host = CountingHost()
    context = service_context(config_for(tmp_path, argv, site_packages=str(site), port=31234), host)
    assert context.sglang_version == "0.5.13" and context.site_packages == str(site)
    assert context.port == 31234  # service.port wins over --port
    assert context.ddtree_budget == 32
    assert host.python_runs == 0  # an override needs no interpreter start


def test_service_context_probes_the_argv_interpreter(tmp_path):
    site = fake_site_packages(tmp_path, "0.5.16")
    argv = [PYTHON, "-m", "sglang.launch_server", "--model-path", "m", "--port", "30123"]
    context = service_context(config_for(tmp_path, argv, env={"PYTHONPATH": str(site)}), LocalHost())
    assert (context.sglang_version, context.site_packages, context.port) == ("0.5.16", str(site), 30123)


def test_service_context_reads_a_console_script_shebang(tmp_path):
    site = fake_site_packages(tmp_path, "0.5.22")
    script = tmp_path / "bin" / "sglang"
    script.parent.mkdir()
    script.write_text(f"#!{PYTHON}\nimport sys\n")
    script.chmod(0o755)
    argv = [str(script), "serve", "--model-path", "m"]
    context = service_context(config_for(tmp_path, argv, env={"PYTHONPATH": str(site)}), LocalHost())
    assert context.sglang_version == "0.5.22"


def test_version_from_the_dist_info_name_when_metadata_is_absent(tmp_path):
    (tmp_path / "sglang-0.5.14.dist-info").mkdir()
    (tmp_path / "sglang-0.5.14.dist-info" / "RECORD").write_text("")
    assert version_in_site_packages(LocalHost(), str(tmp_path)) == "0.5.14"
