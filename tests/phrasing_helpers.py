"""The traceback text both phrasing files build: `module:function` frames, outermost first, under
the installed package path, then the final error line."""

SITE = "/usr/local/lib/python3.12/dist-packages/"
PLAIN = "Traceback (most recent call last):"


def traceback_text(frames, last: str, before: str = "", *, banner: str = PLAIN, line: int = 123,
                   body: str = "    something()") -> str:
    lines = [before] if before else []
    lines.append(banner)
    for frame in frames:
        module, function = frame.split(":")
        lines.append(f'  File "{SITE}{module}", line {line}, in {function}')
        lines.append(body)
    lines.append(last)
    return "\n".join(lines)


def first_category(rules, text: str) -> tuple[str, str]:
    """The category and diagnosis `ddtreed diagnose` gives a pasted text with `rules` (its first
    incident)."""
    from ddtreed.cli.diagnose_cmd import diagnose_lines

    diagnoses = diagnose_lines(text.splitlines(), "<phrasing>", rules, None)
    assert diagnoses, "nothing diagnosed"
    return diagnoses[0].match.category, diagnoses[0].match.diagnosis


def rules_reached_fewer_than_twice(rules, without, phrasings) -> set[str]:
    """The rules in `rules` but not in `without` that fewer than two of `phrasings` reach first."""
    from ddtreed.cli.diagnose_cmd import diagnose_lines

    reached: dict[str, int] = {}
    for _, text in phrasings:
        rule_id = diagnose_lines(text.splitlines(), "<phrasing>", rules, None)[0].match.rule_id
        reached[rule_id] = reached.get(rule_id, 0) + 1
    new_rules = {rule.id for rule in rules.rules} - {rule.id for rule in without.rules}
    return {rule_id for rule_id in new_rules if reached.get(rule_id, 0) < 2}


def with_and_without(new_file: str):
    """The shipped rules, and the shipped rules without the file `new_file` (what a new rule file
    is measured against)."""
    from ddtreed.paths import shipped
    from ddtreed.rules import load_rules

    rule_dir = shipped("rules")
    return (load_rules([rule_dir]),
            load_rules(sorted(path for path in rule_dir.glob("*.toml") if path.name != new_file)))


def new_rule_file_tests(rules, without, phrasings, near_misses, *, from_sources: bool = False) -> dict:
    """The three checks every new rule file gets, as test functions for the module's namespace:
    each phrasing gets its category; each near miss keeps its category with and without the new
    file; each new rule is reached first by at least two phrasings. With `from_sources` (phrasings
    taken from the libraries' own wordings) two more: without the file at least half of them get
    another category (the file is not restating older rules), and no phrasing's error line is a
    development report's text."""
    import pytest

    @pytest.mark.parametrize("expected,text", phrasings, ids=[f"{c}-{n}" for n, (c, _) in enumerate(phrasings)])
    def test_phrasing_gets_its_category(expected, text):
        got, diagnosis = first_category(rules, text)
        assert got == expected, diagnosis

    @pytest.mark.parametrize("expected,text", near_misses, ids=[f"{c}-{n}" for n, (c, _) in enumerate(near_misses)])
    def test_near_miss_keeps_its_category(expected, text):
        assert first_category(rules, text)[0] == expected
        assert first_category(without, text)[0] == expected

    def test_each_new_rule_is_reached_by_two_phrasings():
        assert rules_reached_fewer_than_twice(rules, without, phrasings) == set()

    def test_the_new_rules_add_what_the_others_missed():
        missed = [text for expected, text in phrasings if first_category(without, text)[0] != expected]
        assert len(missed) >= len(phrasings) // 2, len(missed)

    def test_no_phrasing_is_a_development_report_s_text():
        assert error_lines_in_development_reports(phrasings) == []

    tests = [test_phrasing_gets_its_category, test_near_miss_keeps_its_category,
             test_each_new_rule_is_reached_by_two_phrasings]
    if from_sources:
        tests += [test_the_new_rules_add_what_the_others_missed, test_no_phrasing_is_a_development_report_s_text]
    return {test.__name__: test for test in tests}


def error_lines_in_development_reports(phrasings) -> list[str]:
    """The error line of each phrasing (the first line that is not a banner, a frame or source)
    that some development report's text contains: a phrasing must come from a source, not a report."""
    texts = corpus_texts("dev")
    assert texts
    found = []
    for _, text in phrasings:
        lines = [line.split("Scheduler hit an exception: ")[-1] for line in text.splitlines()]
        error_line = next((line.strip() for line in lines if line.strip()
                           and not line.startswith(("[", "  File", "    ", "Traceback"))), None)
        if error_line is None:  # a traceback cut before its error line: its frames are the phrasing
            continue
        if any(error_line in report for report in texts):
            found.append(error_line)
    return found


def corpus_texts(part: str) -> list[str]:
    """The texts of every corpus report in `part` ("dev" or "test"; a report the split does not
    name counts as dev), in file order."""
    import json
    from pathlib import Path

    corpus = Path(__file__).parent / "corpus"
    split = json.loads((corpus / "split.json").read_text())
    texts = []
    for path in sorted(corpus.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                if (split.get(entry["id"], "dev") == "test") == (part == "test"):
                    texts.append(entry.get("text") or entry.get("log") or "")
    return texts


def other_texts(cases: bool = False) -> list[str]:
    """Every crash text the project has outside the corpus files: the real 0.5.16 fixtures, the
    corpus's logs, with `cases` the case files' logs, and both phrasing files' phrasings and
    near misses."""
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    logs = sorted((here / "fixtures" / "sglang-0.5.16").glob("*.log"))
    logs += sorted((here / "corpus" / "logs").glob("*.log"))
    if cases:
        logs += sorted((here / "cases").glob("*.log"))
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in logs]
    sys.path.insert(0, str(here))
    import test_diagnose_phrasings
    import test_diagnose_phrasings_e

    for module in (test_diagnose_phrasings, test_diagnose_phrasings_e):
        texts += [text for _, text in module.PHRASINGS]
        texts += [text for _, text in getattr(module, "NEAR_MISSES", [])]
    return texts
