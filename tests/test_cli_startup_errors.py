"""`ddtreed run` on a host that cannot run the config: one line naming the key and path, exit 2.

Issue 17.1: a missing argv[0], an unexecutable script, a log or state directory that cannot be
created ended in a 20-line traceback. Real subprocesses, real files, real spawn errors.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def config(tmp_path: Path, argv0: str, log_dir: str | None = None, state_dir: str | None = None) -> Path:
    path = tmp_path / "ddtreed.toml"
    argv = [argv0, "-m", "sglang.launch_server", "--model-path", "/models/none", "--port", "39123"]
    path.write_text(
        "[service]\nargv = " + json.dumps(argv) + "\n"
        "[paths]\n"
        f"log_dir = {json.dumps(log_dir or str(tmp_path / 'logs'))}\n"
        f"state_dir = {json.dumps(state_dir or str(tmp_path / 'state'))}\n"
        "[policy]\nmax_restarts = 1\n")
    return path


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", "run", "--config", str(path), "--log-format", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    """What a person reads: stderr lines that are not the daemon's JSON events."""
    return [line for line in (done.stderr + done.stdout).splitlines() if line and not line.startswith("{")]


def unexecutable(tmp_path: Path) -> str:
    script = tmp_path / "bin" / "serve"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    script.chmod(0o644)
    return str(script)


CASES = {
    "missing-argv0": (lambda tmp: {"argv0": str(tmp / "venv" / "bin" / "python3")},
                      "service.argv[0] = {tmp}/venv/bin/python3: No such file or directory"),
    "argv0-not-executable": (lambda tmp: {"argv0": unexecutable(tmp)},
                             "service.argv[0] = {tmp}/bin/serve: Permission denied"),
    "log-dir-uncreatable": (lambda tmp: {"argv0": sys.executable, "log_dir": "/proc/ddtreed-test/logs"},
                            "paths.log_dir = /proc/ddtreed-test/logs"),
    "state-dir-uncreatable": (lambda tmp: {"argv0": sys.executable, "state_dir": "/proc/ddtreed-test/state"},
                              "paths.state_dir = /proc/ddtreed-test/state"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_os_failure_at_start_is_one_line_naming_the_key(tmp_path, case):
    options, expected = CASES[case]
    path = config(tmp_path, **options(tmp_path))
    done = run(path)
    assert "Traceback" not in done.stderr + done.stdout
    assert done.returncode == 2, done.stderr[-2000:]
    [line] = error_lines(done)
    assert line.startswith(f"ddtreed: error: {path}: "), line
    assert expected.format(tmp=tmp_path) in line, line
