"""Item 14 of issue 16: a patch write that fails (a read-only site-packages) leaves no journal, a
one-line error instead of a traceback, and no false "restored the original bytes" at the next start."""

from __future__ import annotations

import json
from pathlib import Path

import fast_service
import pytest
from hostile import (
    DaemonProcess,
    ReadOnlyMount,
    read_only_mount_works,
    run_cli,
    service_config,
    wait_for,
)

from ddtreed.demo.engine_install import install_engine
from ddtreed.service.host import LocalHost
from ddtreed.paths import shipped
from ddtreed.remediation import Engine, load_remediations

PATCH = "ddtree-verify-graph-width"


@pytest.fixture
def read_only(tmp_path):
    if not read_only_mount_works(tmp_path / "mount-probe"):
        pytest.skip("needs root and a working `mount -o remount,bind,ro`")


def _engine(state_dir: Path) -> Engine:
    return Engine(LocalHost(), str(state_dir), load_remediations([shipped("remediations")]))


def test_item14_cli_apply_to_a_read_only_site_packages_is_one_line_and_leaves_nothing(tmp_path, read_only):
    site = tmp_path / "site-packages"
    target = install_engine(site) / "cuda_graph_runner.py"
    before = target.read_bytes()
    state_dir = tmp_path / "state"
    with ReadOnlyMount(site):
        result = run_cli("remediate", "apply", PATCH, "--site-packages", str(site), "--state-dir", str(state_dir))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{target}: cannot write the patch: Read-only file system" in lines[0]
    assert target.read_bytes() == before
    assert not (state_dir / "remediation" / "journal.json").exists()
    backups = state_dir / "remediation" / "backups"
    assert not backups.exists() or not any(backups.iterdir())
    assert _engine(state_dir).reconcile() == []  # the next start has nothing to undo, and says nothing


def test_item14_a_journal_left_before_any_write_is_reported_truthfully(tmp_path):
    """An older ddtreed (or a kill right after the journal) left it: nothing had been changed."""
    site = tmp_path / "site-packages"
    target = install_engine(site) / "cuda_graph_runner.py"
    engine = _engine(tmp_path / "state")
    plan = engine.plan(PATCH, site_packages=str(site))
    entry = {"application_id": "20260101000000-abcdef", "remediation_id": PATCH, "kind": "patch",
             "target": str(site), "summary": plan.reason, "incident_id": None, "applied_at": 0.0,
             "status": "applied", "launch": None, "previous": None, "files": [{
                 "path": str(target), "relative": "x", "before_sha256": "0" * 64, "after_sha256": "1" * 64,
                 "backup_path": str(tmp_path / "nowhere")}]}
    from ddtreed.service.host import sha256_bytes

    entry["files"][0]["before_sha256"] = sha256_bytes(plan.files[0].before)
    entry["files"][0]["after_sha256"] = sha256_bytes(plan.files[0].after)
    engine.store.write_journal("apply", entry)
    done = engine.reconcile()
    assert [str(sentence) for sentence in done] == [
        f"dropped the interrupted apply of {PATCH} (20260101000000-abcdef): no file had been changed"]
    assert "restored" not in str(done[0])
    assert not engine.store.journal_path.exists()


@pytest.mark.slow
def test_item14_the_daemon_reports_the_failed_write_and_its_next_start_claims_no_restore(tmp_path, read_only):
    config = service_config(tmp_path / "run")
    target = fast_service.engine_file(tmp_path / "run")
    before = target.read_bytes()
    state_dir = tmp_path / "run" / "state"
    with ReadOnlyMount(target.parent.parent):
        daemon = DaemonProcess(config, tmp_path / "daemon1.jsonl")
        try:
            wait_for(lambda: daemon.has("remediation_apply_failed"), 60, what="the patch write to fail")
        finally:
            daemon.stop()
    failed = daemon.events("remediation_apply_failed")[0]
    assert "cannot write the patch: Read-only file system" in failed["error"]
    assert "Traceback" not in (tmp_path / "daemon1.jsonl").read_text()
    assert not (state_dir / "remediation" / "journal.json").exists()
    assert target.read_bytes() == before
    second = DaemonProcess(config, tmp_path / "daemon2.jsonl")
    try:
        wait_for(lambda: second.has("remediation_applied") or second.process.poll() is not None, 60,
                 what="the second daemon to start over")
    finally:
        second.stop()
    said = json.dumps(second.events("remediation_reconciled") + second.events("reconciled"))
    assert "restored the original bytes" not in said, said
