"""The scorer's settings judged with one corpus file of the development part held out at a time
(`scripts/train_evidence_scorer.py --by-file`): every file is a fold of its own, only development
reports are read, and each threshold's figures say how `ddtreed diagnose` would do."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("train_evidence_scorer_by_file",
                                              ROOT / "scripts" / "train_evidence_scorer.py")
trainer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trainer)


def test_each_development_file_is_held_out_once_beside_the_stratified_folds():
    model = json.loads((ROOT / "ddtreed" / "data" / "evidence-scorer.json").read_text(encoding="utf-8"))
    report = trainer.by_source_file(model)
    entries = trainer.development_entries()
    assert report["n"] == len(entries)
    assert report["files"] == sorted({entry["file"] for entry in entries})
    for scheme in ("stratified_folds", "one_file_held_out"):
        figures = report[scheme]
        assert 0 < figures["scorer_alone_right"] <= figures["of"] <= report["n"]
        assert [row["threshold"] for row in figures["by_threshold"]] == list(trainer.THRESHOLDS)
        for row in figures["by_threshold"]:
            assert row["right"] == report["rules_alone_right"] + row["fixed"] - row["broken"]
