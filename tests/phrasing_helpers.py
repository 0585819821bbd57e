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
