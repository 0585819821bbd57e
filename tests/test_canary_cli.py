"""`ddtreed canary` exit codes and one-line errors, without a running service."""

from __future__ import annotations

import json
import subprocess
import sys

from ddtreed.demo import REPO_ROOT, free_port, to_toml


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", "canary", *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=60)


def config(tmp_path, **canary) -> str:
    path = tmp_path / "ddtreed.toml"
    path.write_text(to_toml({
        "service": {"argv": ["python", "-m", "sglang.launch_server", "--model-path", "/m/t",
                             "--port", str(free_port())]},
        "paths": {"state_dir": str(tmp_path / "state"), "log_dir": str(tmp_path / "logs")},
        "canary": {"timeout_s": 3.0, **canary}}))
    return str(path)


def test_status_before_any_run_is_not_an_error(tmp_path):
    text = cli("status", "--state-dir", str(tmp_path / "none"))
    assert (text.returncode, text.stdout.strip()) == (0, f"no canary run recorded yet in {tmp_path / 'none'}")
    assert json.loads(cli("status", "--state-dir", str(tmp_path), "--json").stdout) == {"last_run": None}
    assert not (tmp_path / "none").exists()


def test_bad_canary_value_is_one_line_exit_2(tmp_path):
    path = config(tmp_path, max_new_tokens=0)
    result = cli("check", "--config", path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"ddtreed: error: {path}: canary.max_new_tokens: out of range, got 0")


def test_check_without_a_service_fails_and_is_recorded(tmp_path):
    path = config(tmp_path)
    result = cli("check", "--config", path, "--json")
    answer = json.loads(result.stdout)
    assert result.returncode == 1 and answer["passed"] is False and answer["category"] is None
    assert answer["detail"].startswith("canary could not run: prompt 1: /generate: ")
    status = cli("status", "--config", path)
    assert status.returncode == 1 and "canary: FAILED (could not run)" in status.stdout


def test_record_without_a_service_records_nothing(tmp_path):
    result = cli("record", "--config", config(tmp_path))
    assert result.returncode == 1 and "no goldens recorded" in result.stderr
    assert result.stdout == ""
