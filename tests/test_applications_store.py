"""One record of applications: the incident database. The engine, `ddtreed remediate` and the
daemon all read and write its `applications` table; an older ddtreed's `applications.json` is
moved in once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ddtreed.service.host import LocalHost
from ddtreed.incidents import Store, database_path
from ddtreed.paths import shipped
from ddtreed.records import Application
from ddtreed.remediation import Engine, load_remediations
from test_remediation_crash import DEMO_SOURCE, make_demo_site

REPO = Path(__file__).resolve().parent.parent
ID = "ddtree-verify-graph-width"


def _engine(state: Path) -> Engine:
    return Engine(LocalHost(), str(state), load_remediations([shipped("remediations")]))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddtreed", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_remediate_apply_and_revert_write_the_table_the_daemon_reads(tmp_path):
    site = make_demo_site(tmp_path)
    state = tmp_path / "state"
    applied = _cli("remediate", "apply", ID, "--site-packages", str(site), "--state-dir", str(state), "--json")
    assert applied.returncode == 0, applied.stderr
    application_id = json.loads(applied.stdout)["application_id"]
    [row] = Store(database_path(state)).applications()
    assert (row["application_id"], row["status"], row["remediation_id"]) == (application_id, "applied", ID)
    assert row["files"][0]["after_sha256"] and row["files"][0]["backup_path"]
    assert not (state / "remediation" / "applications.json").exists()

    reverted = _cli("remediate", "revert", application_id, "--state-dir", str(state))
    assert reverted.returncode == 0, reverted.stderr
    assert [r["status"] for r in Store(database_path(state)).applications()] == ["reverted"]
    assert (site / "ddtreed_demo_engine" / "cuda_graph_runner.py").read_bytes() == DEMO_SOURCE


def test_a_verified_application_stays_in_place_and_revertable(tmp_path):
    site = make_demo_site(tmp_path)
    state = tmp_path / "state"
    engine = _engine(state)
    application = engine.apply(engine.plan(ID, site_packages=str(site)))
    store = Store(database_path(state))
    store.mark_application(application.application_id, "verified")
    assert [a.application_id for a in _engine(state).status()] == [application.application_id]
    _engine(state).revert(application.application_id)
    [row] = store.applications()
    assert row["status"] == "reverted" and row["verified_at"] is not None


def test_an_old_applications_json_is_moved_into_the_database_once(tmp_path):
    site = make_demo_site(tmp_path)
    state = tmp_path / "state"
    engine = _engine(state)
    application = engine.apply(engine.plan(ID, site_packages=str(site)))
    store = Store(database_path(state))
    entry = store.application_entry(application.application_id)
    # What an older ddtreed left: the JSON store says applied, the database said verified.
    legacy = state / "remediation" / "applications.json"
    old = {k: v for k, v in entry.items() if k not in ("verified_at", "updated_at", "previous")}
    legacy.write_text(json.dumps({"applications": [old, {**old, "application_id": "old-1", "status": "reverted"}]}))
    with store.atomic() as db:
        db.execute("DELETE FROM applications WHERE application_id = ?", [application.application_id])
    store.record_application(None, Application(application.application_id, ID, "patch", str(site), "s"),
                             status="verified")

    again = _engine(state)
    assert not legacy.exists() and legacy.with_name("applications.json.migrated").exists()
    statuses = {row["application_id"]: row["status"] for row in store.applications()}
    assert statuses == {application.application_id: "verified", "old-1": "reverted"}
    [in_place] = again.status()
    assert in_place.files[0].after_sha256 == entry["files"][0]["after_sha256"]  # the engine's fields kept
    again.revert(application.application_id)
    assert (site / "ddtreed_demo_engine" / "cuda_graph_runner.py").read_bytes() == DEMO_SOURCE
    _engine(state)  # a second start finds nothing to migrate
    assert len(store.applications()) == 2
