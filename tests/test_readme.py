"""Issue 17.4: the README works as written: its install and test commands are CI's, its first-
deployment config loads, and the error line it quotes is what `ddtreed run` prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    return README[start:README.index("\n## ", start + 1)]


def test_quick_start_installs_the_cpu_torch_ci_pins_and_runs_cis_test_command():
    quick = section("Quick start")
    ci = (ROOT / ".ci" / "run").read_text()
    pin = re.search(r"pip install --quiet '(torch==[\d.]+)'", ci).group(1)
    assert f"pip install '{pin}' --index-url https://download.pytorch.org/whl/cpu" in quick
    assert ".venv/bin/pip install -e '.[demo,test]'" in quick and ".[demo,test]" in ci
    assert ci.rstrip().splitlines()[-1] == ".venv/bin/python -m pytest"
    assert "\n.venv/bin/python -m pytest\n" in quick


def first_deployment_config(tmp_path: Path) -> Path:
    text = section("First real deployment")
    config = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
    path = tmp_path / "qwen.toml"
    # The README's paths are a real host's; here they live under tmp_path.
    path.write_text(config.replace("/var/log/ddtreed/qwen", str(tmp_path / "logs"))
                    .replace("/var/lib/ddtreed/qwen", str(tmp_path / "state")))
    return path


def test_the_first_deployment_config_loads_and_preflight_names_what_is_missing(tmp_path):
    from ddtreed.config import load

    path = first_deployment_config(tmp_path)
    config = load(str(path))
    assert config.service.argv[:3] == ("/opt/sglang/venv/bin/python", "-m", "sglang.launch_server")
    assert config.policy.mode == "advise"
    done = subprocess.run([sys.executable, "-m", "ddtreed", "preflight", "--config", str(path), "--strict"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr  # this machine has no /opt/sglang
    assert "[WOULD CRASH] launch-program" in done.stdout and "[SKIPPED]" in done.stdout


def test_the_quoted_error_line_is_what_run_prints(tmp_path):
    path = first_deployment_config(tmp_path)
    quoted = re.search(r"```\n(ddtreed: error: .*?)\n```", section("First real deployment")).group(1)
    done = subprocess.run([sys.executable, "-m", "ddtreed", "run", "--config", str(path), "--log-format", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    printed = [line for line in done.stderr.splitlines() if line.startswith("ddtreed: error:")]
    assert printed == [quoted.replace("/etc/ddtreed/qwen.toml", str(path))]
