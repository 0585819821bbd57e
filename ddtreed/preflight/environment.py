"""Checks of the launch's surroundings: the programs it runs, the sglang it imports, the
directories ddtreed writes. A check that cannot decide raises `Skipped` with the reason, so the
report never says "nothing would crash" about something it did not look at."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterable

from ..context import service_interpreter
from .finding import WARNING, WOULD_CRASH, Finding, Skipped


def _is_local(host) -> bool:
    return bool(getattr(host, "local", getattr(host, "name", None) == "localhost"))


def resolve_program(program: str, config, host) -> tuple[str | None, str]:
    """(the path `program` runs as, or None; why not). Bare names go through the service's PATH."""
    env_path = config.service.env.get("PATH", os.environ.get("PATH", os.defpath))
    if os.sep not in program:
        if not _is_local(host):
            done = host.run(["sh", "-c", 'command -v "$1"', "sh", program], timeout=10)
            found = done.stdout.strip()
            return (found, "") if done.returncode == 0 and found else (None, "not found in PATH")
        found = shutil.which(program, path=env_path)
        return (found, "") if found else (None, f"not found in PATH ({env_path})")
    path = program
    if not os.path.isabs(path) and config.service.cwd:
        path = os.path.join(config.service.cwd, path)
    if not _is_local(host):
        done = host.run(["test", "-x", path], timeout=10)
        return (path, "") if done.returncode == 0 else (None, "does not exist or is not executable")
    if not os.path.exists(path):
        return None, "no such file"
    if os.path.isdir(path):
        return None, "is a directory"
    if not os.access(path, os.X_OK):
        return None, "not executable (permission denied)"
    return path, ""


def check_launch_program(inputs) -> Iterable[Finding]:
    """argv[0] must exist and be executable, or the spawn fails before SGLang runs at all."""
    argv = list(inputs.config.service.argv)
    if not argv:
        raise Skipped("service.argv is empty")
    path, why = resolve_program(argv[0], inputs.config, inputs.host)
    if path is not None:
        return []
    return [Finding(
        check="launch-program", severity=WOULD_CRASH, category="unsupported-config",
        what=f"the service cannot be started: service.argv[0] {argv[0]!r}: {why}",
        why=f"ddtreed spawns service.argv[0] = {argv[0]} on {getattr(inputs.host, 'name', 'the host')}",
        advice="fix service.argv[0] in the config (an absolute path to the service's venv is safest)",
        params={"key": "service.argv[0]", "path": argv[0], "reason": why},
    )]


def check_service_python(inputs) -> Iterable[Finding]:
    """service.python (the interpreter probed for sglang) must exist and be executable."""
    config = inputs.config
    python = config.service.python
    if not python:
        return []  # argv[0] is the interpreter, or none is named: launch-program covers it
    path, why = resolve_program(python, config, inputs.host)
    if path is not None:
        return []
    return [Finding(
        check="service-python", severity=WOULD_CRASH, category="unsupported-config",
        what=f"the service's interpreter service.python {python!r}: {why}",
        why="ddtreed probes this interpreter for the installed sglang; the launch uses the same one",
        advice="set service.python to the interpreter of the venv that has sglang installed",
        params={"key": "service.python", "path": python, "reason": why},
    )]


def _runs_sglang(argv: list[str]) -> bool:
    return any(token == "sglang" or token.startswith("sglang.") or os.path.basename(token) == "sglang"
               for token in argv[:4])


def check_sglang_installed(inputs) -> Iterable[Finding]:
    """The service's Python finds sglang (and which version): else it dies on its first import."""
    config, context = inputs.config, inputs.context
    if context.site_packages:
        if context.sglang_version is None:
            return [Finding(
                check="sglang-installed", severity=WARNING, category="unsupported-config",
                what=f"sglang at {context.site_packages} has no readable version",
                why="neither a dist-info METADATA nor sglang/version.py names one",
                advice="version-dependent checks (flags, width layouts) may be wrong",
                params={"site_packages": context.site_packages})]
        return []
    python = service_interpreter(config, inputs.host)
    if python is None:
        raise Skipped("no interpreter known to probe for sglang: service.argv[0] is not python "
                      "and service.python is not set")
    path, why = resolve_program(python, config, inputs.host)
    if path is None:
        raise Skipped(f"the interpreter {python}: {why}")
    severity = WOULD_CRASH if _runs_sglang(list(config.service.argv)) else WARNING
    return [Finding(
        check="sglang-installed", severity=severity, category="unsupported-config",
        what=f"the service's Python ({python}) cannot import sglang",
        why="importlib finds no `sglang` package for that interpreter"
            + (f" with PYTHONPATH={config.service.env['PYTHONPATH']}"
               if config.service.env.get("PYTHONPATH") else "")
            + (": the launch fails with `No module named 'sglang'`" if severity == WOULD_CRASH else ""),
        advice="install sglang into that interpreter's environment, or point service.python / "
               "service.site_packages at the venv that has it",
        params={"python": python},
    )]


def _writable(path: str) -> tuple[bool, str]:
    """Can ddtreed create files in `path` (or create `path` under its nearest existing parent)?

    Tried for real (a temporary entry, removed at once): permission bits say nothing for root,
    and read-only or special file systems (/proc, a read-only bind mount) only show on a write.
    """
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return False, f"{probe} exists and is not a directory"
    try:
        entry = tempfile.mkdtemp(prefix=".ddtreed-preflight-", dir=probe)
    except OSError as error:
        reason = error.strerror or str(error)
        return False, reason if probe == os.path.abspath(path) else f"cannot create it in {probe}: {reason}"
    os.rmdir(entry)
    return True, ""


def check_writable_dirs(inputs) -> Iterable[Finding]:
    """paths.log_dir and paths.state_dir: the service's output and the incident database."""
    config = inputs.config
    wanted = [("paths.state_dir", config.paths.state_dir)]
    if _is_local(inputs.host):
        wanted.insert(0, ("paths.log_dir", config.paths.log_dir))
    findings = []
    for key, path in wanted:
        ok, why = _writable(path)
        if not ok:
            findings.append(Finding(
                check="writable-dirs", severity=WOULD_CRASH, category="unsupported-config",
                what=f"ddtreed cannot write {key} {path}: {why}",
                why=("the service's stdout/stderr go to files there" if key == "paths.log_dir"
                     else "the incident database, backups and the remediation journal live there"),
                advice=f"create {path} writable by the user ddtreed runs as, or change {key}",
                params={"key": key, "path": path, "reason": why}))
    return findings
