"""Build ddtreed/data/evidence-scorer.json from the DEVELOPMENT part of tests/corpus only.

    PYTHONPATH=$PWD python scripts/train_evidence_scorer.py          # rebuild the shipped model
    PYTHONPATH=$PWD python scripts/train_evidence_scorer.py --check  # exit 1 when it differs
    PYTHONPATH=$PWD python scripts/train_evidence_scorer.py --report # the cross-validation table (JSON)
    PYTHONPATH=$PWD python scripts/train_evidence_scorer.py --by-file  # the shipped settings, a file held out at a time

Reports whose id tests/corpus/split.json marks `test` are skipped when their line is read, before
their text is used for anything. Each development report is diagnosed by the rules alone, through
`diagnose_file` (the path `ddtreed diagnose` takes); the crash that diagnosis is on gives the
features (`ddtreed.rules.scorer.features`). The settings (which kinds of feature, smoothing, the
minimum number of reports a feature must occur in, cut-off copies, the temperature, the two
thresholds) are chosen by stratified K-fold cross-validation within the development part (see
`cross_validate`): for each fold the scorer is trained without the fold and judged on it, alone
and as `ddtreed diagnose` would judge it (the rules' category, replaced by the scorer's where the
rules left the crash open and the scorer is sure enough). The model is then fitted on the whole
development part with the chosen settings. Counts are integers and every list is sorted, so the
same corpus and code give the same bytes.

The model depends on what the assembler and the rules make of each report: after changing them,
rerun this script and commit the model with the change (tests/test_evidence_scorer.py checks it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import math
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
                "public-e.jsonl", "public-f.jsonl", "public-g.jsonl", "public-h.jsonl", "public-i.jsonl",
                "public-j.jsonl", "public-k.jsonl", "public-l.jsonl")
FOLDS = 5
SEED = 20261201
BASE = ("exception", "family", "message", "phase", "kind")
KIND_SETS = (
    BASE,
    BASE + ("lines",),
    BASE + ("frames",),
    BASE + ("packages", "innermost"),
    BASE + ("packages", "innermost", "functions"),
    BASE + ("packages", "innermost", "bigrams"),
    BASE + ("packages", "innermost", "functions", "bigrams"),
    BASE + ("packages", "innermost", "lines"),
    BASE + ("packages", "innermost", "bigrams", "shingles"),
)
ALPHAS = (0.1, 0.3, 1.0)
MIN_DOCS = (1, 2)
# Also train on each report's stack as a paste cut off before its exception line would show it
# (the outer two thirds of the frames, no exception, no message): many real reports are cut so.
AUGMENT = (False, True)
TEMPERATURES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
# Not below 0.5 (calibrated): under it the scorer would outvote the rules' `other` on a verdict it
# thinks more likely wrong than right.
THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
# The bar for naming `other` where no rule matched at all (`unknown` otherwise). Not below 0.5 either:
# `unknown` says that nothing here knows the crash, and a guess the scorer itself rates less likely
# right than wrong must not replace that (1.0: never).
OTHER_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
CUT_OFF = "traceback cut off before its exception line"


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
            kept.append({"id": entry["id"], "file": name, "category": entry.get("category"),
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
    from ddtreed.rules.model import CrashView
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
            row = {"id": entry["id"], "file": entry.get("file"), "category": entry["category"],
                   "alt_category": entry["alt_category"],
                   "disputed": entry["disputed"], "rules": "none", "open": False, "features": {},
                   "cut_features": {}}
            if diagnoses:
                diagnosis = diagnoses[0]
                rule = rules.get(diagnosis.match.rule_id) if diagnosis.match.rule_id else None
                row["rules"] = diagnosis.match.category
                row["open"] = rule is None or rule.priority <= LAST_RESORT_PRIORITY
                row["features"] = {kind: sorted(features(diagnosis.crash, diagnosis.evidence, (kind,)))
                                   for kind in KINDS}
                cut = cut_off(diagnosis.crash)
                if cut is not None:
                    evidence = CrashView.of(cut).evidence
                    row["cut_features"] = {kind: sorted(features(cut, evidence, (kind,))) for kind in KINDS}
            rows.append(row)
    return rows


def cut_off(crash):
    """The crash as a paste cut off before its exception line shows it: the outer two thirds of
    its frames, no exception, no message; None when it has no exception or too few frames."""
    if crash.kind != "traceback" or crash.exception is None or len(crash.frames) < 2:
        return None
    return dataclasses.replace(crash, exception=None, message=CUT_OFF, frames=crash.frames[:2 * len(crash.frames) // 3],
                               wrapper=None, inner_exception=None, inner_message=None, chained=())


def _features(row: dict, kinds, which: str = "features") -> set[str]:
    found: set[str] = set()
    for kind in kinds:
        found.update(row[which].get(kind, ()))
    return found


def fit(rows: list[dict], kinds, alpha: float, min_docs: int, threshold: float, augment: bool = False,
        temperature: float = 1.0, other_threshold: float = 1.0) -> dict:
    """The model (integer counts) from labelled, undisputed rows with features (and, with
    `augment`, each one's cut-off copy as a report of its own)."""
    from ddtreed.rules.scorer import FORMAT

    train = []
    for row in rows:
        if row["features"] and row["category"] and not row["disputed"]:
            train.append((row["category"], _features(row, kinds)))
            if augment and row.get("cut_features"):
                train.append((row["category"], _features(row, kinds, "cut_features")))
    document_frequency: Counter = Counter()
    for _, found in train:
        document_frequency.update(found)
    vocabulary = {f for f, n in document_frequency.items() if n >= min_docs}
    counts: dict[str, Counter] = defaultdict(Counter)
    docs: Counter = Counter()
    for category, found in train:
        docs[category] += 1
        counts[category].update(found & vocabulary)
    return {
        "format": FORMAT,
        "feature_kinds": list(kinds),
        "alpha": alpha,
        "min_docs": min_docs,
        "augment": augment,
        "temperature": temperature,
        "threshold": threshold,
        "other_threshold": other_threshold,
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


def held_out(rows: list[dict], assigned: list[int], kinds, alpha: float, min_docs: int,
             augment: bool, count: int = FOLDS) -> dict[int, dict[str, float]]:
    """Each row's uncalibrated log scores per class from the scorer trained without its fold
    (rows without features, or of a crash kind the fold's scorer never saw, have none)."""
    from ddtreed.rules.scorer import Scorer

    scores: dict[int, dict[str, float]] = {}
    for fold in range(count):
        model = fit([row for row, f in zip(rows, assigned) if f != fold], kinds, alpha, min_docs, 0.5, augment)
        scorer = Scorer(model, "<cv>")
        for index, (row, f) in enumerate(zip(rows, assigned)):
            if f != fold or not row["features"]:
                continue
            kind = next((k for k in row["features"].get("kind", ()) if k.startswith("kind:")), None)
            if scorer.crash_kinds and kind is not None and kind[len("kind:"):] not in scorer.crash_kinds:
                continue
            scores[index] = scorer.log_scores(_features(row, kinds))
    return scores


def _posterior(scores: dict[str, float], temperature: float) -> tuple[str, float, dict[str, float]]:
    best = min(scores, key=lambda c: (-scores[c], c))
    exp = {c: math.exp((value - scores[best]) / temperature) for c, value in scores.items()}
    norm = sum(exp.values())
    return best, exp[best] / norm, {c: value / norm for c, value in exp.items()}


def log_loss(rows: list[dict], scores: dict[int, dict[str, float]], temperature: float) -> float:
    """Mean held-out -log P(true category) over the labelled, undisputed rows scored."""
    total, n = 0.0, 0
    for index, by_class in scores.items():
        row = rows[index]
        if not row["category"] or row["disputed"]:
            continue
        _, _, posterior = _posterior(by_class, temperature)
        total -= math.log(max(posterior.get(row["category"], 0.0), 1e-6))
        n += 1
    return total / max(n, 1)


def with_scorer(rows: list[dict], scores: dict[int, dict[str, float]], temperature: float,
                threshold: float, other_threshold: float) -> dict:
    """How `ddtreed diagnose` would judge each row: the rules' category, replaced by the scorer's
    where the rules left the row open and the scorer's calibrated confidence reaches `threshold`."""
    from ddtreed.rules.scorer import Scorer, Verdict

    right = changed = fixed = broken = 0
    for index, row in enumerate(rows):
        predicted = row["rules"]
        if row["open"] and index in scores:
            category, confidence, _ = _posterior(scores[index], temperature)
            verdict = Verdict(category, confidence, (), None, other_threshold if category == "other" else threshold)
            if Scorer.replaces(None if row["rules"] == "unknown" else row["rules"], verdict):
                predicted = category
        ok, before = _right(row, predicted), _right(row, row["rules"])
        right += ok
        changed += predicted != row["rules"]
        fixed += ok and not before
        broken += before and not ok
    return {"right": right, "fixed": fixed, "broken": broken, "changed": changed}


def as_if_open(rows: list[dict], scores: dict[int, dict[str, float]], temperature: float,
               threshold: float) -> int:
    """Reports gained minus lost if the rules had left every development report at the catch-all
    `other` (as they do for a wording they were never written for): each specific verdict at or
    above `threshold` gains a report it names rightly and loses one whose truth is `other`."""
    net = 0
    for index, by_class in scores.items():
        row = rows[index]
        category, confidence, _ = _posterior(by_class, temperature)
        if not row["category"] or category == "other" or confidence < threshold:
            continue
        net += 1 if _right(row, category) else -1 if _right(row, "other") else 0
    return net


def cross_validate(rows: list[dict]) -> dict:
    """Every setting judged on held-out folds of the development part, in three steps:

    1. the model (which kinds of feature, smoothing, minimum document count, cut-off copies): the
       scorer's own held-out accuracy on every development report (`alone`), a sample of all 415
       rather than the few dozen the rules leave open (those are what is left after rules were
       written against the same reports, a biased and small sample);
    2. its calibration: the temperature with the least held-out log-loss;
    3. the threshold: the most reports right as `ddtreed diagnose` judges them (rules, and the
       scorer where they leave a report open), fewer broken; among equals, the most gained if the
       rules had known none of the wordings (`as_if_open`: every report scored, 415 not 62), then
       the higher threshold.
    Ties in step 1 go to the better rules+scorer figure, then fewer kinds, then more smoothing. Step 1
    considers only the settings whose step-3 choice breaks no report the rules alone get right, when
    there are any (the scorer advises where the rules leave a report open, never against them)."""
    assigned = folds(rows)
    rules_right = sum(_right(row, row["rules"]) for row in rows)
    labelled = [index for index, row in enumerate(rows) if row["features"] and row["category"]]
    results = []
    for kinds, alpha, min_docs, augment in product(KIND_SETS, ALPHAS, MIN_DOCS, AUGMENT):
        scores = held_out(rows, assigned, kinds, alpha, min_docs, augment)
        alone = sum(_right(rows[i], _posterior(scores[i], 1.0)[0]) for i in labelled if i in scores)
        temperature = min(TEMPERATURES, key=lambda t: (round(log_loss(rows, scores, t), 6), t))
        by_threshold = [{"threshold": threshold, "as_if_open": as_if_open(rows, scores, temperature, threshold)}
                        | with_scorer(rows, scores, temperature, threshold, 1.0) for threshold in THRESHOLDS]
        chosen = max(by_threshold, key=lambda r: (r["right"], -r["broken"], r["as_if_open"], r["threshold"]))
        by_other = [{"other_threshold": bar} | with_scorer(rows, scores, temperature, chosen["threshold"], bar)
                    for bar in OTHER_THRESHOLDS]
        chosen = max(by_other, key=lambda r: (r["right"], -r["broken"], r["other_threshold"])) | {
            "threshold": chosen["threshold"], "as_if_open": chosen["as_if_open"]}
        # Calibration check: held out, how often a specific verdict at or above the threshold is right.
        verdicts = {i: _posterior(scores[i], temperature)[:2] for i in labelled if i in scores}
        sure = [i for i, (category, confidence) in verdicts.items()
                if category != "other" and confidence >= chosen["threshold"]]
        precision = round(sum(_right(rows[i], verdicts[i][0]) for i in sure) / max(len(sure), 1), 4)
        results.append({"kinds": list(kinds), "alpha": alpha, "min_docs": min_docs, "augment": augment,
                        "sure": len(sure), "sure_precision": precision,
                        "alone": alone, "temperature": temperature,
                        "log_loss": round(log_loss(rows, scores, temperature), 4)} | chosen
                       | {"thresholds": by_threshold, "other_thresholds": by_other})
    # The scorer only advises where the rules leave a report open: settings that break a report the
    # rules get right on held-out folds are chosen only when every setting does (public-l's
    # development reports made the most accurate setting break one).
    safe = [r for r in results if r["broken"] == 0] or results
    best = max(safe, key=lambda r: (r["alone"], r["right"], -r["broken"], -len(r["kinds"]), r["alpha"],
                                    -r["min_docs"], not r["augment"]))
    return {"folds": FOLDS, "seed": SEED, "n": len(rows), "labelled": len(labelled),
            "rules_alone_right": rules_right, "open": sum(row["open"] for row in rows), "best": best,
            "table": results}


def by_source_file(model: dict, corpus: Path = CORPUS) -> dict:
    """The shipped settings judged with each corpus file of the development part held out in turn
    (reports of one file were collected together, from one set of threads: a harder and more honest
    test of wordings the scorer has not seen than folds that mix every file), beside the stratified
    folds, for the scorer alone and as `ddtreed diagnose` uses it."""
    rows = observe(development_entries(corpus))
    kinds, alpha, min_docs, augment = (tuple(model["feature_kinds"]), model["alpha"], model["min_docs"],
                                       model["augment"])
    files = sorted({row["file"] for row in rows})
    schemes = {"stratified_folds": (folds(rows), FOLDS),
               "one_file_held_out": ([files.index(row["file"]) for row in rows], len(files))}
    labelled = [index for index, row in enumerate(rows) if row["features"] and row["category"]]
    report: dict = {"n": len(rows), "files": files, "rules_alone_right": sum(_right(row, row["rules"]) for row in rows)}
    for name, (assigned, count) in schemes.items():
        scores = held_out(rows, assigned, kinds, alpha, min_docs, augment, count)
        report[name] = {
            "scorer_alone_right": sum(_right(rows[i], _posterior(scores[i], 1.0)[0]) for i in labelled if i in scores),
            "of": len(labelled), "log_loss": round(log_loss(rows, scores, model["temperature"]), 4),
            "by_threshold": [{"threshold": t, "as_if_open": as_if_open(rows, scores, model["temperature"], t)}
                             | with_scorer(rows, scores, model["temperature"], t, model["other_threshold"])
                             for t in THRESHOLDS]}
    return report


def build(corpus: Path = CORPUS) -> tuple[dict, dict]:
    """(model, cross-validation report) from the development part."""
    rows = observe(development_entries(corpus))
    cv = cross_validate(rows)
    best = cv["best"]
    model = fit(rows, tuple(best["kinds"]), best["alpha"], best["min_docs"], best["threshold"], best["augment"],
                best["temperature"], best["other_threshold"])
    ids = sorted(row["id"] for row in rows if row["features"] and row["category"] and not row["disputed"])
    model["trained_on"] = {
        "part": "dev", "reports": len(ids),
        "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
        "ids": ids,
    }
    model["cross_validation"] = {
        "folds": cv["folds"], "seed": cv["seed"], "n": cv["n"], "open": cv["open"],
        "scorer_alone": {"right": best["alone"], "of": cv["labelled"], "log_loss": best["log_loss"],
                         "temperature": best["temperature"], "specific_verdicts_at_threshold": best["sure"],
                         "their_precision": best["sure_precision"]},
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
    parser.add_argument("--by-file", action="store_true",
                        help="print the shipped settings judged one corpus file held out at a time (JSON)")
    args = parser.parse_args()
    from ddtreed.rules.scorer import shipped_path

    if args.by_file:
        print(json.dumps(by_source_file(json.loads(shipped_path().read_text(encoding="utf-8")))))
        return 0

    model, cv = build()
    text = render(model)
    target = Path(args.out) if args.out else shipped_path()
    if args.report:
        table = [{k: v for k, v in row.items() if k != "thresholds"}
                 for row in sorted(cv["table"], key=lambda r: (-r["alone"], -r["right"]))]
        print(json.dumps({k: v for k, v in cv.items() if k != "table"} | {"table": table}))
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
