"""Issue 7.6: rule and remediation files an attacker could edit are refused, patch targets cannot
leave the package, and the state the daemon writes is private (0700 directories, 0600 files)."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, wait_for  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402
from ddtreed.demo.install import install_engine  # noqa: E402
from ddtreed.paths import shipped  # noqa: E402
from ddtreed.host import LocalHost  # noqa: E402
from ddtreed.remediation import Engine, load_remediations  # noqa: E402
from ddtreed.rules import load_rules  # noqa: E402
from ddtreed.status import status_path  # noqa: E402

PATCH = "ddtree-verify-graph-width"
MISSING_CHECK = ("{loader} loads {what} without checking {check}; a file anyone can edit decides what "
                 "the daemon patches or runs. Fix in {path} (see docs/performance.md, 'Security').")


def _copy(shipped_kind: str, destination: Path, name: str) -> Path:
    destination.mkdir(parents=True, exist_ok=True)
    target = destination / name
    shutil.copyfile(Path(shipped(shipped_kind)) / name, target)
    os.chmod(target, 0o644)
    return target


def test_a_world_writable_rule_file_is_refused(tmp_path):
    rules = _copy("rules", tmp_path / "rules", "cuda-graph.toml")
    assert load_rules([tmp_path / "rules"]).rules  # readable as shipped
    os.chmod(rules, 0o666)
    with pytest.raises(ValueError, match=r"cuda-graph\.toml:1: file: world-writable"):
        load_rules([tmp_path / "rules"])


@pytest.mark.xfail(strict=True, reason=MISSING_CHECK.format(
    loader="rules.loader.rule_files", what="a *.toml symlink pointing outside the configured rules_dirs",
    check="where it resolves to", path="ddtreed/rules/loader.py (_read)"))
def test_a_rule_file_linked_from_outside_the_rules_dir_is_refused(tmp_path):
    outside = _copy("rules", tmp_path / "elsewhere", "cuda-graph.toml")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "cuda-graph.toml").symlink_to(outside)
    with pytest.raises(ValueError, match="outside"):
        load_rules([tmp_path / "rules"])


@pytest.mark.xfail(strict=True, reason=MISSING_CHECK.format(
    loader="remediation.catalog.load_remediations", what="a world-writable remediation file",
    check="its mode", path="ddtreed/remediation/catalog.py (_load_file)"))
def test_a_world_writable_remediation_file_is_refused(tmp_path):
    remediation = _copy("remediations", tmp_path / "remediations", f"{PATCH}.toml")
    assert PATCH in load_remediations([tmp_path / "remediations"])
    os.chmod(remediation, 0o666)
    with pytest.raises(ValueError, match="world-writable"):
        load_remediations([tmp_path / "remediations"])


@pytest.mark.xfail(strict=True, reason=MISSING_CHECK.format(
    loader="remediation.catalog.load_remediations",
    what="a *.toml symlink pointing outside the configured remediations_dirs",
    check="where it resolves to", path="ddtreed/remediation/catalog.py (load_remediations)"))
def test_a_remediation_file_linked_from_outside_its_dir_is_refused(tmp_path):
    outside = _copy("remediations", tmp_path / "elsewhere", f"{PATCH}.toml")
    (tmp_path / "remediations").mkdir()
    (tmp_path / "remediations" / f"{PATCH}.toml").symlink_to(outside)
    with pytest.raises(ValueError, match="outside"):
        load_remediations([tmp_path / "remediations"])


def _escaping_remediation(directory: Path, target: str) -> Path:
    """The shipped demo layout, aimed at another target path."""
    text = (Path(shipped("remediations")) / f"{PATCH}.toml").read_text()
    text = text.replace('target = "ddtreed_demo_engine/cuda_graph_runner.py"', f'target = "{target}"')
    assert f'target = "{target}"' in text
    directory.mkdir()
    (directory / f"{PATCH}.toml").write_text(text)
    return directory


def test_a_patch_target_with_dotdot_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"\.toml:\d+: layouts\[\d+\]\.target: .*without '\.\.'"):
        load_remediations([_escaping_remediation(tmp_path / "r", "ddtreed_demo_engine/../evil.py")])


def test_a_patch_target_symlinked_out_of_the_package_is_refused(tmp_path):
    site = tmp_path / "site-packages"
    package = install_engine(site)
    outside = tmp_path / "outside.py"
    outside.write_bytes((package / "cuda_graph_runner.py").read_bytes())
    before = outside.read_bytes()
    (package / "cuda_graph_runner.py").unlink()
    (package / "cuda_graph_runner.py").symlink_to(outside)
    engine = Engine(LocalHost(), str(tmp_path / "state"), load_remediations([shipped("remediations")]))
    plan = engine.plan(PATCH, site_packages=str(site))
    assert not plan.applicable
    assert "outside the package" in plan.reason
    assert outside.read_bytes() == before


@pytest.mark.slow
def test_the_daemon_keeps_its_state_private(tmp_path):
    """A real run under umask 022: everything under the state dir is 0700 / 0600."""
    previous = os.umask(0o022)
    try:
        config = fast_service.write_config(tmp_path / "run", port=free_port())
        daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
        try:
            wait_for(lambda: daemon.has("incident_resolved"), 60, what="the patch to be applied and verified")
        finally:
            assert daemon.stop() == 0
    finally:
        os.umask(previous)
    state = tmp_path / "run" / "state"

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.lstat().st_mode)

    # The state dir closes everything below it to others; the files that matter are tight too.
    assert mode(state) == 0o700
    assert mode(state / "remediation") == 0o700
    databases = sorted(state.glob("incidents.sqlite3*"))
    assert databases and all(mode(path) == 0o600 for path in databases), [(p.name, oct(mode(p))) for p in databases]
    backups = [path for path in (state / "remediation").rglob("*") if path.is_file() and "backups" in path.parts]
    assert backups and all(mode(path) == 0o600 for path in backups)
    assert mode(status_path(state)) == 0o600
