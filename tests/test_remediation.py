"""Remediation catalog validation, version-aware flag plans, env plans, the ladder, patch safety
and the `ddtreed remediate` CLI (real files, real subprocesses)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.service.host import LocalHost
from ddtreed.incidents import DATABASE_NAME
from ddtreed.paths import shipped
from ddtreed.records import ServiceContext
from ddtreed.remediation import ApplyError, Engine, RemediationError, load_remediations
from ddtreed.remediation import flags
from ladder_helpers import Ladder
from test_remediation_crash import DEMO_SOURCE, make_demo_site

REPO = Path(__file__).resolve().parent.parent
FOUNDING = ("python", "-m", "sglang.launch_server", "--model-path", "/models/target", "--tp", "8",
            "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/models/draft",
            "--speculative-num-draft-tokens", "8", "--speculative-ddtree-budget", "32",
            "--speculative-ddtree-topk-cap", "4", "--port", "30000")


@pytest.fixture(scope="module")
def catalog():
    return load_remediations([shipped("remediations")])


@pytest.fixture()
def engine(tmp_path, catalog):
    return Engine(LocalHost(), str(tmp_path / "state"), catalog)


def context(argv=FOUNDING, version="0.5.15"):
    return ServiceContext(argv=tuple(argv), sglang_version=version)


# ---- catalog ---------------------------------------------------------------------------------
def test_shipped_catalog_has_the_ids_rules_reference(catalog):
    documented = (REPO / "docs" / "remediations.md").read_text()
    for remediation in catalog:
        assert f"`{remediation.id}`" in documented, remediation.id
    for needed in ("ddtree-verify-graph-width", "disable-cuda-graph", "lower-cuda-graph-max-bs",
                   "lower-mem-fraction-static", "lower-ddtree-budget", "ddtree-to-dflash",
                   "disable-speculative-decoding", "set-cuda-launch-blocking"):
        assert needed in catalog


@pytest.mark.parametrize("text, expected", [
    ('id = "x"\nkind = "patch"\ntitle = "t"\n', ":2: layouts: required for kind 'patch'"),
    ('id = "x"\nkind = "magic"\ntitle = "t"\n', ":2: kind: must be one of patch, args, env"),
    ('id = "x"\nkind = "env"\ntitle = "t"\ncolour = 1\n[env]\nset = {A = "1"}\n', ":4: colour: unknown key"),
    ('id = "x"\nkind = "args"\ntitle = "t"\n[[operations]]\naction = "scale"\nflag = "nope"\nfactor = 0.5\n',
     ":6: operations[0].flag: unknown flag 'nope'"),
    ('id = "x"\nkind = "patch"\ntitle = "t"\n[[layouts]]\nname = "a"\ndistribution = "sglang"\n'
     'target = "sglang/a.py"\nversions = "*"\nmarker = "M"\ninsert_after = "M\\n"\n',
     "layouts[0].anchor: required"),
    ('id = "x"\nkind = "patch"\ntitle = "t"\n[[layouts]]\nname = "a"\ndistribution = "sglang"\n'
     'target = "sglang/../../etc/passwd"\nversions = "*"\nmarker = "M"\nanchor = "a"\ninsert_after = "M"\n',
     ":7: layouts[0].target: must be a relative path"),
    ('id = "x"\nkind = "patch"\ntitle = "t"\n[[layouts]]\nname = "a"\ndistribution = "sglang"\n'
     'target = "sglang/a.py"\nversions = "*"\nmarker = "M"\nanchor = "a"\ninsert_after = "no marker"\n',
     ":11: layouts[0].insert_after: must contain the marker"),
])
def test_bad_remediation_files_name_file_line_and_field(tmp_path, text, expected):
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(RemediationError) as caught:
        load_remediations([tmp_path])
    assert str(caught.value).startswith(str(tmp_path / "bad.toml"))
    assert expected in str(caught.value)


# ---- args and env ----------------------------------------------------------------------------
@pytest.mark.parametrize("version, expected", [
    ("0.5.13", ["--cuda-graph-max-bs", "32"]),
    ("0.5.19", ["--cuda-graph-max-bs", "32"]),
    ("0.5.20", ["--cuda-graph-max-bs-decode", "32"]),
    ("0.5.23", ["--cuda-graph-max-bs-decode", "32"]),
])
def test_cuda_graph_max_bs_flag_follows_the_version(engine, version, expected):
    plan = engine.plan("lower-cuda-graph-max-bs", context(version=version))
    assert plan.applicable, plan.reason
    assert plan.launch.argv[-2:] == tuple(expected)
    assert not flags.rejected(plan.launch.argv, version)


def test_old_spelling_is_rewritten_for_a_version_that_dropped_it(engine):
    plan = engine.plan("lower-cuda-graph-max-bs", context(FOUNDING + ("--cuda-graph-max-bs", "160"), "0.5.23"))
    assert plan.applicable
    assert "--cuda-graph-max-bs" not in plan.launch.argv
    assert plan.launch.argv[-2:] == ("--cuda-graph-max-bs-decode", "80")


def test_unknown_version_with_two_spellings_is_not_guessed(engine):
    plan = engine.plan("lower-cuda-graph-max-bs", context(version=None))
    assert not plan.applicable and "version unknown" in plan.reason
    kept = engine.plan("lower-cuda-graph-max-bs", context(FOUNDING + ("--cuda-graph-max-bs", "64"), None))
    assert kept.applicable and kept.launch.argv[-2:] == ("--cuda-graph-max-bs", "32")


def test_mem_fraction_steps_down_to_a_floor(engine):
    plan = engine.plan("lower-mem-fraction-static", context(FOUNDING + ("--mem-fraction-static=0.8",)))
    assert plan.launch.argv[-2:] == ("--mem-fraction-static", "0.75")
    floor = engine.plan("lower-mem-fraction-static", context(FOUNDING + ("--mem-fraction-static", "0.5")))
    assert not floor.applicable and "floor" in floor.reason


def test_ddtree_ladder_steps_down_and_undoes(engine):
    ladder = Ladder(engine, ("lower-ddtree-budget", "ddtree-to-dflash", "lower-ddtree-budget",
                             "disable-speculative-decoding"), context())
    plan, _ = ladder.step()
    assert ("--speculative-ddtree-budget", "16") == plan.launch.argv[plan.launch.argv.index(
        "--speculative-ddtree-budget"):][:2]
    plan, _ = ladder.step()
    assert "DFLASH" in plan.launch.argv and not any("ddtree" in t for t in plan.launch.argv)
    plan, _ = ladder.step()  # budget step no longer applies under DFLASH: skipped
    assert ladder.skipped[0][0] == "lower-ddtree-budget"
    assert not any(t.startswith("--speculative-") for t in plan.launch.argv)
    assert "--port" in plan.launch.argv and "--tp" in plan.launch.argv
    assert ladder.step() is None
    previous = ladder.undo()
    assert "DFLASH" in previous.argv and ladder.argv == tuple(previous.argv)
    assert [a.remediation_id for a in engine.status()] == ["lower-ddtree-budget", "ddtree-to-dflash"]


def test_env_remediation_and_its_inverse(engine):
    plan = engine.plan("set-cuda-launch-blocking", context(), env={"HF_HOME": "/hf"})
    assert plan.launch.env == {"HF_HOME": "/hf", "CUDA_LAUNCH_BLOCKING": "1"}
    assert "+CUDA_LAUNCH_BLOCKING=1" in plan.diff
    application = engine.apply(plan, incident_id=7)
    assert engine.revert(application.application_id).env == {"HF_HOME": "/hf"}
    again = engine.plan("set-cuda-launch-blocking", context(), env=plan.launch.env)
    assert not again.applicable


# ---- patch safety ----------------------------------------------------------------------------
def test_symlink_escaping_the_package_is_refused(engine, tmp_path):
    site = make_demo_site(tmp_path)
    outside = tmp_path / "outside.py"
    outside.write_bytes(DEMO_SOURCE)
    target = site / "ddtreed_demo_engine" / "cuda_graph_runner.py"
    target.unlink()
    target.symlink_to(outside)
    plan = engine.plan("ddtree-verify-graph-width", site_packages=str(site))
    assert not plan.applicable and "outside the package" in plan.reason
    assert outside.read_bytes() == DEMO_SOURCE


def test_revert_refuses_a_file_changed_since_unless_forced(engine, tmp_path):
    site = make_demo_site(tmp_path)
    application = engine.apply(engine.plan("ddtree-verify-graph-width", site_packages=str(site)))
    target = site / "ddtreed_demo_engine" / "cuda_graph_runner.py"
    target.write_bytes(target.read_bytes() + b"# edited\n")
    with pytest.raises(ApplyError, match="changed since ddtreed patched it"):
        engine.revert(application.application_id)
    engine.revert(application.application_id, force=True)
    assert target.read_bytes() == DEMO_SOURCE


def test_demo_patch_makes_the_width_budget_plus_one(engine, tmp_path):
    site = make_demo_site(tmp_path)
    engine.apply(engine.plan("ddtree-verify-graph-width", site_packages=str(site)))
    names: dict = {}
    exec((site / "ddtreed_demo_engine" / "cuda_graph_runner.py").read_text(), names)
    args = type("Args", (), dict(speculative_algorithm="DDTREE", speculative_num_draft_tokens=8,
                                 speculative_ddtree_budget=32))
    assert names["target_verify_width"](args) == 33
    assert names["target_verify_width"](args, is_draft_worker=True) == 8
    args.speculative_algorithm = "DFLASH"
    assert names["target_verify_width"](args) == 8


def _modes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in root.rglob("*")}


def test_remediation_state_is_private_under_umask_022(engine, tmp_path):
    """Backups hold the patched package's bytes and the lock decides who writes: others see nothing."""
    site = make_demo_site(tmp_path)
    root = tmp_path / "state" / "remediation"
    previous = os.umask(0o022)
    try:
        engine.apply(engine.plan("ddtree-verify-graph-width", site_packages=str(site)))
    finally:
        os.umask(previous)
    modes = _modes(root)
    assert {"lock", "backups"} <= set(modes)  # the applications: rows of the 0600 incident database
    assert modes == {name: oct(0o700 if (root / name).is_dir() else 0o600) for name in modes}
    assert stat.S_IMODE((tmp_path / "state" / DATABASE_NAME).stat().st_mode) == 0o600


def test_remediation_state_an_older_ddtreed_left_open_is_tightened(engine, tmp_path):
    site = make_demo_site(tmp_path)
    root = tmp_path / "state" / "remediation"
    (root / "backups").mkdir(parents=True)
    (root / "lock").touch()
    for path, mode in ((root, 0o755), (root / "backups", 0o755), (root / "lock", 0o644)):
        os.chmod(path, mode)
    engine.apply(engine.plan("ddtree-verify-graph-width", site_packages=str(site)))
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    modes = _modes(root)
    assert modes == {name: oct(0o700 if (root / name).is_dir() else 0o600) for name in modes}


# ---- CLI -------------------------------------------------------------------------------------
def ddtreed(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "ddtreed", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_apply_status_revert_round_trip(tmp_path):
    site = make_demo_site(tmp_path)
    state = str(tmp_path / "state")
    listing = ddtreed("remediate", "list", "--json")
    assert listing.returncode == 0
    assert "ddtree-verify-graph-width" in {row["id"] for row in json.loads(listing.stdout)}
    applied = ddtreed("remediate", "apply", "ddtree-verify-graph-width", "--site-packages", str(site),
                      "--state-dir", state)
    assert applied.returncode == 0, applied.stderr
    status = ddtreed("remediate", "status", "--json", "--state-dir", state)
    entries = json.loads(status.stdout.splitlines()[-1])
    assert entries[0]["files"][0]["current_sha256"] == entries[0]["files"][0]["after_sha256"]
    reverted = ddtreed("remediate", "revert", entries[0]["application_id"], "--state-dir", state)
    assert reverted.returncode == 0, reverted.stderr
    assert (site / "ddtreed_demo_engine" / "cuda_graph_runner.py").read_bytes() == DEMO_SOURCE
    missing = ddtreed("remediate", "revert", "nope", "--state-dir", state)
    assert missing.returncode == 1 and missing.stderr.startswith("ddtreed: error: no application 'nope'")


def test_cli_args_dry_run_from_config(tmp_path):
    config = tmp_path / "ddtreed.toml"
    config.write_text("[service]\nargv = " + json.dumps(list(FOUNDING)) + "\n"
                      f"[paths]\nstate_dir = \"{tmp_path / 'state'}\"\nlog_dir = \"{tmp_path / 'logs'}\"\n")
    done = ddtreed("remediate", "apply", "ddtree-to-dflash", "--config", str(config), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "---speculative-algorithm DDTREE" in done.stdout and "+--speculative-algorithm DFLASH" in done.stdout
    assert "---speculative-ddtree-budget 32" in done.stdout
    bad = ddtreed("remediate", "apply", "no-such-fix", "--config", str(config))
    assert bad.returncode == 1 and "unknown remediation 'no-such-fix'" in bad.stderr
