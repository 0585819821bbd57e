"""Issue 17.2: a service that fails at every start for a reason no rule knows.

Before: six `unknown open` incidents for one cause, each saying only "service exited with code
<n> during startup"; the spent restart budget ended the daemon like a clean stop (`status`:
`stopped`, exit 3 = NOTIMPLEMENTED in `systemctl status`). Now: one incident with a recurrence
count and the service's own last error line and stderr tail, escalated when the budget is spent,
a `gave-up` daemon state, exit code 75. The real `ddtreed run`, a real failing process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddtreed.demo import free_port
from ddtreed.incidents import Store, database_path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = Path(__file__).parent / "programs" / "no_sglang.py"
MAX_RESTARTS = 3

pytestmark = pytest.mark.slow


def ddtreed(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def give_up(directory: Path, *extra: str, max_restarts: int = MAX_RESTARTS) -> dict:
    config = directory / "ddtreed.toml"
    config.write_text(
        "[service]\nargv = " + json.dumps([sys.executable, str(PROGRAM), "--port", str(free_port()), *extra]) + "\n"
        f"[paths]\nlog_dir = {json.dumps(str(directory / 'logs'))}\n"
        f"state_dir = {json.dumps(str(directory / 'state'))}\n"
        f"[policy]\nmax_restarts = {max_restarts}\nrestart_window_s = 300.0\nbackoff_initial_s = 0.05\n"
        "backoff_max_s = 0.2\nstop_grace_s = 2.0\n"
        "[probe]\nstartup_timeout_s = 60.0\npoll_interval_s = 0.1\n"
        "[preflight]\nenabled = false\n")
    run = ddtreed("run", "--config", str(config), "--log-format", "json", timeout=300)
    with Store(database_path(directory / "state")) as store:
        incidents = [store.get(row["id"]) for row in store.list_incidents()]
    return {"run": run, "incidents": incidents, "state": directory / "state", "directory": directory}


@pytest.fixture(scope="module")
def gave_up(tmp_path_factory) -> dict:
    return give_up(tmp_path_factory.mktemp("no-sglang"))


def test_the_daemon_exits_75_when_the_restart_budget_is_spent(gave_up):
    run = gave_up["run"]
    assert run.returncode == 75, run.stderr[-3000:] + run.stdout[-3000:]
    assert "Traceback" not in run.stderr


def test_one_cause_is_one_incident_with_a_recurrence_count(gave_up):
    [incident] = gave_up["incidents"]
    assert incident["category"] == "missing-dependency"  # diagnosed (issue 15), no remediation to try
    assert incident["recurrences"] >= MAX_RESTARTS - 1
    assert incident["status"] == "escalated"
    escalated = [s for s in incident["steps"] if s["step"] == "escalated"]
    assert escalated and "restart budget spent" in escalated[-1]["detail"]


def test_the_incident_carries_what_the_service_said(gave_up):
    [incident] = gave_up["incidents"]
    evidence = incident["evidence"]
    assert evidence["last_error"] == "ModuleNotFoundError: No module named 'sglang'"
    assert evidence["exit_code"] == 1 and evidence["phase"]
    assert evidence["stderr_tail"][-1] == "ModuleNotFoundError: No module named 'sglang'"
    shown = ddtreed("incidents", "show", str(incident["id"]), "--state-dir", str(gave_up["state"]))
    assert "  last error: ModuleNotFoundError: No module named 'sglang'" in shown.stdout
    assert "  exit:       exit code 1" in shown.stdout
    assert "<n>" not in shown.stdout
    assert "resolved:" not in shown.stdout and "  escalated:  " in shown.stdout


def test_a_launcher_slow_to_exit_keeps_its_own_exit_code(tmp_path):
    """CI, loaded: the traceback was complete before the interpreter had exited, ddtreed's SIGTERM
    came first, and the incident said `exit_code: None` (signal 15) instead of the launcher's 1."""
    run = give_up(tmp_path, "--linger", "0.3", max_restarts=1)
    assert run["run"].returncode == 75, run["run"].stderr[-3000:]
    [incident] = run["incidents"]
    assert incident["evidence"]["exit_code"] == 1, incident["evidence"]
    assert incident["evidence"].get("signal") is None


def test_status_says_it_gave_up(gave_up):
    text = ddtreed("status", "--state-dir", str(gave_up["state"]))
    assert text.returncode == 1 and text.stdout.startswith("ddtreed: GAVE UP ")
    report = json.loads(ddtreed("status", "--state-dir", str(gave_up["state"]), "--json").stdout)
    assert report["daemon"]["state"] == "gave-up" and report["gave_up"] is True
