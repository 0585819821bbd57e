"""The shipped unit files pass `systemd-analyze verify` and keep the settings the daemon relies on."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parent.parent / "systemd"
ANALYZE = shutil.which("systemd-analyze")


def _verifiable_copy(unit: Path, directory: Path) -> Path:
    """A copy whose ExecStart names an executable that exists here (verify checks it)."""
    text = unit.read_text().replace("ExecStart=/usr/local/bin/ddtreed", f"ExecStart={sys.executable} -m ddtreed")
    name = unit.name.replace("@.service", "@test.service")  # a template is verified as an instance
    copy = directory / name
    copy.write_text(text)
    return copy


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("name", ["ddtreed.service", "ddtreed@.service"])
def test_systemd_analyze_verify_passes(name, tmp_path):
    copy = _verifiable_copy(UNITS / name, tmp_path)
    done = subprocess.run([ANALYZE, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    # verify exits 0 on unknown keys and only warns: any output at all is a finding.
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "" and done.stdout.strip() == ""


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
def test_verify_does_catch_a_broken_unit(tmp_path):
    copy = _verifiable_copy(UNITS / "ddtreed.service", tmp_path)
    copy.write_text(copy.read_text().replace("KillMode=mixed", "KillMode=mixed\nKillMood=all"))
    done = subprocess.run([ANALYZE, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert "KillMood" in done.stderr


def _service_section(name: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str
    parser.read(UNITS / name)
    return dict(parser["Service"]) | {f"Unit.{k}": v for k, v in parser["Unit"].items()}


@pytest.mark.parametrize("name", ["ddtreed.service", "ddtreed@.service"])
def test_unit_settings_the_daemon_relies_on(name):
    service = _service_section(name)
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert service["KillMode"] == "mixed"
    assert service["Restart"] == "on-failure"
    assert int(service["Unit.StartLimitBurst"]) > 1
    # Longer than policy.stop_grace_s (30 s default) plus the port/GPU wait.
    assert int(service["TimeoutStopSec"].rstrip("s")) >= 30 + 60
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    assert service["StateDirectoryMode"] == "0700"
    # The SGLang child inherits the sandbox: it needs the GPUs and JIT-compiled code.
    assert "PrivateDevices" not in service and "MemoryDenyWriteExecute" not in service


def test_template_instances_get_their_own_config_and_state():
    service = _service_section("ddtreed@.service")
    assert "--config /etc/ddtreed/%i.toml" in service["ExecStart"]
    assert service["StateDirectory"] == "ddtreed/%i" and service["LogsDirectory"] == "ddtreed/%i"
