"""`ddtreed incidents` and `ddtreed incidents show`: what a user and a script see."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime

import pytest
from test_incidents_support import FOUNDING_MESSAGE, founding_crashes, record_founding

from ddtreed.cli import main
from ddtreed.incidents import Store, database_path


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "state"
    with Store(database_path(directory)) as store:
        record_founding(store, detected_at=1_700_000_000.0)
        escalated = store.open_incident("crash", founding_crashes(2), detected_at=1_700_000_500.0)
        store.add_step(escalated, "escalated", "no remediation left to try", at=1_700_000_501.0)
        store.finish(escalated, "escalated", "no remediation left to try", at=1_700_000_502.0)
        store.open_incident("canary", (), message="output diverged at token 3",
                            detected_at=1_700_000_900.0)
    return directory


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_list_is_the_documented_contract(state, capsys):
    code, out, err = run(capsys, "incidents", "--state-dir", str(state), "--json")
    assert code == 0, err
    incidents = json.loads(out)
    assert [row["id"] for row in incidents] == [3, 2, 1]
    founding = incidents[2]
    for key in ("id", "category", "rule_id", "status", "remediation_id", "started_at", "resolved_at"):
        assert key in founding
    assert founding["category"] == "cuda-graph-shape-mismatch"
    assert founding["status"] == "resolved"
    assert founding["remediation_id"] == "ddtree-verify-graph-width"
    assert founding["started_at"] == "2023-11-14T22:13:20.000Z"
    assert founding["resolved_at"] == "2023-11-14T22:14:30.000Z"
    assert datetime.fromisoformat(founding["started_at"]).utcoffset().total_seconds() == 0
    assert incidents[0]["resolved_at"] is None and incidents[0]["status"] == "open"


def test_status_and_limit_filter_the_list(state, capsys):
    code, out, _ = run(capsys, "incidents", "--state-dir", str(state), "--json", "--status", "escalated")
    assert code == 0 and [row["id"] for row in json.loads(out)] == [2]
    code, out, _ = run(capsys, "incidents", "--state-dir", str(state), "--json", "--limit", "1")
    assert [row["id"] for row in json.loads(out)] == [3]
    code, out, _ = run(capsys, "incidents", "--state-dir", str(state), "--status", "prevented")
    assert code == 0 and out.strip() == f"no prevented incidents in {state}"


def test_table_lists_newest_first_with_durations(state, capsys):
    code, out, _ = run(capsys, "incidents", "--state-dir", str(state))
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["ID", "STARTED", "(UTC)", "CATEGORY", "RULE", "STATUS", "SEEN",
                                "REMEDIATION", "DURATION"]
    assert [line.split()[0] for line in lines[2:]] == ["3", "2", "1"]
    founding = lines[4].split()
    assert founding == ["1", "2023-11-14", "22:13:20Z", "cuda-graph-shape-mismatch",
                        "ddtree-verify-graph-width", "resolved", "1x", "ddtree-verify-graph-width", "1m10s"]
    assert lines[2].split()[-4:] == ["open", "1x", "-", "-"]
    assert "\x1b[" not in out  # no colour when stdout is not a terminal


def test_show_tells_the_whole_story(state, capsys):
    code, out, err = run(capsys, "incidents", "show", "1", "--state-dir", str(state))
    assert code == 0, err
    assert out.startswith("incident 1: resolved  cuda-graph-shape-mismatch  (rule ddtree-verify-graph-width)")
    assert "budget + 1 = 33 tokens per request" in out  # the diagnosis
    assert "params: a=8, b=33, n0=8, n1=33, n2=0" in out
    assert f"[TP0, TP1, TP2, TP3, TP4, TP5, TP6, TP7] traceback: RuntimeError: {FOUNDING_MESSAGE}" in out
    assert "cuda_graph_runner.py:512 in replay_prepare" in out
    steps = [line.split() for line in out.splitlines() if line.startswith("  ") and "s  20" in line]
    assert [(step[0], step[3]) for step in steps] == [
        ("+0.000s", "detected"), ("+0.250s", "diagnosed"), ("+1.000s", "applied"),
        ("+2.000s", "restarting"), ("+3.000s", "restarted"), ("+62.000s", "healthy")]
    assert "  ddtree-verify-graph-width (patch): applied, verified (kept)" in out
    assert "    id:         app-1" in out
    assert "sha256 aaaaaaaaaaaa → bbbbbbbbbbbb" in out
    assert ("durations: detected→diagnosed 0.25s, diagnosed→applied 0.75s, "
            "restart→healthy 1m00s, total 1m10s") in out
    assert "  resolved:   2023-11-14 22:14:30Z (1m10s after detection)" in out


def test_show_json_has_steps_hashes_and_iso_times(state, capsys):
    code, out, _ = run(capsys, "incidents", "--state-dir", str(state), "--json", "show", "1")
    incident = json.loads(out)
    assert code == 0 and incident["id"] == 1
    assert incident["steps"][1] == {"step": "diagnosed", "detail": incident["diagnosis"], "data": None,
                                    "at": "2023-11-14T22:13:20.250Z", "since_detection_s": 0.25}
    assert incident["applications"][0]["files"][0]["after_sha256"] == "b" * 64
    assert incident["applications"][0]["applied_at"] == "2023-11-14T22:13:21.000Z"
    assert incident["durations"]["restart_to_healthy_s"] == 60.0
    assert len(incident["tracebacks"]) == 8


def test_unknown_id_and_missing_database_are_one_line_errors(state, tmp_path, capsys):
    code, out, err = run(capsys, "incidents", "show", "42", "--state-dir", str(state))
    assert code == 1 and out == ""
    assert err == f"ddtreed: error: no incident 42 in {database_path(state)}\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = run(capsys, "incidents", "show", "1", "--state-dir", str(empty))
    assert code == 1 and err.count("\n") == 1 and "no incident database" in err
    assert list(empty.iterdir()) == []  # reading never creates anything


def test_listing_before_anything_was_recorded(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, _ = run(capsys, "incidents", "--state-dir", str(empty))
    assert code == 0 and out == f"no incidents recorded yet in {empty} (no incidents.sqlite3)\n"
    code, out, _ = run(capsys, "incidents", "--state-dir", str(empty), "--json")
    assert code == 0 and json.loads(out) == []
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize("argv", [["incidents"], ["incidents", "--json"], ["incidents", "show", "1"]])
def test_a_missing_state_dir_is_an_error_not_an_empty_list(tmp_path, capsys, argv):
    """Issue 17.5: `--state-dir /nonexistent` said "no incidents recorded yet"."""
    missing = tmp_path / "nonexistent"
    code, out, err = run(capsys, *argv, "--state-dir", str(missing))
    assert code == 2 and out == ""
    assert err.startswith(f"ddtreed: error: {missing}: no such directory") and err.count("\n") == 1
    assert not missing.exists()


def test_a_corrupt_database_is_a_one_line_error(tmp_path, capsys):
    database_path(tmp_path).write_bytes(b"garbage" * 1000)
    code, _, err = run(capsys, "incidents", "--state-dir", str(tmp_path))
    assert code == 1 and err.startswith("ddtreed: error: ") and err.count("\n") == 1
    assert "not a valid ddtreed database" in err


def test_bad_arguments_exit_2(state, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["incidents", "--state-dir", str(state), "--limit", "0"])
    assert exit_info.value.code == 2
    assert "--limit: must be a positive integer" in capsys.readouterr().err


@pytest.mark.slow
def test_the_console_command_in_a_real_process(state):
    done = subprocess.run([sys.executable, "-m", "ddtreed", "incidents", "--state-dir", str(state),
                           "show", "1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "incident 1: resolved" in done.stdout


def test_show_names_wrapped_errors_exit_codes_and_causes(tmp_path, capsys):
    from ddtreed.records import Crash

    cause = Crash(kind="traceback", exception="torch.AcceleratorError",
                  message="CUDA error: an illegal memory access was encountered")
    wrapped = Crash(kind="traceback", exception="Exception",
                    message="Capture cuda graph failed: RuntimeError: CUDA error: out of memory",
                    rank="TP1", wrapper="Capture cuda graph failed", inner_exception="RuntimeError",
                    inner_message="CUDA error: out of memory", chained=(cause,))
    death = Crash(kind="child-death", exception=None, message="Subprocess scheduler_0 crashed",
                  exit_code=-9)
    with Store(database_path(tmp_path)) as store:
        incident_id = store.open_incident("crash", (wrapped, death))
    code, out, _ = run(capsys, "incidents", "show", str(incident_id), "--state-dir", str(tmp_path))
    assert code == 0
    assert "  [TP1] traceback: Exception: Capture cuda graph failed" in out
    assert "    wraps RuntimeError: CUDA error: out of memory" in out
    assert "    after: torch.AcceleratorError: CUDA error: an illegal memory access" in out
    assert "  [untagged] child-death: Subprocess scheduler_0 crashed" in out
    assert "    exit code -9" in out


def test_the_state_dir_comes_from_the_config_when_not_given(state, tmp_path, capsys):
    config = tmp_path / "ddtreed.toml"
    config.write_text(f'[service]\nargv = ["python", "-m", "sglang.launch_server"]\n'
                      f'[paths]\nstate_dir = "{state}"\n')
    code, out, err = run(capsys, "incidents", "--config", str(config), "--json")
    assert code == 0, err
    assert [row["id"] for row in json.loads(out)] == [3, 2, 1]
    code, out, _ = run(capsys, "incidents", "show", "1", "--config", str(config))
    assert code == 0 and out.startswith("incident 1: resolved")
    config.write_text("[service]\nargv = []\n")
    code, _, err = run(capsys, "incidents", "--config", str(config))
    assert code == 2 and "service.argv" in err


@pytest.mark.slow
def test_json_stays_parseable_when_the_cli_applies_a_pending_migration(state):
    with Store(database_path(state)) as store:  # make it look like an older daemon's database
        with store.atomic() as db:
            db.execute("DELETE FROM _migrations WHERE name = '0007_canary_runs'")
            db.execute("DROP TABLE canary_runs")
    done = subprocess.run([sys.executable, "-m", "ddtreed", "incidents", "--json", "--state-dir",
                           str(state)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [row["id"] for row in json.loads(done.stdout)] == [3, 2, 1]
    # The migration ran (the table is back) and its log, if any, stayed off stdout.
    with Store(state / "incidents.sqlite3") as store, store.reading() as db:
        assert "canary_runs" in db.table_names()
    with Store(database_path(state), create=False) as store:
        assert "canary_runs" in store.db.table_names()
