"""The shipped unit files pass `systemd-analyze verify` and keep the settings the daemon relies on."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parent.parent / "ddtreed" / "data" / "systemd"
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
    # RDMA registration pins memory: the SGLang tree inherits this limit.
    assert service["LimitMEMLOCK"] == "infinity"
    assert service["EnvironmentFile"].startswith("-/etc/default/ddtreed")
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


@pytest.mark.parametrize("name", ["ddtreed.service", "ddtreed@.service"])
def test_hardening_keeps_what_a_gpu_server_needs(name):
    service = _service_section(name)
    families = set(service["RestrictAddressFamilies"].split())
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}
    capabilities = set(service["CapabilityBoundingSet"].split())
    assert {"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_MODULE", "CAP_NET_RAW"}.isdisjoint(capabilities)
    assert {"CAP_KILL", "CAP_DAC_OVERRIDE", "CAP_SYS_PTRACE", "CAP_IPC_LOCK"} <= capabilities
    assert service["SystemCallArchitectures"] == "native" and service["RestrictNamespaces"] == "yes"
    # A deny list that fails calls with EPERM: an allow list would kill the model server.
    assert service["SystemCallFilter"].startswith("~") and service["SystemCallErrorNumber"] == "EPERM"
    for needed in ("@resources", "@privileged", "@debug"):
        assert needed not in service["SystemCallFilter"]
    # /dev/nvidia*, /dev/infiniband, /dev/gdrdrv stay reachable.
    assert "DevicePolicy" not in service and "DeviceAllow" not in service and "PrivateUsers" not in service


def _security_score(unit: Path) -> float | None:
    done = subprocess.run([ANALYZE, "security", "--offline=yes", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout + done.stderr)
    return float(found.group(1)) if found else None


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("name", ["ddtreed.service", "ddtreed@.service"])
def test_security_exposure_stays_at_the_recorded_level(name, tmp_path):
    """docs/service.md records 7.3 MEDIUM before the hardening and 3.5 OK after."""
    score = _security_score(_verifiable_copy(UNITS / name, tmp_path))
    if score is None:
        pytest.skip("this systemd-analyze has no --offline security check")
    assert score <= 3.5


def test_notify_reload_on_systemd_253_and_later():
    from ddtreed.ops.unitfile import for_systemd

    text = (UNITS / "ddtreed@.service").read_text()
    assert for_systemd(text, 252) == text and for_systemd(text, None) == text
    upgraded = for_systemd(text, 253)
    assert "\nType=notify-reload\nReloadSignal=SIGHUP\n" in upgraded
    assert "\nExecReload=" not in upgraded
    assert upgraded.replace("Type=notify-reload\nReloadSignal=SIGHUP\n", "") == \
        re.sub(r"(?m)^(Type=notify|ExecReload=.*)\n", "", text)


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
def test_the_installed_unit_fits_this_systemd(tmp_path):
    """What `ddtreed install` writes loads on the systemd that is here (notify-reload or not)."""
    from ddtreed.ops.install import unit_text
    from ddtreed.ops.unitfile import NOTIFY_RELOAD_SINCE, systemd_version

    text = unit_text().replace("ddtreed@.service", "ddtreed@test.service")
    unit = tmp_path / "ddtreed@test.service"
    unit.write_text(text)
    done = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
    version = systemd_version()
    expected = "notify-reload" if version and version >= NOTIFY_RELOAD_SINCE else "notify"
    assert f"\nType={expected}\n" in text
