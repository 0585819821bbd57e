"""The daemon's rule set stops a crash's candidate rules at the first priority below a match
(`RuleSet.rank_rivals = False`, set by the wiring): what it decides is what `ddtreed diagnose`
decides, on every text the project has.

Rank is priority first, and every rule of the match's own priority is still evaluated, so the
match, its parameters, the signature, the crash that decided and the evidence scorer's verdict are
the same; only the rivals (`outvoted`, the confidence's penalty for a close rival), which the
incident path never reads, are not ranked. The held-out corpus part is compared in aggregate
only (a count of differences, never an entry's text or result: issue 15's discipline).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddtreed.cli.diagnose_cmd import diagnose_lines
from ddtreed.context.from_log import context_from_log
from ddtreed.loop.wiring import build
from ddtreed.paths import shipped
from ddtreed.rules import Rule, RuleSet, load_rules
from ddtreed.tracebacks import assemble_lines

from phrasing_helpers import corpus_texts, other_texts
from supervision_helpers import make_config

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
FULL = load_rules([shipped("rules")])
LEAN = RuleSet(FULL.rules, scorer=FULL.scorer)
LEAN.rank_rivals = False


@pytest.fixture
def no_budget(monkeypatch):
    """The 2 s diagnosis budget is a wall-clock cut-off: off here, so a slow box cannot make the
    two sides decide differently."""
    monkeypatch.setattr(RuleSet.diagnose, "__defaults__", (None, 1e9))
    monkeypatch.setattr(RuleSet._best_for, "__defaults__", (1e9,))


def decisions(rules: RuleSet, text: str) -> list[tuple]:
    return [(d.match, d.signature, d.crash, d.decided_by, d.scored)
            for d in diagnose_lines(text.splitlines(), "x", rules, None)]


def test_the_daemon_decides_as_diagnose_does_on_every_development_text(no_budget):
    texts = corpus_texts("dev") + other_texts(cases=True)
    assert len(texts) > 600
    differ = [(text[:200], [d[0].rule_id for d in a], [d[0].rule_id for d in b])
              for text in texts if (a := decisions(FULL, text)) != (b := decisions(LEAN, text))]
    assert not differ
    decided = sum(1 for text in texts for d in decisions(LEAN, text) if d[0].rule_id)
    assert decided > 400  # rules did decide, not only `unknown`


def test_the_daemon_decides_as_diagnose_does_on_the_held_out_part_in_aggregate(no_budget):
    texts = corpus_texts("test")
    assert texts
    assert sum(1 for text in texts if decisions(FULL, text) != decisions(LEAN, text)) == 0


def test_the_founding_crash_meets_fewer_rules_in_the_daemon(no_budget, monkeypatch):
    text = (CORPUS / "logs" / "ddtree-verify-width-8-vs-33.log").read_text()
    group = assemble_lines(text.splitlines(), "x")[0]
    context = context_from_log(text.splitlines())  # the launch's server_args, as the daemon has them
    evaluated: list[str] = []
    original = Rule.evaluate

    def counted(self, *args, **kwargs):
        evaluated.append(self.id)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Rule, "evaluate", counted)
    full = RuleSet(FULL.rules)._diagnose(group, context, 1e9)
    full_count, evaluated[:] = len(evaluated), []
    lean_rules = RuleSet(FULL.rules)
    lean_rules.rank_rivals = False
    lean = lean_rules._diagnose(group, context, 1e9)
    assert lean.match == full.match and lean.match.rule_id == "ddtree-verify-graph-width"
    assert len(evaluated) < full_count / 2
    assert full.outvoted and not lean.outvoted  # `ddtreed diagnose --explain` still shows its rivals


def test_the_daemons_wiring_does_not_rank_rivals_and_diagnose_does(tmp_path):
    wiring = build(make_config(tmp_path, [sys.executable, "-c", "pass"]))
    assert wiring.rules.rank_rivals is False
    assert FULL.rank_rivals is True
