"""What the next start's recovery writes into an incident a killed ddtreed left open must be true.

An incident in which no fix was ever applied (ddtreed died while diagnosing, while restarting
without a fix, while probing an advised incident) is `interrupted`: `incidents show` must not
call it "reverted" or "mid-remediation", and `status` must not count it as a reverted fix. An
incident whose unverified fix recovery reverted stays `reverted`; a fix verified before the kill
is left alone.

Proved on the real thing: a real `ddtreed run` SIGKILLed right after the crash's row is committed
(before any fix), the next real `ddtreed run` on the same state, and what `ddtreed incidents
show --json`, `incidents --status`, `status --json` and the store then say; and the real
`recover()` on a real store and engine holding one verified, one never-fixed and one
applied-but-unverified incident.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "programs"))
sys.path.insert(0, str(Path(__file__).parent))

from fault_harness import DaemonProcess, kill_service_sessions, killed_at_commit, wait_for  # noqa: E402
from test_incidents_durability import _config  # noqa: E402

from ddtreed.cli import main  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.loop.recovery import recover, verified_launch  # noqa: E402
from ddtreed.paths import shipped  # noqa: E402
from ddtreed.records import ServiceContext  # noqa: E402
from ddtreed.remediation import Engine, load_remediations  # noqa: E402
from ddtreed.service.host import LocalHost  # noqa: E402


def _json(capsys, *argv: str, codes: tuple[int, ...] = (0,)):
    capsys.readouterr()
    assert main(list(argv)) in codes
    return json.loads(capsys.readouterr().out)


def test_a_daemon_killed_before_any_fix_leaves_an_interrupted_incident_not_a_reverted_one(tmp_path, capsys):
    directory = tmp_path / "run"
    directory.mkdir()
    config = _config(directory)
    state = directory / "state"
    first = killed_at_commit(config, directory / "first.jsonl")
    second = None
    try:
        with Store(database_path(state), create=False) as store:
            [killed] = store.list_incidents()
            assert killed["status"] == "open" and store.get(killed["id"])["applications"] == []
        second = DaemonProcess(config, directory / "second.jsonl")
        wait_for(lambda: second.has("restart_budget_spent"), 90,
                 what="the next daemon to recover, meet the crash again and give up")
    finally:
        first.kill()
        if second is not None:
            second.stop()
        kill_service_sessions(directory)
    shown = _json(capsys, "incidents", "show", str(killed["id"]), "--state-dir", str(state), "--json")
    assert shown["status"] == "interrupted", shown["status"]
    # killed after its row, before the rules ran: the next start diagnoses the crash it recorded, so the
    # incident says what failed (the same reading the next daemon gives the same crash live)
    assert killed["rule_id"] is None and killed["category"] == "unknown"
    listed = _json(capsys, "incidents", "--state-dir", str(state), "--json")
    again = next(row for row in listed if row["id"] != killed["id"])
    assert again["rule_id"] is not None
    assert (shown["rule_id"], shown["category"]) == (again["rule_id"], again["category"]), shown
    assert shown["diagnosis"] and shown["title"], shown
    [diagnosed] = [step["detail"] for step in shown["steps"] if step["step"] == "diagnosed"]
    assert "recorded crash" in diagnosed and again["category"] in diagnosed, diagnosed
    assert "mid-remediation" not in shown["outcome"] and "revert" not in shown["outcome"], shown["outcome"]
    assert "nothing had been changed" in shown["outcome"], shown["outcome"]
    assert shown["applications"] == []
    [reconciled] = [step["detail"] for step in shown["steps"] if step["step"] == "reconciled"]
    assert "revert" not in reconciled, reconciled
    capsys.readouterr()
    assert main(["incidents", "show", str(killed["id"]), "--state-dir", str(state)]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("incident "))
    assert header.startswith(f"incident {killed['id']}: interrupted "), header
    assert "reverted" not in text and "mid-remediation" not in text, text
    page = tmp_path / "incident.html"
    assert main(["incidents", "show", str(killed["id"]), "--state-dir", str(state), "--html", str(page)]) == 0
    assert '<span class="badge info">interrupted</span> ddtreed stopped before it closed' in page.read_text()
    assert "mid-remediation" not in page.read_text()
    listed = _json(capsys, "incidents", "--state-dir", str(state), "--status", "interrupted", "--json")
    assert [row["id"] for row in listed] == [killed["id"]]
    # the daemon gave up (its exit code: not running); the counts are read all the same
    counts = _json(capsys, "status", "--state-dir", str(state), "--json", codes=(0, 1, 3))["incidents"]
    by_status: dict[str, int] = {}
    for row in counts["incidents"]:
        by_status[row["status"]] = by_status.get(row["status"], 0) + row["count"]
    assert by_status.get("interrupted") == 1 and "reverted" not in by_status, by_status
    assert counts["applications"]["reverted"] == 0
    with Store(database_path(state), create=False) as store:
        assert store.get(killed["id"])["status"] == "interrupted"


def test_recovery_reverts_only_what_was_applied_and_leaves_a_verified_fix_alone(tmp_path):
    """The real recover() on a real store and engine: incident 1 resolved by a verified flag fix,
    incident 2 open with no fix (killed while diagnosing), incident 3 open with a flag fix applied
    but not verified (killed while probing it), incident 4 open with its fix verified (killed
    between marking the fix verified and closing the incident), incident 5 open after its fix
    failed and the dead daemon itself reverted it (killed before trying the next)."""
    state = tmp_path / "state"
    state.mkdir()
    store = Store(database_path(state))
    engine = Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]), incidents=store)
    context = ServiceContext(argv=("python", "-m", "sglang.launch_server", "--port", "30000"))

    def apply(incident_id: int, remediation: str = "disable-cuda-graph"):
        plan = engine.plan(remediation, context)
        assert plan.applicable, plan.reason
        application = engine.apply(plan, incident_id=incident_id)
        store.add_step(incident_id, "applied", remediation)
        return application.application_id

    verified_incident = store.open_incident("crash", message="a crash fixed before the kill")
    verified = apply(verified_incident)
    store.mark_application(verified, "verified")
    store.add_step(verified_incident, "verified", "held")
    store.finish(verified_incident, "resolved", "disable-cuda-graph held")
    never_fixed = store.open_incident("crash", message="killed while diagnosing")
    unverified_incident = store.open_incident("crash", message="killed while probing its fix")
    unverified = apply(unverified_incident, "disable-cuda-graph")
    held_incident = store.open_incident("crash", message="killed as its fix was found to hold")
    store.mark_application(apply(held_incident), "verified")
    failed_incident = store.open_incident("crash", message="killed after its fix failed and was reverted")
    engine.revert(apply(failed_incident))

    recover(engine, store, LocalHost(), str(state), None, None)

    one, two, three = (store.get(i) for i in (verified_incident, never_fixed, unverified_incident))
    assert (one["status"], one["outcome"]) == ("resolved", "disable-cuda-graph held")
    assert [a["status"] for a in one["applications"]] == ["verified"]
    assert "reconciled" not in [step["step"] for step in one["steps"]]
    assert verified_launch(engine) is not None  # the verified flags still relaunch the service
    assert two["status"] == "interrupted" and "nothing had been changed" in two["outcome"], two["outcome"]
    assert "revert" not in two["outcome"] and "mid-remediation" not in two["outcome"]
    assert three["status"] == "reverted", three["status"]
    assert [a["status"] for a in three["applications"]] == ["reverted"]
    assert "disable-cuda-graph" in three["outcome"] and "not verified" in three["outcome"], three["outcome"]
    assert store.application_entry(unverified)["status"] == "reverted"
    four = store.get(held_incident)
    assert four["status"] == "resolved" and "disable-cuda-graph held" in four["outcome"], four["outcome"]
    assert [a["status"] for a in four["applications"]] == ["verified"]
    [step] = [step["detail"] for step in four["steps"] if step["step"] == "reconciled"]
    assert "verified and stays" in step and "revert" not in step, step
    five = store.get(failed_incident)
    assert five["status"] == "reverted" and "reverted before" in five["outcome"], five["outcome"]
    store.close()


def test_a_daemon_killed_after_its_patch_was_written_leaves_a_reverted_incident(tmp_path, capsys):
    """The real `ddtreed run` under policy auto SIGKILLs itself once its patch is written and
    recorded, before it was verified (DDTREED_REMEDIATION_KILL_AT=apply:recorded): the next start
    reverts the patch, and that incident says `reverted` (a fix was applied and undone); the same
    crash met again is fixed and verified in an incident of its own."""
    import fast_service
    from ddtreed.demo import free_port

    directory = tmp_path / "run"
    directory.mkdir()
    config = fast_service.write_config(directory, port=free_port())
    state = directory / "state"
    pristine = fast_service.engine_file(directory).read_bytes()
    first = DaemonProcess(config, directory / "first.jsonl", env={"DDTREED_REMEDIATION_KILL_AT": "apply:recorded"})
    second = None
    try:
        wait_for(lambda: first.process.poll() is not None, 60, what="the daemon to reach its kill point")
        assert first.process.returncode == -signal.SIGKILL
        first.kill()
        kill_service_sessions(directory)
        assert fast_service.engine_file(directory).read_bytes() != pristine  # the patch is on disk
        second = DaemonProcess(config, directory / "second.jsonl")
        wait_for(lambda: second.has("incident_resolved"), 90, what="the next daemon to fix the crash again")
    finally:
        first.kill()
        if second is not None:
            second.stop()
        kill_service_sessions(directory)
    listed = sorted(_json(capsys, "incidents", "--state-dir", str(state), "--json"), key=lambda row: row["id"])
    assert [row["status"] for row in listed] == ["reverted", "resolved"], listed
    killed = _json(capsys, "incidents", "show", str(listed[0]["id"]), "--state-dir", str(state), "--json")
    assert "mid-remediation" in killed["outcome"] and "reverted ddtree-verify-graph-width" in killed["outcome"]
    assert [a["status"] for a in killed["applications"]] == ["reverted"]
    fixed = _json(capsys, "incidents", "show", str(listed[1]["id"]), "--state-dir", str(state), "--json")
    assert [a["status"] for a in fixed["applications"]] == ["verified"]


def test_a_recorded_crash_is_diagnosed_from_its_record_and_a_record_the_rules_cannot_read_stays_as_it_was(tmp_path):
    """diagnose_recorded on a real store with the shipped rules: the founding crash recorded without
    its diagnosis gets the reading the live path gives it; a diagnosed incident, a canary incident
    and a record of another shape (a future version's crash kind) are left as they were."""
    from ddtreed.incidents import encode
    from ddtreed.loop.incident_path import diagnose_recorded
    from ddtreed.cli.diagnose_cmd import diagnose_lines
    from ddtreed.rules import load_rules

    founding = (Path(__file__).parent / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log").read_text()
    rules = load_rules([shipped("rules")])
    crashes = diagnose_lines(founding.splitlines(), "founding.log", rules, None)[0].crashes
    live = rules.diagnose(crashes, None)
    assert live.match.category == "cuda-graph-shape-mismatch"
    store = Store(database_path(tmp_path))
    recorded = store.open_incident("crash", crashes, live.signature, None)
    diagnosed = store.open_incident("crash", crashes, live.signature, live.match)
    canary = store.open_incident("canary", message="canary failed")
    odd = store.open_incident("crash", crashes, live.signature, None)
    with store.atomic() as db:  # a record this version cannot read: an unknown crash kind
        db.execute("UPDATE incidents SET tracebacks = ? WHERE id = ?",
                   [json.dumps([{**encode.crash_record(crashes[0]), "kind": "from-the-future"}]), odd])
    before = {i: store.get(i) for i in (diagnosed, canary, odd)}
    recorded_before = store.get(recorded)  # what was recorded stays as recorded: only the verdict is added

    assert diagnose_recorded(store, rules, None, [recorded, diagnosed, canary, odd, 999]) == [recorded]
    after = store.get(recorded)
    assert (after["rule_id"], after["category"], after["diagnosis"]) == (
        live.match.rule_id, live.match.category, live.match.diagnosis)
    assert after["fingerprint"] == live.signature.fingerprint
    assert after["tracebacks"] == recorded_before["tracebacks"] and after["ranks"] == recorded_before["ranks"]
    [step] = [s for s in after["steps"] if s["step"] == "diagnosed"]
    assert step["detail"].startswith("at a later start, from the recorded crash") and step["data"]["late"] is True
    for incident_id, was in before.items():
        now = store.get(incident_id)
        assert (now["rule_id"], now["category"]) == (was["rule_id"], was["category"])
        assert now["tracebacks"] == was["tracebacks"]
        assert [s["step"] for s in now["steps"]] == [s["step"] for s in was["steps"]]
