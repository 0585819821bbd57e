"""The message prefilter (`ddtreed.rules.prefilter`) changes no diagnosis: it only spares the
evaluation of rules that could not match.

Its correctness proof, on every text the project has: the filter never leaves out a message pattern
whose own `search` matches, on every error message of the corpus (both parts), the real
0.5.16 logs, the founding log and both phrasing files; and every diagnosis `ddtreed diagnose`'s own
path makes of them is identical (match, parameters, signature, confidence, outvoted rules) with and
without the filter. The held-out corpus part is compared in aggregate only: a count of differences,
never an entry's text or result (issue 15's discipline).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.paths import shipped
from ddtreed.rules import RuleSet, load_rules
from ddtreed.rules.model import CrashView
from ddtreed.rules.prefilter import MessagePrefilter
from ddtreed.rules.regex import compile_rule_pattern
from ddtreed.tracebacks import assemble_lines
from ddtreed.tracebacks.assembler import unreverse

from phrasing_helpers import other_texts

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
CORPUS_FILES = ("sglang-crashes.jsonl", "public-a.jsonl", "public-b.jsonl", "public-c.jsonl", "public-d.jsonl",
                "public-e.jsonl")
RULES = load_rules([shipped("rules")])
FILTERED = RuleSet(RULES.rules)
PLAIN = RuleSet(RULES.rules, prefilter=False)


def corpus_texts(part: str) -> list[str]:
    split = json.loads((CORPUS / "split.json").read_text())
    texts = []
    for name in CORPUS_FILES:
        path = CORPUS / name
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                if (split.get(entry["id"]) == "test") == (part == "test"):
                    texts.append(entry.get("text") or entry.get("log") or "")
    return texts


def messages(texts: list[str]) -> list[str]:
    """Every error message (inner, final, causes) of every crash assembled from the texts."""
    found = []
    for text in texts:
        for group in assemble_lines(unreverse(text.splitlines()), "x"):
            for crash in group:
                found += [error.message for error in CrashView.of(crash).errors]
    return found


_OWN: dict[str, object] = {}


def own_program(text: str):
    """The pattern compiled on its own (the rules search with the filter's program of it)."""
    if text not in _OWN:
        _OWN[text] = compile_rule_pattern(text)
    return _OWN[text]


def verdicts_differ(prefilter: MessagePrefilter, message: str) -> set[int]:
    """Patterns whose own search finds `message` but that the filter leaves out (the filter
    returns potential matches: a superset, never fewer)."""
    through_filter = set(prefilter.matching(message))
    own_search = {index for index, pattern in enumerate(prefilter.patterns)
                  if own_program(pattern.pattern).search(message)}
    return own_search - through_filter


@pytest.fixture
def no_budget(monkeypatch):
    """The 2 s diagnosis budget is a wall-clock cut-off: off here, so a slow box cannot make the
    two sides decide differently."""
    monkeypatch.setattr(RuleSet.diagnose, "__defaults__", (None, 1e9))
    monkeypatch.setattr(RuleSet._best_for, "__defaults__", (1e9,))


def test_the_filter_holds_every_message_pattern_of_the_shipped_rules():
    prefilter = FILTERED._prefilter
    assert prefilter is not None and prefilter.enabled
    wanted = {pattern.pattern for rule in RULES.rules for pattern in rule.conditions.messages}
    assert {pattern.pattern for pattern in prefilter.patterns} == wanted
    assert prefilter.filtered == {rule.id for rule in RULES.rules if rule.conditions.messages}


def test_the_filter_never_leaves_out_a_pattern_whose_own_search_matches():
    prefilter = FILTERED._prefilter
    found = messages(corpus_texts("dev") + other_texts())
    assert len(found) > 300
    wrong = {message[:120]: sorted(prefilter.patterns[i].pattern for i in verdicts_differ(prefilter, message))
             for message in found if verdicts_differ(prefilter, message)}
    assert not wrong


def test_the_filter_never_leaves_out_a_match_on_the_held_out_part_in_aggregate():
    prefilter = FILTERED._prefilter
    found = messages(corpus_texts("test"))
    assert found
    assert sum(1 for message in found if verdicts_differ(prefilter, message)) == 0


def test_verdicts_on_texts_made_from_the_patterns_own_literals():
    # Near misses: each pattern's text, its lower and upper case, cut in half: the atoms are
    # there or half there, the patterns around them decide.
    prefilter = FILTERED._prefilter
    texts = []
    for pattern in prefilter.patterns:
        raw = pattern.pattern.replace("\\", "")
        texts += [raw, raw.lower(), raw.upper(), raw[: len(raw) // 2], "x " + raw[len(raw) // 2:] + " y"]
    assert not [text for text in texts if verdicts_differ(prefilter, text)]


def diagnoses(rules: RuleSet, texts: list[str]) -> list:
    return [diagnose_lines(text.splitlines(), "x", rules, None) for text in texts]


def test_diagnoses_are_identical_with_and_without_the_filter(no_budget):
    texts = corpus_texts("dev") + other_texts()
    with_filter, without = diagnoses(FILTERED, texts), diagnoses(PLAIN, texts)
    differ = [(text[:200], [d.match.rule_id for d in a], [d.match.rule_id for d in b])
              for text, a, b in zip(texts, with_filter, without) if a != b]
    assert not differ
    assert sum(1 for found in without for d in found if d.match.rule_id) > 100  # rules did match


def test_diagnoses_are_identical_on_the_held_out_part_in_aggregate(no_budget):
    texts = corpus_texts("test")
    assert texts
    assert sum(1 for a, b in zip(diagnoses(FILTERED, texts), diagnoses(PLAIN, texts)) if a != b) == 0


def test_the_founding_crash_meets_fewer_rules_and_the_same_diagnosis(no_budget):
    text = (CORPUS / "logs" / "ddtree-verify-width-8-vs-33.log").read_text()
    group = assemble_lines(text.splitlines(), "x")[0]
    view = CrashView.of(group[0])
    assert len(FILTERED._candidates(view)) < len(PLAIN._candidates(view)) / 2
    filtered, plain = FILTERED.diagnose(group), PLAIN.diagnose(group)
    assert filtered == plain and filtered.match.rule_id
    assert filtered.explanations == plain.explanations  # --explain still evaluates every rule


def test_a_rule_set_without_message_patterns_leaves_the_filter_off():
    shapes = [rule for rule in RULES.rules if not rule.conditions.messages]
    assert shapes
    prefilter = MessagePrefilter(shapes)
    assert not prefilter.enabled and prefilter.possible(CrashView.of(
        assemble_lines(["Traceback (most recent call last):", "RuntimeError: x"], "x")[0][0])) is None
