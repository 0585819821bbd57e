"""Write tests/corpus/split.json once: the new public reports split by a fixed seed, stratified by
category, about 70 % development (rules are written against it) and 30 % test (nobody tunes on it).

Only ids and labels are read. The first corpus file (sglang-crashes.jsonl) is not split: its reports
were used to write the rules, so they always belong to the development part. Re-running gives the
same split; it refuses to overwrite an existing split.json unless --force (never do that to tune).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
NEW_FILES = ("public-a.jsonl", "public-b.jsonl", "public-c.jsonl")
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    out = HERE / "split.json"
    if out.exists() and not args.force:
        print(f"{out}: exists; the split is written once", file=sys.stderr)
        return 1
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
                    return 1
                labels[entry["id"]] = entry.get("category") or "unlabelled"
    parts = split(labels)
    out.write_text(json.dumps(parts, indent=1) + "\n")
    counts = {part: sum(1 for p in parts.values() if p == part) for part in ("dev", "test")}
    print(json.dumps({"reports": len(parts), **counts, "seed": SEED}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
