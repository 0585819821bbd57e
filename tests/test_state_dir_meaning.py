"""Issue 17.5: one meaning of --state-dir (the directory holding incidents.sqlite3) everywhere.

`ddtreed demo --state-dir X` put the database in X/state, so `ddtreed incidents --state-dir X`
afterwards said "no incidents recorded yet". Real demo, real subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ddtreed(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_the_demos_incident_is_where_incidents_looks(tmp_path):
    state = tmp_path / "X"
    demo = ddtreed("demo", "--state-dir", str(state), "--json", timeout=400)
    assert demo.returncode == 0, demo.stderr[-3000:]
    report = json.loads(demo.stdout)
    assert report["state_dir"] == str(state.resolve())
    assert (state / "incidents.sqlite3").exists()
    listed = ddtreed("incidents", "--state-dir", str(state), "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["status"] for row in json.loads(listed.stdout)] == ["resolved"]
    status = ddtreed("status", "--state-dir", str(state), "--json")
    assert json.loads(status.stdout)["incidents"]["incidents_total"] == 1


@pytest.mark.parametrize("command", [["incidents"], ["incidents", "--json"], ["incidents", "show", "1"]])
def test_a_missing_state_dir_is_one_line_and_exit_2(tmp_path, command):
    missing = tmp_path / "nonexistent"
    done = ddtreed(*command, "--state-dir", str(missing))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (f"ddtreed: error: {missing}: no such directory (the state directory is the one "
                           f"that holds incidents.sqlite3: the config's paths.state_dir)\n")
    assert not missing.exists()


def test_status_of_a_missing_state_dir_is_not_running_and_says_so(tmp_path):
    """`status` keeps LSB's meaning (3: not running); fleet status asks hosts where nothing ran yet."""
    missing = tmp_path / "nonexistent"
    done = ddtreed("status", "--state-dir", str(missing))
    assert done.returncode == 3
    assert done.stdout.startswith(f"ddtreed: not running: no daemon has written state in {missing} "
                                  "(no such directory)")
