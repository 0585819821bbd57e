"""The daemon's TOML config: the shipped example loads, and each mistake is one line naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.config import ConfigError, load
from ddtreed.paths import shipped

EXAMPLE = shipped("examples") / "founding-ddtree-tp8.toml"
GOOD = '[service]\nargv = ["python", "-m", "sglang.launch_server", "--port", "30000"]\n'


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ddtreed.toml"
    path.write_text(text)
    return path


def test_the_shipped_founding_example_loads_with_its_ddtree_launch():
    config = load(EXAMPLE)
    argv = config.service.argv
    assert argv[argv.index("--speculative-ddtree-budget") + 1] == "32"
    assert config.policy.mode == "auto" and config.probe.startup_timeout_s >= 645


def test_relative_paths_are_relative_to_the_config_file(tmp_path):
    config = load(_write(tmp_path, GOOD + '[paths]\nstate_dir = "state"\nlog_dir = "logs"\n'))
    assert config.paths.state_dir == str(tmp_path / "state")
    assert config.database == tmp_path / "state" / "incidents.sqlite3"


@pytest.mark.parametrize("text, expected", [
    (GOOD + "[polcy]\n", "unknown section [polcy]"),
    (GOOD + "[policy]\nmode = \"yes\"\n", "policy.mode must be one of auto, advise, off, got 'yes'"),
    (GOOD + "[policy]\nmax_restarts = \"5\"\n", "policy.max_restarts must be an integer"),
    (GOOD + "[probe]\nstartup_timeout_s = 0\n", "probe.startup_timeout_s must be > 0"),
    (GOOD + "[service.env]\nCUDA_VISIBLE_DEVICES = 0\n", "service.env must be a table of strings"),
    (GOOD.replace("argv", "argvv"), "unknown key service.argvv"),
    ("[service]\nargv = []\n", "service.argv must name the launch command"),
    ("[paths]\n", "missing section [service]"),
    ("[service\n", "invalid TOML"),
])
def test_each_mistake_is_one_line_naming_the_key(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load(tmp_path / "absent.toml")


def test_the_cli_exits_2_with_the_line_and_no_traceback(tmp_path):
    path = _write(tmp_path, GOOD + "[policy]\nmode = \"yes\"\n")
    done = subprocess.run([sys.executable, "-m", "ddtreed", "run", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"ddtreed: error: {path}: policy.mode must be one of auto, advise, "
                                   "off, got 'yes'")
