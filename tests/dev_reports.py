"""Development-part reports of the corpus for tests that perturb them (never the test part)."""

import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"


def dev_entry(entry_id: str) -> dict:
    split = json.loads((CORPUS / "split.json").read_text())
    assert split.get(entry_id, "dev") == "dev"  # only the development part is ever read here
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and json.loads(line)["id"] == entry_id:
                return json.loads(line)
    raise AssertionError(entry_id)


def right_as_pasted_and_perturbed(entry_id: str, perturb, diagnose) -> None:
    """The report gets one of its labels as pasted and again after `perturb` of its text."""
    entry = dev_entry(entry_id)
    text = entry.get("text") or entry.get("log")
    labels = {entry["category"], entry.get("alt_category")}
    assert diagnose(text)[0].match.category in labels
    assert diagnose(perturb(text))[0].match.category in labels
