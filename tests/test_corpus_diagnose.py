"""Every corpus report, run through the real `ddtreed diagnose --json`, lands in its labelled category."""

import json
from pathlib import Path

import pytest

from ddtreed.cli import main

CORPUS = Path(__file__).parent / "corpus" / "sglang-crashes.jsonl"
ENTRIES = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


def diagnose_json(path: Path, capsys, *extra: str) -> dict:
    assert main(["diagnose", str(path), "--json", *extra]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0])


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["id"] for entry in ENTRIES])
def test_corpus_entry_is_classified_as_labelled(entry, tmp_path, capsys):
    log = tmp_path / f"{entry['id']}.log"
    log.write_text(entry["log"])
    report = diagnose_json(log, capsys)
    assert report["path"] == str(log)
    assert report["incidents"], "no crash assembled"
    incident = report["incidents"][0]
    accepted = {entry["category"], entry["alt_category"]} - {None}
    assert incident["category"] in accepted, incident
    for key in ("category", "rule_id", "diagnosis", "params", "remediations", "signature",
                "exception", "message", "ranks"):
        assert key in incident
    assert incident["rule_id"] and incident["diagnosis"]
