"""Descriptions and examples for every command's `--help`, in one place.

Applied after all command groups registered (`apply(parser)`), so each group keeps its own
options while every help page ends with examples, like `kubectl <verb> --help`.
"""

from __future__ import annotations

import argparse

# Command path -> (description or None to keep the group's own, examples).
HELP: dict[tuple[str, ...], tuple[str | None, tuple[str, ...]]] = {
    (): (
        None,
        (
            "ddtreed demo                                  # the whole loop in about a minute",
            "ddtreed preflight --config /etc/ddtreed/kimi.toml",
            "ddtreed status --config /etc/ddtreed/kimi.toml",
            "ddtreed incidents --config /etc/ddtreed/kimi.toml --since 24h",
        ),
    ),
    ("run",): (
        None,
        (
            "ddtreed run --config /etc/ddtreed/kimi.toml",
            "ddtreed run --config kimi.toml --state-dir /tmp/ddtreed-try --log-format console",
        ),
    ),
    ("demo",): (
        None,
        (
            "ddtreed demo",
            "ddtreed demo --state-dir /tmp/demo && ddtreed incidents --state-dir /tmp/demo",
            "ddtreed demo --preflight",
            "ddtreed demo --device cuda --fault device-assert",
        ),
    ),
    ("diagnose",): (
        None,
        (
            "ddtreed diagnose /var/log/ddtreed/kimi/service.stderr.log",
            "ddtreed diagnose crash.log --config /etc/ddtreed/kimi.toml --explain",
            "ddtreed diagnose crash.log --json | jq '.incidents[].category'",
        ),
    ),
    ("rules",): (
        "Rules are TOML files that turn a parsed crash (exception, message, frames, launch "
        "context) into a diagnosis and a ladder of remediations. List the loaded rules, "
        "validate files (file:line: field: problem), or test one file against a log.",
        (
            "ddtreed rules list",
            "ddtreed rules check --rules-dir ./my-rules",
            "ddtreed rules test ./my-rules/oom.toml crash.log",
        ),
    ),
    ("rules", "list"): (None, ("ddtreed rules list --json | jq -r '.[].id'",)),
    ("rules", "check"): (None, ("ddtreed rules check --rules-dir /etc/ddtreed/rules",)),
    ("rules", "test"): (
        None,
        ("ddtreed rules test ddtreed/data/rules/cuda-graph.toml tests/corpus/logs/ddtree-verify-width-8-vs-33.log",),
    ),
    ("remediate",): (
        "Remediations are verified, reversible changes: a hash-checked patch of the installed "
        "sglang, or a launch flag / environment change. List the catalog, apply or revert "
        "one by hand, show what is applied, lift a freeze on a signature.",
        (
            "ddtreed remediate list",
            "ddtreed remediate apply ddtree-verify-graph-width --config kimi.toml --dry-run",
            "ddtreed remediate status --config kimi.toml",
        ),
    ),
    ("remediate", "list"): (None, ("ddtreed remediate list --json",)),
    ("remediate", "apply"): (
        None,
        (
            "ddtreed remediate apply ddtree-verify-graph-width --config kimi.toml --dry-run",
            "ddtreed remediate apply lower-cuda-graph-max-bs --config kimi.toml",
        ),
    ),
    ("remediate", "revert"): (None, ("ddtreed remediate revert 20261201101500-a1b2c3 --config kimi.toml",)),
    ("remediate", "status"): (None, ("ddtreed remediate status --config kimi.toml --json",)),
    ("remediate", "unfreeze"): (None, ("ddtreed remediate unfreeze 3f2a9c1e --config kimi.toml",)),
    ("remediate", "promote"): (None, ("ddtreed remediate promote --config kimi.toml",)),
    ("preflight",): (
        None,
        ("ddtreed preflight --config /etc/ddtreed/kimi.toml", "ddtreed preflight --config kimi.toml --strict --json"),
    ),
    ("canary",): (
        "The output canary: greedy prompts whose outputs are compared token by token with "
        "golden outputs recorded per (model, draft model, sglang version), with acceptance "
        "length watched too. Catches a service that answers but answers wrong.",
        (
            "ddtreed canary record --config kimi.toml   # once, on a service you trust",
            "ddtreed canary check --config kimi.toml",
            "ddtreed canary status --config kimi.toml",
        ),
    ),
    ("canary", "record"): (None, ("ddtreed canary record --config /etc/ddtreed/kimi.toml",)),
    ("canary", "check"): (None, ("ddtreed canary check --config /etc/ddtreed/kimi.toml --json",)),
    ("canary", "status"): (None, ("ddtreed canary status --state-dir /var/lib/ddtreed/kimi",)),
    ("install",): (
        None,
        (
            "ddtreed install --dry-run",
            "ddtreed install --config-name kimi --user sglang",
            "ddtreed install --root /tmp/image --config-name kimi",
        ),
    ),
    ("status",): (
        None,
        (
            "ddtreed status --config /etc/ddtreed/kimi.toml",
            "ddtreed status --state-dir /var/lib/ddtreed          # every ddtreed@ instance",
            "ddtreed status --state-dir /var/lib/ddtreed/kimi --json | jq .daemon.state",
        ),
    ),
    ("logs",): (
        None,
        (
            "ddtreed logs --config /etc/ddtreed/kimi.toml",
            "ddtreed logs --config kimi.toml -n 200 --stream stderr",
            "ddtreed logs --config kimi.toml -f",
        ),
    ),
    ("fleet",): (
        None,
        (
            "ddtreed fleet status --inventory fleet.toml",
            "ddtreed fleet incidents --inventory fleet.toml --tag h200 --json",
            "ddtreed fleet rules push ./rules --inventory fleet.toml",
        ),
    ),
    ("fleet", "status"): (None, ("ddtreed fleet status --inventory fleet.toml --hosts gpu-a,gpu-b",)),
    ("fleet", "incidents"): (None, ("ddtreed fleet incidents --inventory fleet.toml --limit 20",)),
    ("fleet", "diagnose"): (
        None,
        ("ddtreed fleet diagnose /var/log/ddtreed/kimi/service.stderr.log --inventory fleet.toml",),
    ),
    ("fleet", "logs"): (None, ("ddtreed fleet logs --inventory fleet.toml --lines 100",)),
    ("fleet", "rules"): (None, ("ddtreed fleet rules push ./rules --inventory fleet.toml",)),
    ("fleet", "rules", "push"): (None, ("ddtreed fleet rules push ./rules --inventory fleet.toml --tag canary",)),
    ("fleet", "remediate"): (
        None,
        ("ddtreed fleet remediate apply disable-cuda-graph --inventory fleet.toml --dry-run",),
    ),
    ("fleet", "remediate", "apply"): (
        None,
        ("ddtreed fleet remediate apply disable-cuda-graph --inventory fleet.toml",),
    ),
    ("fleet", "remediate", "revert"): (
        None,
        ("ddtreed fleet remediate revert 20261201101500-a1b2c3 --inventory fleet.toml",),
    ),
}


class Formatter(argparse.HelpFormatter):
    """Wraps descriptions; keeps multi-line texts (the examples) exactly as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public accessor for a parser's subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _summaries(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each subcommand's one-line `help=` (what the parent's listing shows)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help for choice in action._choices_actions if choice.help}
    return {}


def apply(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    """Give `parser` and every subcommand below it its description and an `examples:` epilog."""
    description, examples = HELP.get(path, (None, ()))
    if description:
        parser.description = description
    if examples and "examples:" not in (parser.epilog or ""):
        block = "examples:\n" + "\n".join(f"  {line}" for line in examples)
        parser.epilog = f"{parser.epilog}\n\n{block}" if parser.epilog else block
    parser.formatter_class = Formatter
    summaries = _summaries(parser)
    for name, child in _subcommands(parser).items():
        if not child.description and summaries.get(name) and summaries[name] != argparse.SUPPRESS:
            text = summaries[name]
            child.description = text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")
        apply(child, path + (name,))


def missing(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    """Commands whose --help has no example or no description (for the test)."""
    gaps = []
    if "examples:" not in (parser.epilog or ""):
        gaps.append(" ".join(path) + ": no example")
    if path and not parser.description:
        gaps.append(" ".join(path) + ": no description")
    for name, child in _subcommands(parser).items():
        gaps += missing(child, path + (name,))
    return gaps
