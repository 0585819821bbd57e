"""Rule patterns are checked in full when the rules load, and compiled only once, when first used.

The loader keeps each distinct pattern text of a load as one `RulePattern`, compiled the first time
a candidate rule searches it (the message prefilter keeps lean copies of the message patterns for
their atoms only, and compiles the few without atoms, which every crash meets, with itself).
What a user sees must not change: a pattern RE2 refuses is still refused by `rules check` in every
field, with the file, line and field; the diagnoses are the same (test_rules_prefilter.py compares
every corpus text with and without the filter; diagnose_accuracy gives the same figures).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddtreed.cli import main
from ddtreed.paths import shipped
from ddtreed.rules import RuleSet, load_rules
from ddtreed.rules.loader import parse_files
from ddtreed.rules.model import CrashView
from ddtreed.tracebacks import assemble_lines

HERE = Path(__file__).resolve().parent
FOUNDING = HERE / "corpus" / "logs" / "ddtree-verify-width-8-vs-33.log"
SINGLE = ("message", "message_absent", "wrapper", "inner_message", "prefix", "raised_in", "context")
LISTS = ("frames", "frames_absent")


def _patterns(rule, fields=SINGLE + LISTS):
    conditions = rule.conditions
    found = []
    for name in fields:
        key = {"message": "messages", "message_absent": "messages_absent"}.get(name, name)
        value = getattr(conditions, key)
        found += list(value) if isinstance(value, tuple) else ([value] if value is not None else [])
    return found


@pytest.mark.parametrize("key", SINGLE + LISTS)
def test_a_pattern_re2_refuses_is_refused_at_load_in_every_field(tmp_path, capsys, key):
    directory = tmp_path / "rules"
    directory.mkdir()
    path = directory / "bad.toml"
    value = "['foo(?=bar)']" if key in LISTS else "'foo(?=bar)'"
    path.write_text('[[rule]]\nid = "look"\ncategory = "other"\ntitle = "t"\nmeaning = "m"\n'
                    f'diagnosis = "d"\n[rule.match]\nexception = ["RuntimeError"]\n{key} = {value}\n')
    assert main(["rules", "check", "--rules-dir", str(directory)]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{path}:9: match.{key}: "), line
    assert "RE2" in line and "foo(?=bar)" in line


def test_one_pattern_object_per_distinct_text_of_a_load(tmp_path):
    path = tmp_path / "twins.toml"
    twin = ('[[rule]]\nid = "{id}"\ncategory = "other"\ntitle = "t"\nmeaning = "m"\ndiagnosis = "d"\n'
            "[rule.match]\nmessage = 'CUDA error: (?P<what>[a-z ]+)'\nframes = ['cuda_graph_runner']\n")
    path.write_text(twin.format(id="one") + twin.format(id="two"))
    one, two = parse_files([path])
    assert one.conditions.messages[0] is two.conditions.messages[0]
    assert one.conditions.frames[0] is two.conditions.frames[0]
    assert one.conditions.messages[0].groupindex == {"what": 1}
    [again, _] = parse_files([path])  # another load (a reload): its own objects
    assert again.conditions.messages[0] is not one.conditions.messages[0]


def test_patterns_compile_for_a_crashs_candidates_only():
    rules = load_rules([shipped("rules")])
    everything = {id(p): p for rule in rules.rules for p in _patterns(rule)}
    always = {rules._prefilter.patterns[i].pattern for i in rules._prefilter.matching("")}
    assert always  # patterns without atoms (catch-alls): potential for every crash, compiled with the filter
    assert {p.pattern for p in everything.values() if p.compiled} == always

    group = assemble_lines(FOUNDING.read_text().splitlines(), "x")[0]
    diagnosis = rules.diagnose(group)
    assert diagnosis.match.rule_id == "cuda-graph-shape-mismatch"
    compiled = [pattern for pattern in everything.values() if pattern.compiled]
    # Only the candidates' patterns were needed (the founding rule's among them).
    assert len(always) < len(compiled) < len(everything) / 4
    winner = rules.get(diagnosis.match.rule_id).conditions
    assert any(p.compiled for p in winner.messages) and all(p.compiled for p in winner.frames)
    assert rules.diagnose(group) == diagnosis


def test_a_candidates_message_patterns_the_prefilter_rules_out_are_not_searched():
    """A candidate rule's message patterns whose atoms are not in the error (not a potential
    match) are skipped unsearched, so never compiled; the diagnosis is the same without the filter."""
    rules = load_rules([shipped("rules")])
    group = assemble_lines(FOUNDING.read_text().splitlines(), "x")[0]
    diagnosis = rules.diagnose(group)
    prefilter = rules._prefilter
    potential = {prefilter.patterns[i].pattern for crash in group
                 for error in CrashView.of(crash).errors for i in prefilter.matching(error.message)}
    candidates = set().union(*(rules._candidates(CrashView.of(crash)) for crash in group))
    messages = {p.pattern: p for rule_id in candidates for p in rules.get(rule_id).conditions.messages}
    ruled_out = [p for text, p in messages.items() if text not in potential]
    assert ruled_out  # the founding crash's candidates carry patterns the filter rules out...
    assert not any(p.compiled for p in ruled_out)  # ...and none of them was compiled to be searched
    plain = RuleSet(rules.rules, prefilter=False).diagnose(group)
    assert (plain.match, plain.signature) == (diagnosis.match, diagnosis.signature)
