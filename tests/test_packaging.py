"""The built wheel works however it is installed: a fresh venv, a `--user` site and a `--prefix`.

Each install runs `ddtreed rules list` and `ddtreed diagnose` on the founding log from outside the
checkout, and must find the shipped rules and remediations inside the package. An unrelated
top-level package named `rules` (PyPI has one) must not stand in for them, and loading zero rules
or remediations is a one-line error with exit 2, never "ok: 0 rule(s)".

The dependencies are not downloaded: each install sees the test interpreter's own site-packages
through a `.pth` line placed after the install's own directory (so the wheel's ddtreed wins).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOUNDING = ROOT / "tests" / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log"
BASE_PYTHON = next((str(candidate) for candidate in (
    Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}",
    Path(sys.base_prefix) / "bin" / "python3") if candidate.exists()), None)
DEPENDENCIES = sysconfig.get_paths()["purelib"]  # psutil, paramiko, … of the test interpreter
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(BASE_PYTHON is None, reason="no base interpreter for --user installs")]


def _run(argv: list[str], env: dict | None = None, cwd: Path | None = None, timeout: int = 300):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env, stdin=subprocess.DEVNULL, check=False)


def _pip(*args: str, python: str | None = None, env: dict | None = None):
    target = ["--python", python] if python else []
    done = _run([sys.executable, "-m", "pip", "--disable-pip-version-check", *target, *args],
                env={**os.environ, "PIP_BREAK_SYSTEM_PACKAGES": "1", **(env or {})})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the source (the checkout itself stays untouched)."""
    source = tmp_path_factory.mktemp("source")
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "README.md", source)
    shutil.copytree(ROOT / "ddtreed", source / "ddtreed",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheelhouse")
    done = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out),
                 str(source)])
    if done.returncode != 0:  # an old setuptools here: let pip fetch the declared build backend
        done = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(source)])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [built] = out.glob("ddtreed-*.whl")
    return built


def _see_dependencies(site_packages: Path) -> None:
    site_packages.mkdir(parents=True, exist_ok=True)
    (site_packages / "zz_test_dependencies.pth").write_text(DEPENDENCIES + "\n")


class Install:
    def __init__(self, script: Path, env: dict, site_packages: Path):
        self.script, self.env, self.site_packages = script, env, site_packages

    def ddtreed(self, *args: str, cwd: Path):
        return _run([str(self.script), *args], env=self.env, cwd=cwd)


def _clean_env(**extra: str) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONUSERBASE")}
    return {**env, **extra}


def install_venv(wheel: Path, directory: Path) -> Install:
    venv = directory / "venv"
    done = _run([BASE_PYTHON, "-m", "venv", "--without-pip", str(venv)])
    assert done.returncode == 0, done.stderr
    _pip("install", "--no-deps", str(wheel), python=str(venv / "bin" / "python"))
    site_packages = venv / "lib" / PY / "site-packages"
    _see_dependencies(site_packages)
    return Install(venv / "bin" / "ddtreed", _clean_env(), site_packages)


def install_user(wheel: Path, directory: Path) -> Install:
    home, base = directory / "home", directory / "userbase"
    home.mkdir()
    env = {"HOME": str(home), "PYTHONUSERBASE": str(base)}
    _pip("install", "--user", "--no-deps", str(wheel), python=BASE_PYTHON, env=env)
    site_packages = base / "lib" / PY / "site-packages"
    _see_dependencies(site_packages)
    return Install(base / "bin" / "ddtreed", _clean_env(**env), site_packages)


def install_prefix(wheel: Path, directory: Path) -> Install:
    prefix = directory / "prefix"
    _pip("install", "--prefix", str(prefix), "--no-deps", str(wheel), python=BASE_PYTHON)
    site_packages = prefix / "lib" / PY / "site-packages"
    # A prefix install is found through PYTHONPATH, as it would be for /opt/ddtreed.
    return Install(prefix / "bin" / "ddtreed",
                   _clean_env(PYTHONPATH=f"{site_packages}{os.pathsep}{DEPENDENCIES}"), site_packages)


@pytest.mark.parametrize("install", [install_venv, install_user, install_prefix], ids=["venv", "user", "prefix"])
def test_the_installed_wheel_finds_its_rules_and_diagnoses_the_founding_crash(wheel, tmp_path, install):
    installed = install(wheel, tmp_path)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    where = _run([str(installed.script.parent / "python3") if (installed.script.parent / "python3").exists()
                  else BASE_PYTHON, "-c", "import ddtreed; print(ddtreed.__file__)"],
                 env=installed.env, cwd=elsewhere)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.site_packages), where.stdout  # not the checkout

    listed = installed.ddtreed("rules", "list", "--json", cwd=elsewhere)
    assert listed.returncode == 0, listed.stderr
    ids = {rule["id"] for rule in json.loads(listed.stdout)}
    assert "ddtree-verify-graph-width" in ids and len(ids) > 20

    checked = installed.ddtreed("rules", "check", cwd=elsewhere)
    assert checked.returncode == 0 and "remediation ids checked against" in checked.stdout, checked.stderr

    diagnosed = installed.ddtreed("diagnose", str(FOUNDING), "--json", cwd=elsewhere)
    assert diagnosed.returncode == 0, diagnosed.stderr
    [incident] = json.loads(diagnosed.stdout)["incidents"]
    assert incident["category"] == "cuda-graph-shape-mismatch"  # with 0 rules it was `unknown`

    remediations = installed.ddtreed("remediate", "list", cwd=elsewhere)
    assert remediations.returncode == 0 and "ddtree-verify-graph-width" in remediations.stdout, remediations.stderr

    unit = installed.ddtreed("install", "--dry-run", "--config-name", "kimi", cwd=elsewhere)
    assert unit.returncode == 0 and "ddtreed@.service" in unit.stdout, unit.stdout + unit.stderr


def test_an_unrelated_package_named_rules_changes_nothing(wheel, tmp_path):
    """It used to be taken for the shipped rules: 0 rules loaded, "ok", the founding crash `unknown`."""
    installed = install_venv(wheel, tmp_path)
    impostor = installed.site_packages / "rules"
    impostor.mkdir()
    (impostor / "__init__.py").write_text('"""An unrelated package that happens to be called rules."""\n')
    (installed.site_packages / "remediations").mkdir()
    (installed.site_packages / "remediations" / "__init__.py").write_text("")
    listed = installed.ddtreed("rules", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) > 20, listed.stderr
    diagnosed = installed.ddtreed("diagnose", str(FOUNDING), "--json", cwd=tmp_path)
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert json.loads(diagnosed.stdout)["incidents"][0]["category"] == "cuda-graph-shape-mismatch"


def test_zero_rules_or_remediations_is_an_error_not_ok(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv, expected in (
        (["rules", "check", "--rules-dir", str(empty)], f"{empty}: no rules"),
        (["rules", "list", "--rules-dir", str(empty)], f"{empty}: no rules"),
        (["diagnose", "--rules-dir", str(empty), str(FOUNDING)], f"{empty}: no rules"),
        (["remediate", "list", "--remediations-dir", str(empty)], f"{empty}: no remediations"),
    ):
        done = _run([sys.executable, "-m", "ddtreed", *argv], env=env, cwd=tmp_path)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "ok" not in done.stdout
