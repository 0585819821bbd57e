"""The public corpus files are well-formed: every record has the documented fields with the right
types, a category from the README's taxonomy, a URL that appears once across all files, and a part
in split.json. Only the records are read; nothing here runs a diagnosis."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
PUBLIC = sorted(CORPUS.glob("public-*.jsonl"))
FIELDS = ("id", "url", "reported", "sglang_version", "category", "alt_category", "exception",
          "message", "text", "root_cause", "label_basis", "notes")


def taxonomy() -> set[str]:
    """The category names of the README's taxonomy table (the first column of its rows)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Taxonomy", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z-]+)` \|", section, flags=re.MULTILINE)) - {"unknown"}


def records() -> list[tuple[str, int, dict]]:
    out = []
    for path in PUBLIC:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                out.append((path.name, number, json.loads(line)))
    return out


RECORDS = records()


def test_the_taxonomy_is_read_from_the_readme():
    assert {"cuda-oom", "nccl-error", "model-load-error", "other"} <= taxonomy()


@pytest.mark.parametrize("name,number,entry", RECORDS, ids=[f"{n}:{i}" for n, i, _ in RECORDS])
def test_record_has_the_documented_fields(name, number, entry):
    where = f"{name}:{number}"
    assert tuple(entry) == FIELDS or set(entry) == set(FIELDS), f"{where}: fields {sorted(entry)}"
    for key in ("id", "url", "category", "text", "root_cause", "label_basis"):
        assert isinstance(entry[key], str) and entry[key].strip(), f"{where}: {key}"
    for key in ("reported", "sglang_version", "alt_category", "exception", "message", "notes"):
        assert entry[key] is None or isinstance(entry[key], str), f"{where}: {key}"
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", entry["id"]), f"{where}: id {entry['id']!r}"
    assert entry["url"].startswith("https://"), f"{where}: url"
    categories = taxonomy()
    assert entry["category"] in categories, f"{where}: category {entry['category']!r}"
    assert entry["alt_category"] in categories | {None}, f"{where}: alt_category"
    assert entry["alt_category"] != entry["category"], f"{where}: alt_category repeats category"


def test_ids_and_urls_appear_once_across_all_files():
    ids = [entry["id"] for _, _, entry in RECORDS]
    urls = [entry["url"] for _, _, entry in RECORDS]
    first = CORPUS / "sglang-crashes.jsonl"
    urls += [json.loads(line)["url"] for line in first.read_text().splitlines() if line.strip()]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []
    assert sorted({u for u in urls if urls.count(u) > 1}) == []


def test_url_lists_match_their_files():
    for listing in sorted(CORPUS.glob("public-*.urls.txt")):
        corpus_file = CORPUS / listing.name.replace(".urls.txt", ".jsonl")
        listed = [line for line in listing.read_text().splitlines() if line.strip()]
        held = [json.loads(line)["url"] for line in corpus_file.read_text().splitlines() if line.strip()]
        assert sorted(listed) == sorted(held), listing.name


def test_every_public_record_has_a_part_in_the_split():
    split = json.loads((CORPUS / "split.json").read_text())
    ids = {entry["id"] for _, _, entry in RECORDS}
    assert ids == set(split)
    assert set(split.values()) <= {"dev", "test"}
