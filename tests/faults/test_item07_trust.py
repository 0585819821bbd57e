"""Item 7 of issue 16: the config file (its argv runs as root) is held to the rule files' trust
rules, and rule or remediation files owned by another ordinary user are refused too."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hostile import NOBODY, foreign_owned, run_cli, service_config, world_writable

from ddtreed.paths import shipped
from ddtreed.remediation import load_remediations
from ddtreed.rules import load_rules

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def _group_writable_foreign(path: Path) -> Path:
    os.chmod(path, 0o664)
    return foreign_owned(path)


CONFIG_BREAKS = {
    "world-writable": (world_writable, "refused: world-writable (mode 0646); fix with chmod o-w {path}"),
    "foreign-owner": (foreign_owned, f"refused: owned by uid {NOBODY}, neither root nor ddtreed's uid "
                                     f"{os.geteuid()}; fix with chown {os.geteuid()} {{path}}"),
    "group-writable-foreign": (_group_writable_foreign, f"refused: group-writable (mode 0664) and owned by "
                                                        f"uid {NOBODY}, not ddtreed's uid {os.geteuid()}"),
}


@pytest.mark.parametrize("break_name", sorted(CONFIG_BREAKS))
def test_item07_an_untrusted_config_file_is_refused_with_one_line_and_exit_2(tmp_path, break_name):
    make, expected = CONFIG_BREAKS[break_name]
    if break_name != "world-writable" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    config = service_config(tmp_path / "run")
    os.chmod(config, 0o644)
    make(config)
    result = run_cli("run", "--config", str(config), timeout=30)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"ddtreed: error: {config}: " + expected.format(path=config)), lines[0]
    assert not (tmp_path / "run" / "state" / "ddtreed.pid").exists()  # nothing was started


def test_item07_a_trusted_config_still_loads(tmp_path):
    config = service_config(tmp_path / "run")
    os.chmod(config, 0o600)
    (tmp_path / "run" / "state").mkdir(mode=0o700)
    result = run_cli("status", "--config", str(config), "--json", timeout=30)
    assert result.returncode in (0, 1, 3), result.stderr  # "not running" is an answer, not a refusal
    assert "refused" not in result.stderr


@needs_root
@pytest.mark.parametrize("kind", ["rules", "remediations"])
def test_item07_a_rule_or_remediation_file_of_another_user_is_refused(tmp_path, kind):
    """Not group- or world-writable, but its owner can make it so and edit it: refused."""
    name = "cuda-graph.toml" if kind == "rules" else "ddtree-verify-graph-width.toml"
    (tmp_path / kind).mkdir()
    path = tmp_path / kind / name
    shutil.copyfile(Path(shipped(kind)) / name, path)
    os.chmod(path, 0o644)
    load = load_rules if kind == "rules" else load_remediations
    assert load([path.parent])
    foreign_owned(path)
    with pytest.raises(ValueError) as caught:
        load([path.parent])
    assert str(caught.value) == (f"{path}:0: file: refused: owned by uid {NOBODY}, neither root nor ddtreed's "
                                 f"uid {os.geteuid()}; fix with chown {os.geteuid()} {path}")
    os.chown(path, 0, -1)  # root's files (/usr/share/…) stay trusted
    assert load([path.parent])
