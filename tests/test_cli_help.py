"""Issue 17.6: every `--help` has a description and an example; `logs` shows the service's output."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.cli import build_parser, main
from ddtreed.cli.help_text import missing
from supervision_helpers import ctrl_c_works

ROOT = Path(__file__).resolve().parent.parent


def test_every_command_has_a_description_and_an_example():
    assert missing(build_parser()) == []


@pytest.mark.parametrize("command", [["rules"], ["remediate"], ["canary"], ["remediate", "apply"], ["status"]])
def test_help_pages_as_a_user_sees_them(command):
    done = subprocess.run([sys.executable, "-m", "ddtreed", *command, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    body = done.stdout.split("\n\n", 1)[1]
    assert body.strip() and not body.startswith(("positional arguments", "options"))  # a description
    assert "\nexamples:\n  ddtreed " + " ".join(command) in done.stdout


def service_logs(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "service.stdout.log").write_text("".join(f"out {n}\n" for n in range(100)))
    (logs / "service.stderr.log").write_text("loading\nModuleNotFoundError: No module named 'sglang'\n")
    config = tmp_path / "ddtreed.toml"
    config.write_text('[service]\nargv = ["python", "-m", "sglang.launch_server"]\n'
                      f'[paths]\nlog_dir = {json.dumps(str(logs))}\n'
                      f'state_dir = {json.dumps(str(tmp_path / "state"))}\n')
    return config


def test_logs_shows_the_tail_of_each_stream(tmp_path, capsys):
    config = service_logs(tmp_path)
    assert main(["logs", "--config", str(config), "-n", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "stdout: out 98", "stdout: out 99", "stderr: loading", "stderr: ModuleNotFoundError: No module named 'sglang'"]
    assert main(["logs", "--config", str(config), "--stream", "stderr", "-n", "1"]) == 0
    assert capsys.readouterr().out == "ModuleNotFoundError: No module named 'sglang'\n"


def test_logs_follows_through_rotation(tmp_path):
    config = service_logs(tmp_path)
    stderr = tmp_path / "logs" / "service.stderr.log"
    follower = subprocess.Popen([sys.executable, "-m", "ddtreed", "logs", "--config", str(config), "-f",
                                 "--stream", "stderr", "-n", "1"], cwd=ROOT, stdout=subprocess.PIPE, text=True, preexec_fn=ctrl_c_works)
    try:
        assert follower.stdout.readline() == "ModuleNotFoundError: No module named 'sglang'\n"
        with stderr.open("a") as handle:
            handle.write("appended\n")
        assert follower.stdout.readline() == "appended\n"
        stderr.rename(stderr.with_name("service.stderr.log.1"))  # the daemon rotates: a new inode
        stderr.write_text("after rotation\n")
        assert follower.stdout.readline() == "after rotation\n"
    finally:
        follower.send_signal(signal.SIGINT)
        assert follower.wait(30) == 0


def test_logs_without_a_log_dir_is_one_line(tmp_path, capsys):
    config = tmp_path / "ddtreed.toml"
    config.write_text(f'[service]\nargv = ["python"]\n[paths]\nlog_dir = "{tmp_path / "none"}"\n')
    assert main(["logs", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (f"ddtreed: error: {config}: paths.log_dir = {tmp_path / 'none'}: no such "
                                       "directory (has the daemon started the service yet?)\n")


def test_logs_follow_starts_exactly_where_the_tail_ended(tmp_path):
    """Found under load: the follower took its starting offset after printing the tail, so a line
    written in between was lost, and a line still being written was shown cut in two."""
    config = service_logs(tmp_path)
    stderr = tmp_path / "logs" / "service.stderr.log"
    with stderr.open("a") as handle:
        handle.write("Traceback (most rec")  # the service is in the middle of a line
    follower = subprocess.Popen([sys.executable, "-m", "ddtreed", "logs", "--config", str(config), "-f",
                                 "--stream", "stderr", "-n", "1"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                preexec_fn=ctrl_c_works)
    try:
        assert follower.stdout.readline() == "ModuleNotFoundError: No module named 'sglang'\n"
        with stderr.open("a") as handle:
            handle.write("ent call last):\n")
        assert follower.stdout.readline() == "Traceback (most recent call last):\n"
    finally:
        follower.send_signal(signal.SIGINT)
        assert follower.wait(60) == 0
