"""Issue 17.2/5/6: incidents that tell the story, read the way SREs read systemctl and kubectl.

Real SQLite files written through the real Store, read back through the real CLI (in-process,
and as a real subprocess for --follow and the read-only copy).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddtreed.cli import main
from ddtreed.incidents import Store, database_path
from ddtreed.incidents.stderr_tail import ServiceOutput, StderrTail, evidence
from ddtreed.records import Application, Crash, LaunchChange, RuleMatch, Signature
from supervision_helpers import ctrl_c_works

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_764_583_200.0  # 2025-12-01 10:00:00 UTC

ARGV = ["/opt/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/kimi", "--tp", "8",
        "--cuda-graph-max-bs", "256", "--port", "30000"]
STDERR = """\
[2025-12-01 10:00:01] server_args=ServerArgs(model_path='/models/kimi', tp_size=8)
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/opt/venv/lib/python3.12/site-packages/sglang/launch_server.py", line 7, in <module>
    from sglang.srt.entrypoints.http_server import launch_server
ModuleNotFoundError: No module named 'sgl_kernel'
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def service_evidence(exit_code=1, phase="starting: before weights-loading") -> dict:
    tail = StderrTail()
    tail.feed_text(STDERR)
    return evidence(tail.lines(), exit_code=exit_code, phase=phase,
                    stderr_path="/var/log/ddtreed/kimi/service.stderr.log")


def record_escalated(store: Store) -> int:
    """A crash loop of one cause: a flag remediation tried and reverted, then escalated."""
    crash = Crash(kind="killed", exception=None, message="service exited with code 1 without a traceback",
                  exit_code=1)
    signature = Signature(fingerprint="startup-exit", exception=None,
                          normalized_message="service exited with code <n> without a traceback",
                          frames=(), params={"n0": 1})
    match = RuleMatch(rule_id="", category="unknown", title="No rule matched",
                      diagnosis="no rule recognises this failure: service exited with code <n> during startup",
                      remediations=(), params={"n0": 1,
                                               "message": "SGLang says:\n  a long\n  multi-line advice"})
    incident = store.open_incident("crash", (crash,), signature, match, {"argv": ARGV}, detected_at=T0,
                                   evidence=service_evidence())
    store.add_step(incident, "diagnosed", "no rule recognises this failure\nSGLang's advice:\n  check the install",
                   at=T0 + 0.2)
    application = Application(application_id="app-7", remediation_id="lower-cuda-graph-max-bs", kind="args",
                              target="launch", summary="halve --cuda-graph-max-bs",
                              launch=LaunchChange(argv=tuple(ARGV[:8] + ["128", "--disable-custom-all-reduce",
                                                                          "--port", "30000"]),
                                                  env={}, description="halve --cuda-graph-max-bs"),
                              applied_at=T0 + 1)
    store.record_application(incident, application)
    store.add_step(incident, "applied", "halve --cuda-graph-max-bs", {"application_id": "app-7"}, at=T0 + 1)
    store.add_step(incident, "restarting", "", at=T0 + 1.5)
    for n in range(3):
        store.record_recurrence(incident, "exit code 1 again", service_evidence(), at=T0 + 5 + n)
    store.add_step(incident, "failed", "exited during startup", at=T0 + 9)
    store.mark_application("app-7", "reverted")
    store.add_step(incident, "reverted", "lower-cuda-graph-max-bs did not hold", at=T0 + 10)
    store.add_step(incident, "escalated", "restart budget spent; auto-remediation frozen", at=T0 + 11)
    store.finish(incident, "escalated", "restart budget spent: needs a person", at=T0 + 11)
    return incident


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "state"
    with Store(database_path(directory)) as store:
        record_escalated(store)
    return directory


def test_escalated_incident_reads_as_escalated_with_the_services_own_words(state, capsys):
    code, out, err = run(capsys, "incidents", "show", "1", "--state-dir", str(state))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "incident 1: escalated  unknown  (no rule matched)"
    assert "  means:      needs a person: nothing left to try automatically" in lines
    assert "  escalated:  2025-12-01 10:00:11Z (11.0s after detection)" in lines
    assert not any(line.lstrip().startswith("resolved:") for line in lines)
    # What the service itself said, how it ended, where it was.
    assert "  last error: ModuleNotFoundError: No module named 'sgl_kernel'" in lines
    assert "  exit:       exit code 1" in lines
    assert "  phase:      starting: before weights-loading" in lines
    assert "  | ModuleNotFoundError: No module named 'sgl_kernel'" in lines
    assert "  recurred:   3 times after restarts (last 2025-12-01 10:00:07Z)" in lines
    # No placeholder leaks into the diagnosis; the params do not paste the whole message.
    assert "<n>" not in out.split("steps:")[0]
    assert "service exited with code 1 during startup" in out
    assert "multi-line advice" not in out
    # A multi-line step detail stays indented under its step.
    [index] = [i for i, line in enumerate(lines) if "diagnosed   no rule recognises" in line]
    assert lines[index + 1].strip() == "SGLang's advice:" and lines[index + 1].startswith(" " * 30)
    # The reverted remediation is listed as tried, with its change as a flag diff.
    assert "remediations tried:" in lines
    assert "  lower-cuda-graph-max-bs (args): tried, reverted (did not hold)" in lines
    assert "    flags:      --cuda-graph-max-bs 256 → 128" in lines
    assert any(line.strip() == "+ --disable-custom-all-reduce" for line in lines)
    assert "applied, verified" not in out


def test_a_crash_loop_is_one_incident_with_a_count(state, capsys):
    code, out, _ = run(capsys, "incidents", "--state-dir", str(state), "--json")
    [incident] = json.loads(out)
    assert incident["recurrences"] == 3 and incident["status"] == "escalated"
    code, out, _ = run(capsys, "incidents", "--state-dir", str(state))
    assert out.splitlines()[2].split()[5:7] == ["escalated", "4x"]


def test_show_json_carries_the_evidence_with_iso_times(state, capsys):
    code, out, _ = run(capsys, "incidents", "show", "1", "--json", "--state-dir", str(state))
    incident = json.loads(out)
    assert incident["evidence"]["last_error"] == "ModuleNotFoundError: No module named 'sgl_kernel'"
    assert incident["evidence"]["exit_code"] == 1 and incident["evidence"]["signal"] is None
    assert incident["evidence"]["stderr_tail"][-1] == "ModuleNotFoundError: No module named 'sgl_kernel'"
    assert incident["last_recurred_at"] == "2025-12-01T10:00:07.000Z"
    for key in ("started_at", "resolved_at"):
        assert incident[key].endswith("Z") and "T" in incident[key]


def test_stderr_tail_is_bounded():
    tail = StderrTail()
    tail.feed(f"line {n} " + "x" * 900 for n in range(10_000))
    lines = tail.lines()
    assert len(lines) <= 40 and sum(len(line.encode()) for line in lines) <= 8 * 1024
    assert lines[-1].startswith("line 9999 ")


def test_since_and_several_statuses_filter(tmp_path, capsys):
    directory = tmp_path / "state"
    now = time.time()
    with Store(database_path(directory)) as store:
        old = store.open_incident("crash", (), detected_at=now - 3 * 86400, message="old")
        store.finish(old, "resolved", at=now - 3 * 86400 + 5)
        store.open_incident("crash", (), detected_at=now - 600, message="recent open")
        escalated = store.open_incident("crash", (), detected_at=now - 300, message="recent escalated")
        store.finish(escalated, "escalated", at=now - 200)
    capsys.readouterr()  # the migrations' log lines
    code, out, _ = run(capsys, "incidents", "--state-dir", str(directory), "--json", "--since", "1h")
    assert [row["message"] for row in json.loads(out)] == ["recent escalated", "recent open"]
    code, out, _ = run(capsys, "incidents", "--state-dir", str(directory), "--json", "--status", "resolved,escalated")
    assert [row["message"] for row in json.loads(out)] == ["recent escalated", "old"]
    code, out, _ = run(capsys, "incidents", "--state-dir", str(directory), "--json",
                       "--since", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 4 * 86400)))
    assert len(json.loads(out)) == 3
    with pytest.raises(SystemExit) as exit_info:
        main(["incidents", "--state-dir", str(directory), "--since", "yesterday-ish"])
    assert exit_info.value.code == 2
    assert "expected a duration (90s, 30m, 24h, 7d) or an ISO-8601 time" in capsys.readouterr().err


def test_follow_prints_incidents_as_they_open_and_end(tmp_path):
    directory = tmp_path / "state"
    with Store(database_path(directory)) as store:
        store.open_incident("crash", (), detected_at=T0, message="before")
    follower = subprocess.Popen([sys.executable, "-m", "ddtreed", "incidents", "--follow", "--json",
                                 "--state-dir", str(directory)], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_works)
    try:
        events = [json.loads(follower.stdout.readline())]
        with Store(database_path(directory)) as store:
            later = store.open_incident("crash", (), message="while following")
            events.append(json.loads(follower.stdout.readline()))
            store.finish(later, "resolved", "fixed")
            events.append(json.loads(follower.stdout.readline()))
    finally:
        follower.send_signal(2)  # Ctrl-C: the normal way out
        code = follower.wait(30)
    assert [(e["event"], e["incident"]["id"]) for e in events] == [("exists", 1), ("opened", 2), ("ended", 2)]
    assert events[2]["incident"]["status"] == "resolved" and events[2]["at"].endswith("Z")
    assert code == 0, follower.stderr.read()


def _read_only_mount_works() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs unshare -m (root) for a real read-only mount")
def test_a_read_only_copy_of_a_state_dir_can_be_reviewed(state, tmp_path):
    """Issue 17.5: `incidents` on a read-only copy failed with "database is read-only"."""
    # A copy taken while the daemon runs holds WAL files too.
    copy = tmp_path / "copy"
    with Store(database_path(state)) as store:
        store.add_step(1, "reconciled", "written into the WAL")
        shutil.copytree(state, copy)
    script = (f"mount --bind {copy} {copy} && mount -o remount,bind,ro {copy} && "
              f"{sys.executable} -m ddtreed incidents --state-dir {copy} --json && "
              f"{sys.executable} -m ddtreed incidents show 1 --state-dir {copy}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout.splitlines()[0])
    assert [row["id"] for row in listed] == [1]
    assert "incident 1: escalated" in done.stdout and "written into the WAL" in done.stdout


def test_help_has_examples_and_lists_show_once(capsys):
    with pytest.raises(SystemExit):
        main(["incidents", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "ddtreed incidents show 12" in out
    assert sum(line.split()[:1] == ["show"] for line in out.splitlines()) == 1


def test_the_next_crash_of_an_open_incident_is_found_by_its_signature(tmp_path):
    with Store(database_path(tmp_path)) as store:
        signature = Signature(fingerprint="loop", exception=None, normalized_message="exit", frames=(), params={})
        incident = store.open_incident("crash", (), signature, detected_at=T0)
        assert store.open_incident_for("loop", active_since=T0 - 1) == incident
        assert store.open_incident_for("loop", active_since=T0 + 1) is None  # quiet too long: a new one
        assert store.open_incident_for("other", active_since=T0 - 1) is None
        store.finish(incident, "escalated", at=T0 + 2)
        assert store.open_incident_for("loop", active_since=T0 - 1) is None


def test_service_output_prefers_stderr_and_falls_back_to_stdout():
    from ddtreed.records import LogChunk

    output = ServiceOutput(["/l/service.stderr.log"], ["/l/service.stdout.log"])
    output.feed(LogChunk("/l/service.stdout.log", 1, ("INFO loading", "RuntimeError: boom on stdout"), T0))
    output.feed(LogChunk("/l/service.stderr.log", 1, ("warming up",), T0))
    found = output.evidence(exit_code=1, phase="weights loading")
    assert found["last_error"] == "RuntimeError: boom on stdout" and found["stderr_path"] == "/l/service.stdout.log"
    output.feed(LogChunk("/l/service.stderr.log", 2, ("ModuleNotFoundError: No module named 'sglang'",), T0))
    found = output.evidence(signal=9)
    assert found["last_error"] == "ModuleNotFoundError: No module named 'sglang'"
    assert (found["signal_name"], found["stderr_path"]) == ("SIGKILL", "/l/service.stderr.log")
