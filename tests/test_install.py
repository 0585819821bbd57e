"""`ddtreed install` into a temporary root, run as a real command."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.config import load

ROOT = Path(__file__).resolve().parent.parent


def ddtreed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_install_writes_unit_config_and_tight_directories(tmp_path):
    done = ddtreed("install", "--root", str(tmp_path), "--config-name", "kimi")
    assert done.returncode == 0, done.stderr
    unit = tmp_path / "etc/systemd/system/ddtreed@.service"
    config = tmp_path / "etc/ddtreed/kimi.toml"
    state, logs = tmp_path / "var/lib/ddtreed/kimi", tmp_path / "var/log/ddtreed/kimi"
    assert mode(state) == 0o700 and mode(logs) == 0o750 and mode(config) == 0o640
    assert "systemctl daemon-reload && systemctl enable --now ddtreed@kimi" in done.stdout
    for path in (unit, config, state, logs):
        assert str(path) in done.stdout
    loaded = load(config)  # the skeleton loads as is
    assert loaded.paths.state_dir == "/var/lib/ddtreed/kimi" and loaded.paths.log_dir == "/var/log/ddtreed/kimi"
    assert "--speculative-ddtree-budget" in loaded.service.argv
    assert "EDIT ME" in config.read_text()
    exec_start = next(line for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(" run --config /etc/ddtreed/%i.toml")
    assert os.access(exec_start.split("=", 1)[1].split()[0], os.X_OK)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_the_installed_unit_verifies(tmp_path):
    assert ddtreed("install", "--root", str(tmp_path)).returncode == 0
    instance = tmp_path / "ddtreed@main.service"
    shutil.copy(tmp_path / "etc/systemd/system/ddtreed@.service", instance)
    done = subprocess.run(["systemd-analyze", "verify", str(instance)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


def test_dry_run_changes_nothing_and_says_what_it_would_do(tmp_path):
    done = ddtreed("install", "--dry-run", "--root", str(tmp_path / "target"))
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "target").exists()
    assert "would create directory" in done.stdout and "would write" in done.stdout
    assert "systemctl enable --now ddtreed@main" in done.stdout


def test_an_existing_config_is_kept_unless_forced(tmp_path):
    config = tmp_path / "etc/ddtreed/main.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[service]\nargv = ["my-server"]\n')
    done = ddtreed("install", "--root", str(tmp_path))
    assert done.returncode == 0 and "config exists (--force overwrites it)" in done.stdout
    assert config.read_text() == '[service]\nargv = ["my-server"]\n'
    assert ddtreed("install", "--root", str(tmp_path), "--force").returncode == 0
    assert "EDIT ME" in config.read_text()


def test_a_second_install_keeps_what_is_right_and_tightens_what_is_not(tmp_path):
    assert ddtreed("install", "--root", str(tmp_path)).returncode == 0
    state = tmp_path / "var/lib/ddtreed/main"
    os.chmod(state, 0o755)
    done = ddtreed("install", "--root", str(tmp_path))
    assert done.returncode == 0
    assert f"tighten {state} (0700)" in done.stdout and "unit unchanged" in done.stdout
    assert mode(state) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_user_runs_the_unit_and_owns_the_directories(tmp_path):
    done = ddtreed("install", "--root", str(tmp_path), "--user", "nobody")
    assert done.returncode == 0, done.stderr
    assert "\nUser=nobody\n" in (tmp_path / "etc/systemd/system/ddtreed@.service").read_text()
    assert (tmp_path / "var/lib/ddtreed/main").owner() == "nobody"


@pytest.mark.parametrize("args, message", [
    (["--user", "no-such-user-ddtreed"], "--user no-such-user-ddtreed: no such user"),
    (["--config-name", "../etc/passwd"], "--config-name must be"),
])
def test_bad_requests_are_one_line_errors(tmp_path, args, message):
    done = ddtreed("install", "--root", str(tmp_path), *args)
    assert done.returncode == 2
    assert done.stderr.startswith("ddtreed: error: ") and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "etc").exists()
