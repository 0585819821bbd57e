"""Issue 19.4: `ddtreed --help` and `ddtreed status` start fast because of what they import.

Asserted on imports (what a fresh `python -m ddtreed ...` process has in sys.modules when it is
done), never on timings; the time is benchmarks/cli_start.py's. Every help text stays what the
full parser (every command module imported) prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.cli import ALL, COMMANDS, build_parser, main
from ddtreed.cli.help_text import _subcommands, _summaries
from ddtreed.cli.status_read import incident_counts, pid_exists, process_started_at
from ddtreed.incidents import Store, database_path
from ddtreed.records import Application, Crash, RuleMatch
from ddtreed.signature import signature_of
from ddtreed.ops.status import DaemonStatus, write_status

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("sqlite_utils", "structlog", "psutil", "torch", "prometheus_client", "paramiko", "watchdog")

# Runs ddtreed exactly as `python -m ddtreed ARGS` does, then writes the modules it imported.
PROBE = """
import json, runpy, sys
out, sys.argv = sys.argv[1], ["ddtreed", *sys.argv[2:]]
code = 0
try:
    runpy.run_module("ddtreed", run_name="__main__")
except SystemExit as stop:
    code = stop.code
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def imported(tmp_path: Path, *args: str) -> tuple[int, set[str], str]:
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.exists(), done.stderr
    found = json.loads(out.read_text())
    return found["code"], set(found["modules"]), done.stdout


def heavy(modules: set[str]) -> list[str]:
    return sorted(name for name in modules if name.split(".")[0] in HEAVY)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A state dir as a running daemon leaves it: its snapshot (our pid: alive) and incidents."""
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    crash = Crash(kind="traceback", exception="RuntimeError", message="The size of tensor a (8) must match",
                  rank="TP0", detected_at=1.0)
    match = RuleMatch(rule_id="r", category="cuda-graph-shape-mismatch", title="", diagnosis="",
                      remediations=())
    with Store(database_path(directory)) as store:
        for status in ("open", "escalated", "resolved", "resolved"):
            incident = store.open_incident("crash", (crash,), signature_of(crash), match, None)
            if status != "open":
                store.finish(incident, status, "restarted; healthy")
        store.record_application(3, Application(application_id="a1", remediation_id="x", kind="patch",
                                                target="t", summary="s"), status="verified")
        store.freeze(signature_of(crash).fingerprint, "crash loop")
    write_status(directory, DaemonStatus(pid=os.getpid(), state="running", status_text="serving"))
    return directory


def test_help_imports_no_command_module_and_nothing_heavy(tmp_path):
    code, modules, out = imported(tmp_path, "--help")
    assert code == 0 and "status" in out and "examples:" in out
    assert heavy(modules) == []
    assert sorted(m for m in modules if m.startswith("ddtreed.")) == [
        "ddtreed.cli", "ddtreed.cli.common", "ddtreed.cli.help_text"]


@pytest.mark.parametrize("args", [[], ["--json"]], ids=["text", "json"])
def test_status_imports_neither_the_store_nor_structlog_nor_psutil(tmp_path, state, args):
    code, modules, out = imported(tmp_path, "status", "--state-dir", str(state), *args)
    assert code == 0, out  # running: our pid wrote the snapshot
    assert heavy(modules) == []
    assert not [m for m in modules if m.startswith(("ddtreed.incidents", "ddtreed.loop.daemon", "ddtreed.ops.logsetup"))]
    assert [m for m in modules if m.startswith("ddtreed.cli.") and m.endswith("_cmd")] == ["ddtreed.cli.service_cmd"]
    if args:
        report = json.loads(out)
        assert report["alive"] is True and report["incidents"]["incidents_total"] == 4
    else:
        assert "incidents    4 total: 1 open, 1 escalated, 2 resolved" in out


def test_a_command_imports_only_its_own_module(tmp_path, state):
    code, modules, _out = imported(tmp_path, "incidents", "--state-dir", str(state))
    assert code == 0
    assert [m for m in modules if m.startswith("ddtreed.cli.") and m.endswith("_cmd")] == \
        ["ddtreed.cli.incidents_cmd"]


def test_the_lazy_parser_prints_what_the_full_one_prints():
    full = build_parser(ALL)
    assert [name for name, _module, _help in COMMANDS] == list(_subcommands(full))
    assert {name: summary for name, _module, summary in COMMANDS} == _summaries(full)
    assert build_parser(None).format_help() == full.format_help()
    for name in _subcommands(full):
        lazy = _subcommands(build_parser(name))
        assert lazy[name].format_help() == _subcommands(full)[name].format_help(), name
        for child, page in _subcommands(_subcommands(full)[name]).items():
            assert _subcommands(lazy[name])[child].format_help() == page.format_help(), (name, child)


def test_an_unknown_command_is_still_refused_with_the_list(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["bogus"])
    assert stop.value.code == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_status_counts_are_the_stores_counts(state):
    with Store(database_path(state)) as store:
        assert incident_counts(database_path(state)) == store.counts()


def test_status_counts_a_database_from_before_the_counts_table(tmp_path, state):
    """A state dir written by an older ddtreed (no incident_counts table): counted from the rows."""
    copy = tmp_path / "old"
    shutil.copytree(state, copy)
    import sqlite3

    with sqlite3.connect(database_path(copy)) as db:
        for (trigger,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            db.execute(f"DROP TRIGGER {trigger}")
        db.execute("DROP TABLE incident_counts")
    with Store(database_path(state)) as store:
        assert incident_counts(database_path(copy)) == store.counts()


def test_status_says_a_garbage_database_is_unreadable(tmp_path, capsys):
    directory = tmp_path / "state"
    directory.mkdir()
    (directory / "incidents.sqlite3").write_bytes(b"this is not sqlite" * 100)
    assert main(["status", "--state-dir", str(directory)]) == 3
    out = capsys.readouterr().out
    assert "incidents    unreadable: " in out and "not a valid ddtreed database" in out


def test_the_process_start_time_is_psutils(tmp_path):
    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process_started_at(child.pid) == pytest.approx(psutil.Process(child.pid).create_time(), abs=0.02)
        assert process_started_at(os.getpid()) == pytest.approx(psutil.Process().create_time(), abs=0.02)
        assert pid_exists(child.pid)
    finally:
        child.kill()
        child.wait()
    assert process_started_at(child.pid) is None and not pid_exists(child.pid)


def _read_only_mount_works() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs unshare -m (root) for a real read-only mount")
def test_status_reads_a_read_only_copy_of_a_state_dir(state, tmp_path):
    """A reviewer's copy from another host, mounted read-only, WAL files and all."""
    copy = tmp_path / "copy"
    with Store(database_path(state)) as store:
        store.open_incident("crash", (), None, None, None)  # in the WAL when the copy is taken
        shutil.copytree(state, copy)
    script = (f"mount --bind {copy} {copy} && mount -o remount,bind,ro {copy} && "
              f"{sys.executable} -m ddtreed status --state-dir {copy} --json")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr  # our pid wrote the snapshot: running
    report = json.loads(done.stdout)
    assert report["incidents_error"] is None
    assert report["incidents"]["incidents_total"] == 5 and report["incidents"]["open_incidents"] == 2
