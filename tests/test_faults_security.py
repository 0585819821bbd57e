"""Issue 7.6: rule and remediation files an attacker could edit are refused, patch targets cannot
leave the package, and the state the daemon writes is private (0700 directories, 0600 files)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, wait_for  # noqa: E402

from ddtreed.cli import main  # noqa: E402
from ddtreed.demo import free_port  # noqa: E402
from ddtreed.demo.engine_install import install_engine  # noqa: E402
from ddtreed.paths import shipped  # noqa: E402
from ddtreed.service.host import LocalHost  # noqa: E402
from ddtreed.remediation import Engine, load_remediations  # noqa: E402
from ddtreed.rules import load_rules  # noqa: E402
from ddtreed.ops.status import status_path  # noqa: E402

PATCH = "ddtree-verify-graph-width"


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
    with pytest.raises(ValueError, match=r"cuda-graph\.toml:0: file: refused: world-writable \(mode 0666\); "
                                         r"fix with chmod o-w "):
        load_rules([tmp_path / "rules"])


def test_a_rule_file_linked_from_outside_the_rules_dir_is_refused(tmp_path):
    outside = _copy("rules", tmp_path / "elsewhere", "cuda-graph.toml")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "cuda-graph.toml").symlink_to(outside)
    with pytest.raises(ValueError) as caught:
        load_rules([tmp_path / "rules"])
    assert str(caught.value) == (f"{tmp_path / 'rules' / 'cuda-graph.toml'}:0: file: refused: a symlink to "
                                 f"{outside.resolve()}, outside the configured directories")


def test_a_world_writable_remediation_file_is_refused(tmp_path):
    remediation = _copy("remediations", tmp_path / "remediations", f"{PATCH}.toml")
    assert PATCH in load_remediations([tmp_path / "remediations"])
    os.chmod(remediation, 0o666)
    with pytest.raises(ValueError) as caught:
        load_remediations([tmp_path / "remediations"])
    assert str(caught.value) == (f"{remediation}:0: file: refused: world-writable (mode 0666); "
                                 f"fix with chmod o-w {remediation}")


def test_a_remediation_file_linked_from_outside_its_dir_is_refused(tmp_path):
    outside = _copy("remediations", tmp_path / "elsewhere", f"{PATCH}.toml")
    (tmp_path / "remediations").mkdir()
    (tmp_path / "remediations" / f"{PATCH}.toml").symlink_to(outside)
    with pytest.raises(ValueError, match=rf"{PATCH}\.toml:0: file: refused: a symlink to .*elsewhere.*, "
                                         "outside the configured directories"):
        load_remediations([tmp_path / "remediations"])


def test_links_that_stay_inside_the_configured_directories_load(tmp_path):
    """A link is judged by where it resolves: inside the configured directories it is fine."""
    rules = _copy("rules", tmp_path / "rules" / "versions", "cuda-graph.toml")
    (tmp_path / "rules" / "cuda-graph.toml").symlink_to(rules)
    assert load_rules([tmp_path / "rules"]).rules
    _copy("remediations", tmp_path / "a", f"{PATCH}.toml")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "other.toml").symlink_to(tmp_path / "a" / f"{PATCH}.toml")
    with pytest.raises(ValueError, match="duplicate"):  # loaded twice, both inside: not refused
        load_remediations([tmp_path / "a", tmp_path / "b"])
    (tmp_path / "linked").symlink_to(tmp_path / "a", target_is_directory=True)
    assert PATCH in load_remediations([tmp_path / "linked"])  # a configured dir may itself be a link


@pytest.mark.parametrize("kind", ["rules", "remediations"])
def test_a_world_writable_configured_directory_is_refused(tmp_path, kind):
    """Anyone could drop a file into it, so nothing in it is loaded."""
    name = "cuda-graph.toml" if kind == "rules" else f"{PATCH}.toml"
    directory = _copy(kind, tmp_path / kind, name).parent
    os.chmod(directory, 0o777)
    load = load_rules if kind == "rules" else load_remediations
    with pytest.raises(ValueError) as caught:
        load([directory])
    assert str(caught.value) == (f"{directory}:0: directory: refused: world-writable (mode 0777); "
                                 f"fix with chmod o-w {directory}")
    os.chmod(directory, 0o1777)  # sticky (like /tmp) still lets anyone add files
    with pytest.raises(ValueError, match="refused: world-writable"):
        load([directory])


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("kind", ["rules", "remediations"])
def test_a_group_writable_file_of_another_user_is_refused(tmp_path, kind):
    name = "cuda-graph.toml" if kind == "rules" else f"{PATCH}.toml"
    path = _copy(kind, tmp_path / kind, name)
    load = load_rules if kind == "rules" else load_remediations
    os.chmod(path, 0o664)
    assert load([path.parent])  # group-writable but ours: that group is the owner's choice
    os.chown(path, 65534, -1)
    with pytest.raises(ValueError) as caught:
        load([path.parent])
    assert str(caught.value).startswith(f"{path}:0: file: refused: group-writable (mode 0664) and owned by "
                                        f"uid 65534, not ddtreed's uid 0; fix with chmod g-w ")
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="refused: owned by uid 65534"):  # its owner could edit it
        load([path.parent])
    os.chown(path, 0, -1)
    assert load([path.parent])  # root's, without group write: readable, as /usr files are


def test_a_fifo_is_refused_not_read(tmp_path):
    """Reading a FIFO would block the loader (the daemon's reload) forever."""
    (tmp_path / "rules").mkdir()
    os.mkfifo(tmp_path / "rules" / "x.toml")
    with pytest.raises(ValueError, match=r"x\.toml:0: file: refused: not a regular file"):
        load_rules([tmp_path / "rules"])
    (tmp_path / "remediations").mkdir()
    os.mkfifo(tmp_path / "remediations" / "x.toml")
    with pytest.raises(ValueError, match=r"x\.toml:0: file: refused: not a regular file"):
        load_remediations([tmp_path / "remediations"])


def test_rules_check_names_each_refused_file_and_exits_1(tmp_path, capsys):
    rules = _copy("rules", tmp_path / "rules", "cuda-graph.toml")
    os.chmod(rules, 0o666)
    evil = _copy("rules", tmp_path / "elsewhere", "memory.toml")
    (tmp_path / "rules" / "memory.toml").symlink_to(evil)
    assert main(["rules", "check", "--rules-dir", str(tmp_path / "rules")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{rules}:0: file: refused: world-writable (mode 0666); fix with chmod o-w {rules}",
                   f"{tmp_path / 'rules' / 'memory.toml'}:0: file: refused: a symlink to {evil.resolve()}, "
                   "outside the configured directories"]
    os.chmod(tmp_path / "rules", 0o777)
    assert main(["rules", "check", "--rules-dir", str(tmp_path / "rules"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["problems"] == [f"{tmp_path / 'rules'}:0: directory: refused: world-writable (mode 0777); "
                                  f"fix with chmod o-w {tmp_path / 'rules'}"]


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
    assert backups and (state / "remediation" / "lock").exists()
    below = {str(path.relative_to(state)): oct(mode(path)) for path in (state / "remediation").rglob("*")}
    assert below == {name: oct(0o700 if (state / name).is_dir() else 0o600) for name in below}
    assert mode(status_path(state)) == 0o600


@pytest.mark.slow
def test_sighup_with_a_refused_file_keeps_the_old_set(tmp_path):
    """A planted link or a world-writable file makes the reload fail, naming it; the running set
    stays; once fixed, the next SIGHUP loads."""
    rules = tmp_path / "rules"
    remediations = tmp_path / "remediations"
    shutil.copytree(shipped("rules"), rules)
    shutil.copytree(shipped("remediations"), remediations)
    config = fast_service.write_config(tmp_path / "run", port=free_port(), paths={
        "rules_dirs": [str(rules)], "remediations_dirs": [str(remediations)]})
    daemon = DaemonProcess(config, tmp_path / "daemon.jsonl")
    try:
        wait_for(lambda: daemon.has("incident_resolved"), 60, what="the patch to be applied and verified")
        evil = _copy("rules", tmp_path / "elsewhere", "memory.toml")
        (rules / "zz-planted.toml").symlink_to(evil)
        os.chmod(remediations / f"{PATCH}.toml", 0o666)
        for fix, refused in (((rules / "zz-planted.toml").unlink, rules / "zz-planted.toml"),
                             (lambda: os.chmod(remediations / f"{PATCH}.toml", 0o644), remediations / f"{PATCH}.toml")):
            before = len(daemon.events("reload_rejected"))
            os.kill(daemon.pid, signal.SIGHUP)
            wait_for(lambda: len(daemon.events("reload_rejected")) > before, 20, what="the reload to be rejected")
            assert f"{refused}:0: file: refused: " in daemon.events("reload_rejected")[-1]["error"]
            assert daemon.process.poll() is None and not daemon.has("reloaded")
            fix()
        os.kill(daemon.pid, signal.SIGHUP)
        wait_for(lambda: daemon.has("reloaded"), 20, what="the fixed files to load")
        reloaded = daemon.events("reloaded")[0]
        assert reloaded["remediations"] == len(list(Path(shipped("remediations")).glob("*.toml")))
    finally:
        assert daemon.stop() == 0
