"""`message_absent`: a rule stays off the wordings that say another reading is right, and a bad
pattern there is reported like any other (file:line: field)."""

from pathlib import Path

import pytest

from ddtreed.records import Crash, Frame
from ddtreed.rules import RuleError, load_rules

RULE = '''
[[rule]]
id = "refused-while-loading"
category = "unsupported-config"
title = "t"
meaning = "m"
diagnosis = "refused: {detail}"
[rule.match]
message = '(?P<detail>[^\\n]*is not supported[^\\n]*)'
message_absent = '[Aa]rchitectures?\\b'
'''


def rules_from(tmp_path: Path, text: str):
    path = tmp_path / "r.toml"
    path.write_text(text)
    path.chmod(0o644)
    return load_rules([tmp_path])


def crash(message: str) -> Crash:
    frame = Frame("/usr/lib/python3/dist-packages/sglang/srt/model_loader/loader.py", 10, "load_model")
    return Crash(kind="traceback", exception="ValueError", message=message, frames=(frame,))


def test_the_rule_matches_a_refusal(tmp_path):
    rules = rules_from(tmp_path, RULE)
    diagnosis = rules.diagnose((crash("The quantization method fp8 is not supported for the current GPU."),))
    assert diagnosis.match.rule_id == "refused-while-loading"


def test_the_excluded_wording_keeps_the_rule_off_and_explain_says_why(tmp_path):
    rules = rules_from(tmp_path, RULE)
    diagnosis = rules.diagnose((crash("Model architectures ['X'] are not supported for now; X is not supported"),))
    assert diagnosis.match.category == "unknown"
    [why] = [e for e in diagnosis.explanations if e.rule_id == "refused-while-loading"]
    assert not why.matched and "matches excluded" in why.reasons[-1]


def test_a_bad_pattern_in_message_absent_names_file_line_and_field(tmp_path):
    with pytest.raises(RuleError) as caught:
        rules_from(tmp_path, RULE.replace("'[Aa]rchitectures?\\b'", "'(unclosed'"))
    [problem] = caught.value.problems
    assert problem.startswith(f"{tmp_path / 'r.toml'}:") and "match.message_absent" in problem
