"""The corpus discipline as a gate: the development part is diagnosed right (entries judged
mislabelled are listed with a reason in tests/corpus/disputed.json, never test entries), and the
held-out test part stays at or above its recorded figure (a regression floor, not a target)."""

import importlib.util
import json
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
spec = importlib.util.spec_from_file_location("diagnose_accuracy", HERE.parent / "benchmarks" / "diagnose_accuracy.py")
accuracy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(accuracy)


@pytest.fixture(scope="module")
def measured():
    entries = accuracy.load_entries(CORPUS)
    return entries, accuracy.measure(entries, accuracy.load_split(CORPUS), accuracy.load_disputed(CORPUS))


def test_disputes_name_only_development_entries_with_a_reason():
    split, disputed = accuracy.load_split(CORPUS), accuracy.load_disputed(CORPUS)
    for entry_id, reason in disputed.items():
        assert split.get(entry_id, "dev") == "dev", entry_id
        assert isinstance(reason, str) and len(reason) > 20, entry_id


def test_the_split_covers_every_new_report_once(measured):
    entries, _ = measured
    split = accuracy.load_split(CORPUS)
    new = [e["id"] for e in entries if e["_file"] != "sglang-crashes.jsonl"]
    assert len(new) == len(set(new))
    assert set(new) == set(split)
    assert {e["id"] for e in entries if e["_file"] == "sglang-crashes.jsonl"}.isdisjoint(split)


def unreachable() -> dict:
    """Development reports whose corpus text lacks the evidence for its label (cut before the
    exception line, prose only), each with the reason. Not disputes: the labels may be right."""
    path = CORPUS / "dev-unreachable.json"
    return json.loads(path.read_text()) if path.exists() else {}


def test_development_part_is_diagnosed_right(measured):
    _, result = measured
    excused = set(accuracy.load_disputed(CORPUS)) | set(unreachable())
    misses = [(entry["id"], entry.get("category"), predicted) for entry, predicted in result["rows"]["dev"]
              if not accuracy._right(entry, predicted) and entry["id"] not in excused]
    assert misses == []


def test_unreachable_list_only_holds_development_entries_that_still_miss(measured):
    _, result = measured
    split = accuracy.load_split(CORPUS)
    rows = {entry["id"]: (entry, predicted) for entry, predicted in result["rows"]["dev"]}
    for entry_id, reason in unreachable().items():
        assert split.get(entry_id, "dev") == "dev", entry_id
        assert len(reason) > 20, entry_id
        entry, predicted = rows[entry_id]
        assert not accuracy._right(entry, predicted), f"{entry_id} is diagnosed right now: drop it from the list"


def test_test_part_stays_at_or_above_its_recorded_floor(measured):
    _, result = measured
    floor = json.loads((CORPUS / "accuracy-floor.json").read_text())["test"]
    assert result["parts"]["test"]["accuracy"] >= floor  # only the aggregate is ever shown


def test_the_blind_text_audit_covers_the_whole_test_part_with_a_verdict_and_reason(measured):
    entries, _ = measured
    ids = {entry["id"] for entry in entries}
    split = accuracy.load_split(CORPUS)
    audit = accuracy.load_audit(CORPUS)
    audited_files = set(accuracy.CORPUS_FILES[:accuracy.CORPUS_FILES.index("public-q.jsonl") + 1])
    test_then = {entry["id"] for entry in entries  # the test part when the audit was last extended (session 18)
                 if split.get(entry["id"]) == "test" and entry["_file"] in audited_files}
    assert len(test_then) == 261 and test_then <= set(audit)
    for entry_id, verdict in audit.items():
        assert entry_id in ids, entry_id
        assert verdict["verdict"] in ("reachable", "unreachable"), entry_id
        assert len(verdict["reason"]) >= 10, entry_id


def test_test_part_on_texts_that_hold_their_evidence_stays_at_or_above_its_floor(measured):
    _, result = measured
    floor = json.loads((CORPUS / "accuracy-floor.json").read_text())["test_reachable"]
    audited = accuracy.audit_summary(result["rows"]["test"], accuracy.load_audit(CORPUS),
                                     accuracy.load_unreachable(CORPUS))
    assert audited["reachable"] > 150  # the audit is there: a floor over nothing would pass
    assert audited["reachable_accuracy"] >= floor  # an aggregate, like the part's own floor
