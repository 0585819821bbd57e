"""Write tests/corpus/split.json once: the new public reports split by a fixed seed, stratified by
category, about 70 % development (rules are written against it) and 30 % test (nobody tunes on it).

Only ids and labels are read. The first corpus file (sglang-crashes.jsonl) is not split: its reports
were used to write the rules, so they always belong to the development part. Re-running gives the
same split; it refuses to overwrite an existing split.json unless --force (never do that to tune).

`--extend` assigns only the reports that split.json does not name yet (a corpus file grew, or a new
one was added) and never moves an existing id. The same seed and the same stratification decide:
per category, the new reports are shuffled by Random(SEED) (categories in sorted order) and the
first k go to the test part, where k brings that category's test share as close to 30 % as the new
reports allow (round(0.3 * (old + new)) - old test, clipped to 0..new). Re-running it with no new
reports changes nothing; it never looks at diagnoses.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
NEW_FILES = ("public-a.jsonl", "public-b.jsonl", "public-c.jsonl", "public-d.jsonl", "public-e.jsonl",
             "public-f.jsonl", "public-g.jsonl", "public-h.jsonl", "public-i.jsonl", "public-j.jsonl",
             "public-k.jsonl", "public-l.jsonl", "public-m.jsonl", "public-n.jsonl", "public-o.jsonl",
             "public-p.jsonl", "public-q.jsonl", "public-r.jsonl")
SEED = 20261201
TEST_SHARE = 0.3


def split(labels: dict[str, str], seed: int = SEED, share: float = TEST_SHARE) -> dict[str, str]:
    by_category: dict[str, list[str]] = defaultdict(list)
    for entry_id, category in labels.items():
        by_category[category].append(entry_id)
    rng = random.Random(seed)
    parts: dict[str, str] = {}
    for category in sorted(by_category):
        ids = sorted(by_category[category])
        rng.shuffle(ids)
        test = round(share * len(ids))
        for index, entry_id in enumerate(ids):
            parts[entry_id] = "test" if index < test else "dev"
    return dict(sorted(parts.items()))


def extend(existing: dict[str, str], labels: dict[str, str], seed: int = SEED,
           share: float = TEST_SHARE) -> dict[str, str]:
    """`existing` plus a part for every id of `labels` it lacks; existing ids keep their part."""
    old: dict[str, list[str]] = defaultdict(list)
    new: dict[str, list[str]] = defaultdict(list)
    for entry_id, category in labels.items():
        (old if entry_id in existing else new)[category].append(entry_id)
    rng = random.Random(seed)
    parts = dict(existing)
    for category in sorted(new):
        ids = sorted(new[category])
        rng.shuffle(ids)
        old_test = sum(1 for entry_id in old[category] if existing[entry_id] == "test")
        total = len(old[category]) + len(ids)
        test = min(len(ids), max(0, round(share * total) - old_test))
        for index, entry_id in enumerate(ids):
            parts[entry_id] = "test" if index < test else "dev"
    return dict(sorted(parts.items()))


def read_labels() -> dict[str, str] | None:
    labels: dict[str, str] = {}
    for name in NEW_FILES:
        path = HERE / name
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                if entry["id"] in labels:
                    print(f"{name}: duplicate id {entry['id']!r}", file=sys.stderr)
                    return None
                labels[entry["id"]] = entry.get("category") or "unlabelled"
    return labels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--extend", action="store_true",
                        help="assign only reports split.json lacks; existing ids keep their part")
    args = parser.parse_args()
    out = HERE / "split.json"
    labels = read_labels()
    if labels is None:
        return 1
    if args.extend:
        if not out.exists():
            print(f"{out}: missing; write the split first (without --extend)", file=sys.stderr)
            return 1
        existing = json.loads(out.read_text())
        gone = sorted(set(existing) - set(labels))
        if gone:
            print(f"{out}: names reports no corpus file holds: {', '.join(gone)}", file=sys.stderr)
            return 1
        parts = extend(existing, labels)
        added = {entry_id: part for entry_id, part in parts.items() if entry_id not in existing}
    else:
        if out.exists() and not args.force:
            print(f"{out}: exists; the split is written once (use --extend for new reports)", file=sys.stderr)
            return 1
        parts = split(labels)
        added = parts
    out.write_text(json.dumps(parts, indent=1) + "\n")
    counts = {part: sum(1 for p in added.values() if p == part) for part in ("dev", "test")}
    print(json.dumps({"reports": len(parts), "assigned": len(added), **counts, "seed": SEED}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
