"""Rule files: validation errors name file:line: field; world-writable files are refused."""

import os
from pathlib import Path

import pytest

from ddtreed.cli import main
from ddtreed.paths import shipped
from ddtreed.records import CATEGORIES
from ddtreed.rules import RuleError, load_rules, remediation_ids_in

GOOD = '''
[[rule]]
id = "good-rule"
category = "cuda-oom"
title = "t"
meaning = "m"
diagnosis = "d {a}"
remediations = ["lower-mem-fraction-static"]
[rule.match]
message = 'out of memory (?P<a>\\d+)'
'''


def write(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o644)
    return path


def problems_for(tmp_path, text, remediation_ids=None) -> list[str]:
    write(tmp_path, text)
    with pytest.raises(RuleError) as caught:
        load_rules([tmp_path], remediation_ids)
    return caught.value.problems


def test_loads_every_shipped_rule_exactly_as_the_daemon_does():
    rules = load_rules([shipped("rules")], remediation_ids_in([shipped("remediations")]))
    assert len(rules.rules) >= 30
    used = {rule.category for rule in rules.rules}
    assert set(CATEGORIES) - used <= {"silent-corruption", "acceptance-collapse", "unknown"}


def test_a_good_file_loads(tmp_path):
    write(tmp_path, GOOD)
    assert [rule.id for rule in load_rules([tmp_path]).rules] == ["good-rule"]


def test_bad_regex_names_file_line_and_field(tmp_path):
    text = GOOD.replace("out of memory (?P<a>\\d+)", "out of (memory")
    problems = problems_for(tmp_path, text)
    assert len(problems) == 1
    assert problems[0].startswith(f"{tmp_path / 'r.toml'}:10: match.message: bad regular expression")


def test_unknown_key_names_its_line(tmp_path):
    problems = problems_for(tmp_path, GOOD.replace('title = "t"', 'title = "t"\nseverity = "high"'))
    assert problems[0].startswith(f"{tmp_path / 'r.toml'}:6: severity: unknown key")


def test_unknown_match_key_and_category(tmp_path):
    text = GOOD.replace('category = "cuda-oom"', 'category = "gpu-on-fire"').replace(
        "[rule.match]", "[rule.match]\nlogline = 'x'")
    problems = problems_for(tmp_path, text)
    assert any(":4: category: unknown category 'gpu-on-fire'" in p for p in problems)
    assert any(":10: match.logline: unknown match key" in p for p in problems)


def test_duplicate_id_points_at_the_second_definition(tmp_path):
    problems = problems_for(tmp_path, GOOD + GOOD)
    assert len(problems) == 1
    assert problems[0].startswith(f"{tmp_path / 'r.toml'}:12: id: duplicate rule id 'good-rule'")
    assert "first defined at" in problems[0] and ":2" in problems[0]


def test_unknown_remediation_id_against_the_catalog(tmp_path):
    problems = problems_for(tmp_path, GOOD, remediation_ids={"disable-cuda-graph"})
    assert problems[0].startswith(f"{tmp_path / 'r.toml'}:8: remediations: unknown remediation id "
                                  "'lower-mem-fraction-static'")


def test_bad_expression_and_unknown_name(tmp_path):
    text = GOOD.replace('diagnosis = "d {a}"', 'diagnosis = "d {a}"\nwhen = "a == blok_size"')
    assert any(":8: when: unknown name 'blok_size'" in p for p in problems_for(tmp_path, text))
    text = GOOD.replace('diagnosis = "d {a}"', 'diagnosis = "d {a}"\nwhen = "__import__(1)"')
    assert any(":8: when: bad expression" in p for p in problems_for(tmp_path, text))


def test_missing_fields_and_template_attribute_access(tmp_path):
    problems = problems_for(tmp_path, GOOD.replace('meaning = "m"\n', "").replace("{a}", "{a.__class__}"))
    assert any(":2: meaning: missing" in p for p in problems)
    problems = problems_for(tmp_path, GOOD.replace("{a}", "{a.__class__}"))
    assert any("diagnosis: template field {a.__class__} must be a plain name" in p for p in problems)


def test_precise_rule_needs_when(tmp_path):
    problems = problems_for(tmp_path, GOOD.replace('title = "t"', 'title = "t"\nprecise = true'))
    assert any("precise: a precise rule needs a `when` predicate" in p for p in problems)


def test_secondary_is_a_flag_and_names_no_remediation(tmp_path):
    not_a_flag = GOOD.replace('diagnosis = "d {a}"', 'diagnosis = "d {a}"\nsecondary = "yes"')
    assert any("secondary: must be true or false" in p for p in problems_for(tmp_path, not_a_flag))
    with_remedy = GOOD.replace('diagnosis = "d {a}"', 'diagnosis = "d {a}"\nsecondary = true')
    assert any("secondary: a secondary rule" in p for p in problems_for(tmp_path, with_remedy))
    notice = with_remedy.replace('remediations = ["lower-mem-fraction-static"]\n', "")
    write(tmp_path, notice)
    [rule] = load_rules([tmp_path]).rules
    assert rule.secondary


def test_invalid_toml_has_a_line(tmp_path):
    problems = problems_for(tmp_path, GOOD + "\n[[rule]\n")
    assert problems[0].startswith(f"{tmp_path / 'r.toml'}:12: toml:")


def test_world_writable_rule_file_is_refused_beside_other_problems(tmp_path):
    path = write(tmp_path, GOOD)
    os.chmod(path, 0o666)
    write(tmp_path, GOOD.replace('"cuda-oom"', '"nope"'), "s.toml")
    with pytest.raises(RuleError) as caught:
        load_rules([tmp_path])
    assert caught.value.problems == [
        f"{path}:0: file: refused: world-writable (mode 0666); fix with chmod o-w {path}",
        f"{tmp_path / 's.toml'}:4: category: unknown category 'nope' (known: {', '.join(CATEGORIES)})",
    ]


def test_remediation_ids_skip_files_the_catalog_would_refuse(tmp_path):
    """`rules check` never reads through a planted link (here one that would never end)."""
    (tmp_path / "remediations").mkdir()
    write(tmp_path / "remediations", 'id = "kept"\n', "kept.toml")
    (tmp_path / "remediations" / "endless.toml").symlink_to("/dev/zero")
    assert remediation_ids_in([tmp_path / "remediations"]) == {"kept"}


def test_rules_check_cli_reports_file_line(tmp_path, capsys):
    write(tmp_path, GOOD.replace('"lower-mem-fraction-static"', '"reboot-the-gpu"'))
    code = main(["rules", "check", "--rules-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{tmp_path / 'r.toml'}:8: remediations: unknown remediation id 'reboot-the-gpu'" in err


def test_rules_check_cli_passes_on_the_shipped_rules(capsys):
    assert main(["rules", "check"]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


def test_rules_check_json(tmp_path, capsys):
    import json
    write(tmp_path, GOOD + GOOD)
    assert main(["rules", "check", "--rules-dir", str(tmp_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and "duplicate rule id" in report["problems"][0]
