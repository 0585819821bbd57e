"""Accuracy of `ddtreed diagnose` on the real crash corpus, per part of the fixed split (JSON).

Each report's verbatim text (`text`, or `log` for the first corpus file) is written to a file and
diagnosed through the same function `ddtreed diagnose` uses (`diagnose_file`, launch context from
the log itself where the code supports it); the first incident's category is the prediction, "none"
when nothing was assembled. A report counts as right when that is its `category` or `alt_category`.

Parts come from tests/corpus/split.json (id -> dev|test; reports not in it are dev: the first
corpus file, whose reports the rules were written from). Which code runs is whatever `ddtreed` is
importable first (PYTHONPATH), so the same script measures an older checkout too:

    PYTHONPATH=/path/to/checkout python benchmarks/diagnose_accuracy.py

The test part is printed as its overall figure only (the discipline: nobody tunes on the test
part, so its per-category figures and misses are not shown; `--misses`, which lists dev-part
misses, once printed them too and three people saw them by accident); `--test-detail` adds the
test part's per-category figures and confusion for reporting a finished change.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"
CORPUS_FILES = ("sglang-crashes.jsonl", "public-a.jsonl", "public-b.jsonl", "public-c.jsonl", "public-d.jsonl",
                "public-e.jsonl", "public-f.jsonl", "public-g.jsonl", "public-h.jsonl", "public-i.jsonl",
                "public-j.jsonl", "public-k.jsonl", "public-l.jsonl", "public-m.jsonl", "public-n.jsonl",
                "public-o.jsonl", "public-p.jsonl", "public-q.jsonl", "public-r.jsonl")


def load_entries(corpus: Path = CORPUS) -> list[dict]:
    entries = []
    for name in CORPUS_FILES:
        path = corpus / name
        if not path.exists():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError as error:
                    raise SystemExit(f"{path}:{number}: not a JSON object ({error.msg})") from None
                entry["_file"] = name
                entries.append(entry)
    return entries


def load_split(corpus: Path = CORPUS) -> dict[str, str]:
    path = corpus / "split.json"
    return json.loads(path.read_text()) if path.exists() else {}


def load_disputed(corpus: Path = CORPUS) -> dict[str, str]:
    path = corpus / "disputed.json"
    return json.loads(path.read_text()) if path.exists() else {}


def code_info() -> dict:
    import ddtreed

    where = Path(ddtreed.__file__).resolve().parent.parent
    info = {"path": str(where)}
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        info.update(commit=head or None, dirty=bool(dirty))
    except (OSError, subprocess.SubprocessError):
        info.update(commit=None, dirty=None)
    return info


def predictor():
    """A function text -> predicted category, through `ddtreed diagnose`'s own path."""
    from ddtreed.cli.diagnose_cmd import diagnose_file
    from ddtreed.paths import shipped
    from ddtreed.rules import load_rules

    with contextlib.redirect_stdout(io.StringIO()):
        rules = load_rules([shipped("rules")])
    scratch = tempfile.mkdtemp(prefix="ddtreed-accuracy-")

    def predict(entry_id: str, text: str) -> str:
        path = os.path.join(scratch, "report.log")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            diagnoses = diagnose_file(path, rules, None)
        return diagnoses[0].match.category if diagnoses else "none"

    return predict


def load_audit(corpus: Path = CORPUS) -> dict[str, dict]:
    """The blind text audit (`text-audit.json`): id -> {"verdict": "reachable"|"unreachable", "reason"}.

    Auditors saw only a report's `text` and its label, shuffled across both parts under opaque keys,
    never the diagnoser's answer nor the part: whether the text alone holds the evidence for its label.
    """
    path = corpus / "text-audit.json"
    return json.loads(path.read_text())["verdicts"] if path.exists() else {}


def audit_summary(rows: list[tuple[dict, str]], audit: dict[str, dict], unreachable: dict[str, str]) -> dict:
    """Accuracy over the audited reports whose text holds their evidence, and how the audit's
    verdicts line up with the diagnoser's results (the audit's own check, on the dev part)."""
    audited = [(entry, predicted) for entry, predicted in rows if entry["id"] in audit]
    reachable = [(entry, predicted) for entry, predicted in audited
                 if audit[entry["id"]]["verdict"] == "reachable"]
    right = sum(_right(entry, predicted) for entry, predicted in reachable)
    crossed: Counter = Counter()
    for entry, predicted in audited:
        result = ("right" if _right(entry, predicted) else
                  "miss excused as unreachable" if entry["id"] in unreachable else "miss")
        crossed[f"{audit[entry['id']]['verdict']} / {result}"] += 1
    return {"audited": len(audited), "reachable": len(reachable),
            "reachable_right": right,
            "reachable_accuracy": round(right / len(reachable), 4) if reachable else None,
            "verdict_by_result": dict(sorted(crossed.items()))}


def load_unreachable(corpus: Path = CORPUS) -> dict[str, str]:
    path = corpus / "dev-unreachable.json"
    return json.loads(path.read_text()) if path.exists() else {}


def measure(entries: list[dict], split: dict[str, str], disputed: dict[str, str]) -> dict:
    predict = predictor()
    parts: dict[str, list[tuple[dict, str]]] = defaultdict(list)
    started = time.perf_counter()
    for entry in entries:
        text = entry.get("text") or entry.get("log") or ""
        parts[split.get(entry["id"], "dev")].append((entry, predict(entry["id"], text)))
    elapsed = time.perf_counter() - started
    return {"parts": {name: _summary(rows, disputed if name == "dev" else {}) for name, rows in parts.items()},
            "rows": parts, "seconds": round(elapsed, 2)}


def _right(entry: dict, predicted: str) -> bool:
    return predicted in {entry.get("category"), entry.get("alt_category")} - {None}


def _summary(rows: list[tuple[dict, str]], disputed: dict[str, str]) -> dict:
    per: dict[str, Counter] = defaultdict(Counter)
    confusion: dict[str, Counter] = defaultdict(Counter)
    right = undisputed = undisputed_right = 0
    for entry, predicted in rows:
        label = entry.get("category") or "unlabelled"
        ok = _right(entry, predicted)
        right += ok
        per[label]["n"] += 1
        per[label]["right"] += ok
        confusion[label][predicted] += 1
        if entry["id"] not in disputed:
            undisputed += 1
            undisputed_right += ok
    total = len(rows)
    return {
        "n": total, "right": right, "accuracy": round(right / total, 4) if total else None,
        "disputed": sum(1 for entry, _ in rows if entry["id"] in disputed),
        "accuracy_undisputed": round(undisputed_right / undisputed, 4) if undisputed else None,
        "per_category": {label: {"n": c["n"], "right": c["right"], "accuracy": round(c["right"] / c["n"], 4)}
                         for label, c in sorted(per.items())},
        "confusion": {label: dict(sorted(row.items())) for label, row in sorted(confusion.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test-aggregate", action="store_true",
                        help="for the test part print only its overall accuracy (the default now; kept "
                             "for old command lines)")
    parser.add_argument("--test-detail", action="store_true",
                        help="also print the test part's per-category figures and confusion (for the "
                             "report of a finished change only: never tune on them)")
    parser.add_argument("--misses", action="store_true", help="list the dev part's misses (never the test part's)")
    parser.add_argument("--corpus", default=str(CORPUS), help="corpus directory (default: tests/corpus)")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    result = measure(load_entries(corpus), load_split(corpus), load_disputed(corpus))
    report = {"code": code_info(), "seconds": result["seconds"], "parts": result["parts"]}
    audit, unreachable = load_audit(corpus), load_unreachable(corpus)
    if not args.test_detail and "test" in report["parts"]:
        test = report["parts"]["test"]
        report["parts"]["test"] = {"n": test["n"], "right": test["right"], "accuracy": test["accuracy"]}
    if audit:
        for name, rows in result["rows"].items():
            summary = audit_summary(rows, audit, unreachable)
            if name == "test" and not args.test_detail:  # aggregate only: no per-result cross-tab
                summary.pop("verdict_by_result")
            report["parts"][name]["text_audit"] = summary
    if args.misses:
        disputed = load_disputed(corpus)
        report["dev_misses"] = [
            {"id": entry["id"], "category": entry.get("category"), "alt_category": entry.get("alt_category"),
             "predicted": predicted, "disputed": entry["id"] in disputed}
            for entry, predicted in result["rows"].get("dev", []) if not _right(entry, predicted)]
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
