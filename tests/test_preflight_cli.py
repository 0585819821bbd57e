"""`ddtreed preflight` as a user runs it: a real subprocess, real config files, exit codes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from test_preflight_width import installed

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_config(tmp_path: Path, argv: list[str], **service) -> Path:
    lines = ["[service]", "argv = " + json.dumps(argv)]
    lines += [f"{key} = {json.dumps(value)}" for key, value in service.items()]
    lines += ["[paths]", f'state_dir = "{tmp_path / "state"}"', f'log_dir = "{tmp_path / "logs"}"']
    path = tmp_path / "ddtreed.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def preflight(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", "preflight", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


FOUNDING = ["python", "-m", "sglang.launch_server", "--model-path", "moonshotai/Kimi-K2.6",
            "--tp", "8", "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path",
            "SubSir/Kimi-K2.6-DFlash-tmp-long", "--speculative-num-draft-tokens", "8",
            "--speculative-ddtree-budget", "32", "--page-size", "1", "--attention-backend", "triton"]


def test_founding_config_would_crash(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13")
    config = write_config(tmp_path, FOUNDING + ["--port", str(free_port())], site_packages=str(site))
    done = preflight("--config", str(config))
    assert done.returncode == 1, done.stderr
    assert "[WOULD CRASH] ddtree-verify-width" in done.stdout
    assert "budget 32 + 1 root = 33" in done.stdout
    assert "prevented by: ddtree-verify-graph-width" in done.stdout
    assert "sglang 0.5.13" in done.stdout


def test_json_output_and_state_dir(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13")
    config = write_config(tmp_path, FOUNDING + ["--port", str(free_port())], site_packages=str(site))
    done = preflight("--config", str(config), "--json", "--state-dir", str(tmp_path / "other"))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["sglang_version"] == "0.5.13"
    [width] = [f for f in report["findings"] if f["check"] == "ddtree-verify-width"]
    assert width["signature"] == "preflight:ddtree-verify-width"
    assert width["params"]["verify_width"] == 33 and width["remediations"][0] == "ddtree-verify-graph-width"


def test_clean_launch_exits_zero(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13")
    config = write_config(tmp_path, [sys.executable, "-m", "sglang.launch_server", "--model-path", "m",
                                     "--port", str(free_port())], site_packages=str(site))
    done = preflight("--config", str(config), "--strict")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "no findings: nothing known would crash at launch"
    assert "sglang 0.5.13 at" in done.stdout


def test_missing_interpreter_would_crash_and_skips_what_it_cannot_check(tmp_path):
    """Issue 17.1: a `python` that does not exist got "no findings: nothing known would crash"."""
    config = write_config(tmp_path, ["python", "-m", "sglang.launch_server", "--model-path", "m",
                                     "--port", str(free_port())], python=str(tmp_path / "no-python"))
    done = preflight("--config", str(config))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[WOULD CRASH] service-python" in done.stdout
    assert f"service.python '{tmp_path / 'no-python'}': no such file" in done.stdout
    assert "[SKIPPED] sglang-installed:" in done.stdout and "[SKIPPED] unsupported-flags:" in done.stdout
    assert "nothing known would crash" not in done.stdout
    assert "INCOMPLETE: 2 checks did not run (sglang-installed, unsupported-flags)" in done.stdout


def test_python_without_sglang_would_crash_with_no_module_named(tmp_path):
    config = write_config(tmp_path, [sys.executable, "-m", "sglang.launch_server", "--model-path", "m",
                                     "--port", str(free_port())])
    done = preflight("--config", str(config), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    [missing] = [f for f in report["findings"] if f["check"] == "sglang-installed"]
    assert missing["severity"] == "would-crash" and "No module named 'sglang'" in missing["why"]
    assert report["complete"] is False
    assert {s["check"] for s in report["skipped"]} == {"unsupported-flags"}


def test_strict_fails_when_checks_were_skipped(tmp_path):
    # A DDTree launch whose interpreter is not python: nothing can be probed for sglang.
    script = tmp_path / "serve"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    config = write_config(tmp_path, [str(script), "--speculative-algorithm", "DDTREE",
                                     "--port", str(free_port())])
    done = preflight("--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[SKIPPED] sglang-installed: no interpreter known" in done.stdout
    assert "[SKIPPED] ddtree-verify-width: sglang was not found" in done.stdout
    assert "nothing known would crash" not in done.stdout
    strict = preflight("--config", str(config), "--strict")
    assert strict.returncode == 3, strict.stdout + strict.stderr


def test_unwritable_log_and_state_dirs_would_crash(tmp_path):
    site = installed(tmp_path, "cuda-graph-runner-hook", "0.5.13")
    path = tmp_path / "ddtreed.toml"
    path.write_text("[service]\nargv = " + json.dumps([sys.executable, "-m", "sglang.launch_server",
                                                      "--port", str(free_port())])
                    + f"\nsite_packages = {json.dumps(str(site))}\n"
                    + "[paths]\nlog_dir = \"/proc/ddtreed-test/logs\"\nstate_dir = \"/proc/ddtreed-test/state\"\n")
    done = preflight("--config", str(path), "--json", "--state-dir", "/proc/ddtreed-test/state")
    assert done.returncode == 1, done.stdout + done.stderr
    found = {f["params"]["key"]: f for f in json.loads(done.stdout)["findings"] if f["check"] == "writable-dirs"}
    assert set(found) == {"paths.log_dir", "paths.state_dir"}
    assert "cannot create it in /proc" in found["paths.log_dir"]["what"]


def test_bad_config_exits_two_with_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[service]\nargv = ["python"]\n[preflight]\nblock_on = "port-in-use"\n')
    done = preflight("--config", str(path))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "preflight.block_on" in done.stderr


def test_remote_service_without_inventory_is_a_config_error(tmp_path):
    config = write_config(tmp_path, ["python", "-m", "sglang.launch_server"], remote="gpu-node-07")
    done = preflight("--config", str(config))
    assert done.returncode == 2
    assert "service.inventory" in done.stderr
