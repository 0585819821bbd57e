"""Build ddtreed/data/evidence-scorer.json from the DEVELOPMENT part of tests/corpus only.

    PYTHONPATH=$PWD python scripts/train_evidence_scorer.py          # rebuild the shipped model
    PYTHONPATH=$PWD python scripts/train_evidence_scorer.py --check  # exit 1 when it differs
    PYTHONPATH=$PWD python scripts/train_evidence_scorer.py --report # the cross-validation table (JSON)

Reports whose id tests/corpus/split.json marks `test` are skipped when their line is read, before
their text is used for anything. Each development report is diagnosed by the rules alone, through
`diagnose_file` (the path `ddtreed diagnose` takes); the crash that diagnosis is on gives the
features (`ddtreed.rules.scorer.features`). The settings (which kinds of feature, smoothing, the
minimum number of reports a feature must occur in, the confidence threshold) are chosen by
stratified K-fold cross-validation within the development part: for each fold the scorer is
trained without the fold, and the fold is judged as `ddtreed diagnose` would judge it (the rules'
category, replaced by the scorer's where the rules left the crash open and the scorer is sure
enough). The model is then fitted on the whole development part with the chosen settings. Counts
are integers and every list is sorted, so the same corpus and code give the same bytes.

The model depends on what the assembler and the rules make of each report: after changing them,
rerun this script and commit the model with the change (tests/test_evidence_scorer.py checks it).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import sys
import tempfile
from collections import Counter, defaultdict
from itertools import product
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
CORPUS_FILES = ("sglang-crashes.jsonl", "public-a.jsonl", "public-b.jsonl", "public-c.jsonl", "public-d.jsonl",
                "public-e.jsonl", "public-f.jsonl", "public-g.jsonl")
FOLDS = 5
SEED = 20261201
KIND_SETS = (
    ("exception", "family", "message", "frames", "phase", "lines", "kind"),
    ("exception", "family", "message", "frames", "phase", "kind"),
    ("exception", "family", "message", "phase", "kind"),
    ("exception", "family", "frames", "phase", "lines", "kind"),
)
ALPHAS = (0.1, 0.3, 1.0)
MIN_DOCS = (1, 2)
# Not below 0.7: under it the scorer outvotes hand-written phrasings in tests/ that state what a
# rule must say of them (tests/test_diagnose_phrasings.py, test_rules_cases.py: three of them at
# 0.50-0.63), evidence from outside this corpus that lower thresholds over-fit its folds.
THRESHOLDS = (0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)


def development_entries(corpus: Path = CORPUS) -> list[dict]:
    """The development part's reports (split.json `dev`, or not in it); test reports are dropped
    as their line is parsed, and their text is never kept."""
    split = json.loads((corpus / "split.json").read_text(encoding="utf-8"))
    disputed = json.loads((corpus / "disputed.json").read_text(encoding="utf-8")) \
        if (corpus / "disputed.json").exists() else {}
    kept = []
    for name in CORPUS_FILES:
        path = corpus / name
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            if split.get(entry["id"], "dev") != "dev":
                continue
            kept.append({"id": entry["id"], "category": entry.get("category"),
                         "alt_category": entry.get("alt_category"),
                         "text": entry.get("text") or entry.get("log") or "",
                         "disputed": entry["id"] in disputed})
    return kept


def observe(entries: list[dict]) -> list[dict]:
    """Each report as the rules alone see it: their category, whether they left it open (no rule
    or a last-resort one), and the features of the crash their diagnosis is on."""
    from ddtreed.cli.diagnose_cmd import diagnose_file
    from ddtreed.paths import shipped
    from ddtreed.rules import load_rules
    from ddtreed.rules.ruleset import LAST_RESORT_PRIORITY
    from ddtreed.rules.scorer import KINDS, features

    with contextlib.redirect_stdout(io.StringIO()):
        rules = load_rules([shipped("rules")], scorer=False)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ddtreed-train-") as scratch:
        path = os.path.join(scratch, "report.log")
        for entry in entries:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(entry["text"])
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                diagnoses = diagnose_file(path, rules, None)
            row = {"id": entry["id"], "category": entry["category"], "alt_category": entry["alt_category"],
                   "disputed": entry["disputed"], "rules": "none", "open": False, "features": {}}
            if diagnoses:
                diagnosis = diagnoses[0]
                rule = rules.get(diagnosis.match.rule_id) if diagnosis.match.rule_id else None
                row["rules"] = diagnosis.match.category
                row["open"] = rule is None or rule.priority <= LAST_RESORT_PRIORITY
                row["features"] = {kind: sorted(features(diagnosis.crash, diagnosis.evidence, (kind,)))
                                   for kind in KINDS}
            rows.append(row)
    return rows


def _features(row: dict, kinds) -> set[str]:
    found: set[str] = set()
    for kind in kinds:
        found.update(row["features"].get(kind, ()))
    return found


def fit(rows: list[dict], kinds, alpha: float, min_docs: int, threshold: float) -> dict:
    """The model (integer counts) from labelled, undisputed rows with features."""
    from ddtreed.rules.scorer import FORMAT

    train = [row for row in rows if row["features"] and row["category"] and not row["disputed"]]
    document_frequency: Counter = Counter()
    for row in train:
        document_frequency.update(_features(row, kinds))
    vocabulary = {f for f, n in document_frequency.items() if n >= min_docs}
    counts: dict[str, Counter] = defaultdict(Counter)
    docs: Counter = Counter()
    for row in train:
        docs[row["category"]] += 1
        counts[row["category"]].update(_features(row, kinds) & vocabulary)
    return {
        "format": FORMAT,
        "feature_kinds": list(kinds),
        "alpha": alpha,
        "min_docs": min_docs,
        "threshold": threshold,
        "class_docs": dict(sorted(docs.items())),
        "counts": {c: dict(sorted(counts[c].items())) for c in sorted(docs)},
    }


def folds(rows: list[dict]) -> list[int]:
    """A fold number per row, stratified by category, from a fixed seed."""
    by_category: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        by_category[row["category"] or ""].append(index)
    assigned = [0] * len(rows)
    rng = random.Random(SEED)
    offset = 0
    for category in sorted(by_category):
        members = sorted(by_category[category], key=lambda i: rows[i]["id"])
        rng.shuffle(members)
        for position, index in enumerate(members):
            assigned[index] = (position + offset) % FOLDS
        offset += len(members)
    return assigned


def _right(row: dict, predicted: str) -> bool:
    return predicted in {row["category"], row["alt_category"]} - {None}


def cross_validate(rows: list[dict]) -> dict:
    """Held-out-fold accuracy of rules+scorer for every setting; the rules alone for comparison."""
    from ddtreed.rules.scorer import Scorer, Verdict

    assigned = folds(rows)
    rules_right = sum(_right(row, row["rules"]) for row in rows)
    results = []
    for kinds, alpha, min_docs in product(KIND_SETS, ALPHAS, MIN_DOCS):
        verdicts: dict[int, tuple[str, float]] = {}
        scorers = {}
        for fold in range(FOLDS):
            model = fit([row for row, f in zip(rows, assigned) if f != fold], kinds, alpha, min_docs, 0.5)
            scorer = scorers[fold] = Scorer(model, "<cv>")
            for index, (row, f) in enumerate(zip(rows, assigned)):
                kind = next((f for f in row["features"].get("kind", ()) if f.startswith("kind:")), None)
                if scorer.crash_kinds and kind is not None and kind[len("kind:"):] not in scorer.crash_kinds:
                    continue
                if f == fold and row["open"]:
                    verdict = scorer.score(_features(row, kinds))
                    verdicts[index] = (verdict.category, verdict.confidence)
        for threshold in THRESHOLDS:
            right = changed = fixed = broken = 0
            for index, row in enumerate(rows):
                predicted = row["rules"]
                if index in verdicts:
                    category, confidence = verdicts[index]
                    verdict = Verdict(category, confidence, (), None, threshold)
                    if scorers[assigned[index]].replaces(None if row["rules"] == "unknown" else row["rules"],
                                                         verdict):
                        predicted = category
                ok, before = _right(row, predicted), _right(row, row["rules"])
                right += ok
                changed += predicted != row["rules"]
                fixed += ok and not before
                broken += before and not ok
            results.append({"kinds": list(kinds), "alpha": alpha, "min_docs": min_docs, "threshold": threshold,
                            "right": right, "fixed": fixed, "broken": broken, "changed": changed})
    # Best held-out accuracy; among equals, fewer reports broken, then the higher threshold (surer
    # verdicts), then fewer kinds of feature, then more smoothing.
    best = max(results, key=lambda r: (r["right"], -r["broken"], r["threshold"], -len(r["kinds"]), r["alpha"]))
    return {"folds": FOLDS, "seed": SEED, "n": len(rows), "rules_alone_right": rules_right,
            "open": sum(row["open"] for row in rows), "best": best, "table": results}


def build(corpus: Path = CORPUS) -> tuple[dict, dict]:
    """(model, cross-validation report) from the development part."""
    rows = observe(development_entries(corpus))
    cv = cross_validate(rows)
    best = cv["best"]
    model = fit(rows, tuple(best["kinds"]), best["alpha"], best["min_docs"], best["threshold"])
    ids = sorted(row["id"] for row in rows if row["features"] and row["category"] and not row["disputed"])
    model["trained_on"] = {
        "part": "dev", "reports": len(ids),
        "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
        "ids": ids,
    }
    model["cross_validation"] = {
        "folds": cv["folds"], "seed": cv["seed"], "n": cv["n"], "open": cv["open"],
        "rules_alone": {"right": cv["rules_alone_right"], "accuracy": round(cv["rules_alone_right"] / cv["n"], 4)},
        "rules_and_scorer": {"right": best["right"], "accuracy": round(best["right"] / cv["n"], 4),
                             "fixed": best["fixed"], "broken": best["broken"]},
    }
    return model, cv


def render(model: dict) -> str:
    return json.dumps(model, indent=0, sort_keys=True, ensure_ascii=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the shipped model differs")
    parser.add_argument("--report", action="store_true", help="print the cross-validation table")
    parser.add_argument("--out", default=None, help="where to write (default: the shipped model)")
    args = parser.parse_args()
    from ddtreed.rules.scorer import shipped_path

    model, cv = build()
    text = render(model)
    target = Path(args.out) if args.out else shipped_path()
    if args.report:
        table = sorted(cv["table"], key=lambda r: -r["right"])[:15]
        print(json.dumps({k: v for k, v in cv.items() if k != "table"} | {"top": table}, indent=1))
    if args.check:
        same = target.exists() and target.read_text(encoding="utf-8") == text
        print(f"{target}: {'matches' if same else 'DIFFERS from'} what the development part builds")
        return 0 if same else 1
    if not args.report or args.out:
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}: {model['cross_validation']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
