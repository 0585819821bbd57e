"""Invariance of `ddtreed diagnose` under the noise real pastes and log collectors add (JSON).

A proxy for how the diagnosis generalises that never reads the held-out part: every report of the
corpus's DEVELOPMENT part that is diagnosed right as pasted is diagnosed again after each of the
transformations of `tests/perturbations.py` (a collector's prefix on every line, colour codes,
CRLF, tabs or lost indentation, a Markdown quote or fence, SGLang's rank prefix added or taken
off, another installation's paths, other numbers or model names, a second rank printing the same
traceback), one at a time. None of them changes what failed, so each report should stay right.

Per transformation: how many reports it changes (`applicable`), how many of those stay right,
and which break (dev ids, with the category they got). Test-part reports are dropped before their
text is read. The diagnosis goes through `ddtreed diagnose`'s own path (the accuracy benchmark's
predictor: the text written to a file, `diagnose_file`), so CRLF reaches it as a file would.

    PYTHONPATH=$PWD python benchmarks/diagnose_robustness.py [--only NAME ...] [--ids] [--combined]

`--combined` runs the COMBINED table instead: several kinds of noise at once, in the order they are
added (a collector's prefix, a viewer's newest-first order, a page's lost indentation and doubled
breaks, then a quote, a fence or the issue template), counted apart from the single ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from diagnose_accuracy import CORPUS, _right, code_info, load_entries, load_split, predictor  # noqa: E402
from perturbations import COMBINED, PERTURBATIONS  # noqa: E402


def dev_entries(corpus: Path = CORPUS) -> list[dict]:
    split = load_split(corpus)
    return [entry for entry in load_entries(corpus) if split.get(entry["id"], "dev") == "dev"]


def measure(names: list[str], table_of: dict = PERTURBATIONS) -> dict:
    predict = predictor()
    started = time.perf_counter()
    entries = dev_entries()
    texts = {entry["id"]: entry.get("text") or entry.get("log") or "" for entry in entries}
    right = [entry for entry in entries if _right(entry, predict(entry["id"], texts[entry["id"]]))]
    table = {}
    for name in names:
        perturb = table_of[name]
        applicable = kept = 0
        broken = []
        for entry in right:
            changed = perturb(texts[entry["id"]])
            if changed == texts[entry["id"]]:
                continue
            applicable += 1
            predicted = predict(entry["id"], changed)
            if _right(entry, predicted):
                kept += 1
            else:
                broken.append({"id": entry["id"], "category": entry.get("category"), "predicted": predicted})
        table[name] = {"applicable": applicable, "right_before": applicable, "right_after": kept,
                       "broken": broken}
    worst = max(table, key=lambda name: len(table[name]["broken"])) if table else None
    return {"dev_reports": len(entries), "right_as_pasted": len(right),
            "broken_total": sum(len(row["broken"]) for row in table.values()),
            "most_broken_by": worst if worst and table[worst]["broken"] else None,
            "perturbations": table, "seconds": round(time.perf_counter() - started, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=sorted(PERTURBATIONS) + sorted(COMBINED), metavar="NAME",
                        help="only these transformations (default: all)")
    parser.add_argument("--ids", action="store_true", help="list the broken reports (dev ids) per transformation")
    parser.add_argument("--combined", action="store_true",
                        help="the combinations of tests/perturbations.py's COMBINED (several kinds of noise at "
                             "once) instead of the single transformations; counted on their own")
    args = parser.parse_args()
    if args.combined:
        result = measure(args.only or list(COMBINED), COMBINED)
    else:
        result = measure(args.only or list(PERTURBATIONS))
    if not args.ids:
        for row in result["perturbations"].values():
            row["broken"] = len(row["broken"])
    print(json.dumps({"code": code_info(), **result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
