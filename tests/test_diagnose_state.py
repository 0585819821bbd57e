"""`ddtreed diagnose --state-dir`: what the daemon would do given what it has recorded."""

from __future__ import annotations

import json
from pathlib import Path

from ddtreed.cli import main
from ddtreed.incidents import Store, database_path
from ddtreed.paths import shipped
from ddtreed.rules import load_rules
from ddtreed.tracebacks import assemble_lines

FOUNDING_LOG = Path(__file__).parent / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log"


def _record_and_freeze(state_dir: Path) -> str:
    [group] = assemble_lines(FOUNDING_LOG.read_text().splitlines(), str(FOUNDING_LOG))
    diagnosis = load_rules([shipped("rules")]).diagnose(group)
    with Store(database_path(state_dir)) as store:
        incident_id = store.open_incident("crash", group, diagnosis.signature, diagnosis.match)
        store.finish(incident_id, "escalated", "no remediation left to try")
        store.freeze(diagnosis.signature.fingerprint, "no remediation left to try", incident_id)
    return diagnosis.signature.fingerprint


def test_a_frozen_signature_is_reported_with_its_history(tmp_path, capsys):
    fingerprint = _record_and_freeze(tmp_path / "state")
    capsys.readouterr()  # the store's own migration log lines, written while recording
    assert main(["diagnose", str(FOUNDING_LOG), "--state-dir", str(tmp_path / "state"), "--json"]) == 0
    [incident] = json.loads(capsys.readouterr().out)["incidents"]
    assert incident["signature"] == fingerprint
    assert incident["frozen"] is True
    assert incident["previous_incidents"] == [{"id": 1, "status": "escalated"}]

    assert main(["diagnose", str(FOUNDING_LOG), "--state-dir", str(tmp_path / "state")]) == 0
    text = capsys.readouterr().out
    assert "seen before: incidents 1 (escalated)" in text
    assert "FROZEN" in text


def test_a_state_dir_without_a_database_means_nothing_seen_and_creates_nothing(tmp_path, capsys):
    assert main(["diagnose", str(FOUNDING_LOG), "--state-dir", str(tmp_path / "state"), "--json"]) == 0
    [incident] = json.loads(capsys.readouterr().out)["incidents"]
    assert incident["frozen"] is False and incident["previous_incidents"] == []
    assert not (tmp_path / "state").exists()
