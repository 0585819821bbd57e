"""`RuleSet.warm` (the daemon's warm-up, ddtreed/loop/warmup.py, calls it after its synthetic
diagnosis): it searches the catch-all message patterns of a crash's candidate rules once and builds
the evidence families' reverse programs, so that the first real crash does not build them on its
critical path. It decides nothing, records nothing, is not counted as a diagnosis, and every
diagnosis after it is the one a cold rule set makes (dev part of the corpus, the real 0.5.16 logs
and the founding log; the held-out part is not read here).
"""

from __future__ import annotations

import json
from pathlib import Path

from ddtreed.loop.warmup import SYNTHETIC_LINES
from ddtreed.paths import shipped
from ddtreed.rules import RuleSet, load_rules
from ddtreed.rules.regex import ENGINE
from ddtreed.tracebacks import assemble_lines
from ddtreed.tracebacks.assembler import unreverse

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"


def synthetic():
    return tuple(crash for group in assemble_lines(SYNTHETIC_LINES, "<warm-up>") for crash in group)


def catch_alls_of_runtime_error_rules(rules: RuleSet) -> dict[str, object]:
    """The catch-all (atom-less) message patterns of the rules a `RuntimeError` is a candidate for."""
    texts = rules._prefilter.catch_alls
    return {pattern.pattern: pattern for rule in rules.rules
            if not rule.conditions.exceptions or "RuntimeError" in rule.conditions.exceptions
            for pattern in rule.conditions.messages if pattern.pattern in texts}


def test_warm_searches_the_catch_alls_of_the_crashs_candidate_rules_and_diagnoses_nothing():
    rules = load_rules([shipped("rules")])
    expected = catch_alls_of_runtime_error_rules(rules)
    assert expected  # the shipped rules have catch-all captures such as `(?P<detail>[^\n]{1,200})`
    assert not any(pattern.warm for pattern in expected.values())
    warmed = rules.warm(synthetic())
    assert set(warmed.catch_alls) == set(expected)
    assert all(pattern.warm for pattern in expected.values())
    others = [p for rule in rules.rules for p in rule.conditions.messages if p.pattern not in expected]
    assert not any(pattern.warm for pattern in others)  # wording-specific patterns stay lazy
    assert rules.diagnosed == 0  # not a diagnosis: the warm-up's `due` still reads the rules as unused
    if ENGINE == "re2":
        assert warmed.reverse_programs > 0
        assert rules.warm(synthetic()).reverse_programs == warmed.reverse_programs  # idempotent


def test_warm_without_the_prefilter_has_no_catch_alls_to_search():
    rules = load_rules([shipped("rules")])
    assert RuleSet(rules.rules, prefilter=False).warm(synthetic()).catch_alls == ()


def dev_texts() -> list[str]:
    split = json.loads((CORPUS / "split.json").read_text())
    texts = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                if entry.get("id") in split and split[entry["id"]] != "test":
                    texts.append(entry.get("text") or entry.get("log") or "")
    logs = sorted((HERE / "fixtures" / "sglang-0.5.16").glob("*.log")) + sorted((CORPUS / "logs").glob("*.log"))
    return texts + [path.read_text(encoding="utf-8", errors="replace") for path in logs]


def readings(rules: RuleSet, groups) -> list[tuple]:
    out = []
    for group in groups:
        diagnosis = rules.diagnose(group)
        out.append((diagnosis.match, diagnosis.signature, diagnosis.confidence, diagnosis.outvoted,
                    diagnosis.decided_by, diagnosis.notes))
    return out


def test_a_warmed_rule_set_diagnoses_every_dev_crash_as_a_cold_one():
    groups = [group for text in dev_texts() for group in assemble_lines(unreverse(text.splitlines()), "x")]
    assert len(groups) > 300
    cold = readings(load_rules([shipped("rules")]), groups)
    warm = load_rules([shipped("rules")])
    warm.diagnose(synthetic())  # what the daemon's warm-up does, in its order
    warm.warm(synthetic())
    assert readings(warm, groups) == cold


def test_the_anchored_detail_captures_read_what_the_unanchored_ones_did():
    """Two rules capture `detail` with `^\\s*(?P<detail>\\S[^\\n]{0,200})` (anchored: RE2 then runs no
    DFA, whose states for this pattern depend on each message's spacing and were built anew for
    every new message on the crash path): the same `detail` as the unanchored
    `(?P<detail>\\S[^\\n]{0,200})`, on every error message of the dev part and the real logs and
    on the edge cases (leading blank lines and spaces, tabs, an empty or blank message)."""
    from ddtreed.rules.model import CrashView
    from ddtreed.rules.regex import compile_rule_pattern

    rules = load_rules([shipped("rules")])
    anchored = r"^\s*(?P<detail>\S[^\n]{0,200})"
    users = [rule.id for rule in rules.rules if any(p.pattern == anchored for p in rule.conditions.messages)]
    assert sorted(users) == ["import-error-any-wording", "raised-by-argument-checks"], users
    old, new = compile_rule_pattern(r"(?P<detail>\S[^\n]{0,200})"), compile_rule_pattern(anchored)
    messages = [error.message for text in dev_texts()
                for group in assemble_lines(unreverse(text.splitlines()), "x")
                for crash in group for error in CrashView.of(crash).errors]
    messages += ["", " ", "\n\n", " \t\n  x", "\n\nfirst line\nsecond", "\u00a0nbsp first", "x" * 300,
                 "  leading spaces then words " * 20, "\r\n\tcrlf and tab"]
    assert len(messages) > 300
    for message in messages:
        one, two = old.search(message), new.search(message)
        assert (one and one.group("detail")) == (two and two.group("detail")), message[:120]


# Whole-pattern catch-all captures, unanchored as they were written and anchored as the shipped
# rules carry them now: `^\n*` skips the blank lines an unanchored search would have skipped to
# reach the first character the capture accepts, `^` alone where the capture also accepts an empty
# match (the unanchored search then matched at 0 anyway). Only named groups reach a diagnosis
# (`model._groups`; the whole match's span, which now starts at 0, is read by nothing).
ANCHORED_CATCH_ALLS = {
    r"(?P<detail>[^\n]{1,200})": r"^\n*(?P<detail>[^\n]{1,200})",
    r"(?P<exception_text>[^\n]{1,200})": r"^\n*(?P<exception_text>[^\n]{1,200})",
    r"(?P<detail>[^\n]{0,200})": r"^(?P<detail>[^\n]{0,200})",
    r"(?P<exception_text>[^\n]{0,200})": r"^(?P<exception_text>[^\n]{0,200})",
    r"(?P<detail>.+)": r"^\n*(?P<detail>.+)",
    r"(?P<detail>.{1,200})": r"^\n*(?P<detail>.{1,200})",
    r"(?P<detail>.{1,300})": r"^\n*(?P<detail>.{1,300})",
}
EDGE_MESSAGES = ["", " ", "\n", "\n\n", "\n\nx", " \t\n  x", "\n\nfirst line\nsecond", "x\ny", "abc\n",
                 "\r\n\tcrlf and tab", "\r", "\u00a0nbsp first", "\u00e9" * 250, "x" * 300, "\n" * 5 + "y" * 350,
                 "  leading spaces then words " * 20, "\n" + "z" * 199 + "\n" + "w" * 10]


def dev_messages() -> list[str]:
    from ddtreed.rules.model import CrashView

    return [error.message for text in dev_texts()
            for group in assemble_lines(unreverse(text.splitlines()), "x")
            for crash in group for error in CrashView.of(crash).errors]


def test_the_anchored_catch_alls_read_what_the_unanchored_ones_did():
    """Every whole-pattern catch-all capture of the shipped rules is anchored (an anchored search
    with captures runs RE2's one-pass matcher, no DFA built for a new message's length on the crash
    path) and captures the same group as the unanchored pattern it replaced, on every error
    message of the dev part and the real logs and on the edge cases (empty and blank messages,
    leading newlines, CR, non-ASCII, longer than the repeat, a message of several lines)."""
    from ddtreed.rules.prefilter import MessagePrefilter
    from ddtreed.rules.regex import compile_rule_pattern

    rules = load_rules([shipped("rules")])
    shipped_patterns = [p.pattern for rule in rules.rules for p in rule.conditions.messages]
    assert not set(shipped_patterns) & set(ANCHORED_CATCH_ALLS)  # none left unanchored
    anchored_used = [pattern for pattern in shipped_patterns if pattern in ANCHORED_CATCH_ALLS.values()]
    assert len(anchored_used) >= 44, len(anchored_used)  # the 44 rules anchored in session 10
    messages = dev_messages() + EDGE_MESSAGES
    assert len(messages) > 300
    for old_text, new_text in ANCHORED_CATCH_ALLS.items():
        old, new = compile_rule_pattern(old_text), compile_rule_pattern(new_text)
        name = next(iter(old.groupindex))
        for message in messages:
            one, two = old.search(message), new.search(message)
            assert (one is None) == (two is None), (new_text, message[:120])
            assert (one and one.group(name)) == (two and two.group(name)), (new_text, message[:120])
    # Still atom-less: the prefilter keeps them as catch-alls (searched for every candidate rule's
    # crash), and the warm-up still builds them.
    assert set(anchored_used) <= MessagePrefilter(rules.rules).catch_alls
