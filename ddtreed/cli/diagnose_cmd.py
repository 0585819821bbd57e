"""`ddtreed diagnose` (offline: what the daemon would conclude) and `ddtreed rules list|check|test`."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

from .common import CliError, add_config, add_json, load_config, print_json, table


def register(commands) -> None:
    diagnose = commands.add_parser(
        "diagnose", help="diagnose crashes in SGLang log files (offline; nothing is applied)",
        description="Assemble the crashes in each log file and say what ddtreed would conclude and "
                    "try. The launch context comes from --config, else from the log's own "
                    "server_args=ServerArgs(...) line; it makes diagnoses precise. LOGFILE - reads stdin.")
    diagnose.add_argument("logfiles", nargs="+", metavar="LOGFILE")
    add_config(diagnose)
    add_json(diagnose)
    diagnose.add_argument("--explain", action="store_true",
                          help="show the evidence that decided and the rules it outvoted, how each "
                               "signature was built and why each rule matched or not")
    diagnose.add_argument(
        "--state-dir", metavar="DIR", default=None,
        help="a daemon's state dir: also say whether it has seen each signature before and whether "
             "auto-remediation is frozen for it (then the daemon would not remediate)")
    _add_rules_dir(diagnose)
    diagnose.set_defaults(handler=run_diagnose)

    rules = commands.add_parser("rules", help="list, check and test rule files")
    sub = rules.add_subparsers(dest="rules_command", metavar="SUBCOMMAND", required=True)
    listing = sub.add_parser("list", help="list the loaded rules")
    _add_rules_dir(listing)
    add_json(listing)
    listing.set_defaults(handler=run_list)
    check = sub.add_parser("check", help="validate rule files (exit 1 with file:line errors)")
    _add_rules_dir(check)
    check.add_argument("--remediations-dir", action="append", metavar="DIR",
                       help="remediation catalog to check ids against (default: the shipped one)")
    add_json(check)
    check.set_defaults(handler=run_check)
    test = sub.add_parser("test", help="show whether and how the rules of one file match a log")
    test.add_argument("rule_file", metavar="RULE_FILE")
    test.add_argument("logfile", metavar="LOGFILE")
    add_config(test)
    test.set_defaults(handler=run_test)


def _add_rules_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rules-dir", action="append", metavar="DIR",
                        help="rule directory or file (repeatable; default: the config's, else the shipped rules/)")


def _quietly(function, *args):
    """Run a library call with its (unconfigured structlog) output on stderr: stdout stays clean
    for --json consumers. Not a global configure: the caller's logging setup stays as it was."""
    with contextlib.redirect_stdout(sys.stderr):
        return function(*args)


def _rules_dirs(args: argparse.Namespace, config=None) -> list[str]:
    from ..paths import shipped

    if args.rules_dir:
        return list(args.rules_dir)
    if config is not None and config.paths.rules_dirs:
        return list(config.paths.rules_dirs)
    return [str(shipped("rules"))]


def _load_rules(dirs: list[str]):
    from ..rules import RuleError, load_rules

    try:
        return load_rules(dirs)
    except RuleError as error:
        raise CliError(str(error), exit_code=2) from None


def _context(config):
    if config is None:
        return None
    from ..context import service_context
    from ..fleet import host_for

    return service_context(config, host_for(config))


_STDIN: dict[str, list[str]] = {}


def _read_lines(path: str) -> list[str]:
    if path == "-":
        if "-" not in _STDIN:  # read once: run_diagnose checks the files before diagnosing them
            data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
            _STDIN["-"] = data.decode("utf-8", errors="replace").splitlines()
        return _STDIN["-"]
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise CliError(f"{path}: no such log file") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a log file") from None
    except OSError as error:
        raise CliError(f"{path}: cannot read: {error.strerror}") from None
    return data.decode("utf-8", errors="replace").splitlines()


def diagnose_lines(lines: list[str], source: str, rules, context) -> list:
    """Diagnoses of every crash group in a log's lines, in log order. Without a context, the one
    the log prints about itself (server_args, version) is used."""
    from ..context.from_log import context_from_log
    from ..tracebacks import assemble_lines
    from ..tracebacks.assembler import unreverse
    from ..tracebacks.collectors import uncollected
    from ..tracebacks.paste import unquote

    # A reply's Markdown quote first (`> ` before a collector's prefix: a collected log quoted),
    # then journalctl's, kubectl's, CRI's … prefix on every line, colours; then a newest-first
    # paste put back in the order it was written, for every reader below (the launch context, the
    # assembler, the quoted errors, the error lines).
    lines = unreverse(uncollected(unquote(lines)))
    if context is None:
        context = context_from_log(lines)
    groups = assemble_lines(lines, source, keep_cut_orphans=True)  # a report's headerless cut frames too
    diagnoses = [rules.diagnose(group, context) for group in groups]
    if not any(rules.primary(diagnosis) for diagnosis in diagnoses):
        # Nothing assembled, or only crashes no rule knows (a paste cut before its exception
        # line), knows only by shape, or knows only as a notice that something else failed (the
        # launcher finding a scheduler dead): the errors the text quotes may still say what failed.
        # A log the service wrote is mined only when no rule knew its crash at all.
        named = any(diagnosis.match.rule_id for diagnosis in diagnoses)
        pasted = _from_paste(lines, source, rules, context, assembled=bool(diagnoses) and not named,
                             words_over_shape=not named)
        if pasted is not None and (rules.primary(pasted) and not _repeats(pasted.crash, diagnoses)
                                   or not named and (pasted.match.rule_id or not diagnoses)):
            diagnoses = [pasted] + diagnoses[1:]
        elif named:
            diagnoses = _announced(lines, source, rules, context, diagnoses)
    elif diagnoses and all(_stack_only(rules, diagnosis) for diagnosis in diagnoses):
        # Decided only by where a traceback cut before its exception line stopped: the stack says
        # where, not what, so an error the text names in a rule's own wording (a report's title
        # quoting the error line; not a family of loose words) decides.
        pasted = _from_paste(lines, source, rules, context, assembled=True)
        if pasted is not None and rules.primary(pasted) and not _cut(pasted.crash) \
                and not _repeats(pasted.crash, diagnoses) and _worded(rules, pasted) \
                and pasted.match.category != diagnoses[0].match.category:  # else the stack's rule says more
            diagnoses = [pasted] + diagnoses[1:]
    if not any(rules.primary(diagnosis) for diagnosis in diagnoses):
        diagnoses = _error_lines(lines, source, rules, context, groups, diagnoses)
    return diagnoses


def _cut(crash) -> bool:
    return crash.kind == "traceback" and crash.exception is None and not crash.inner_message


def _worded(rules, diagnosis) -> bool:
    """Decided by a rule's own message pattern, not by a family of words."""
    rule = rules.get(diagnosis.match.rule_id) if diagnosis.match.rule_id else None
    return rule is not None and bool(rule.conditions.messages) and not rule.conditions.message_families


def _stack_only(rules, diagnosis) -> bool:
    """A diagnosis decided on a traceback cut off before its exception line (or not decisive)."""
    return not rules.primary(diagnosis) or _cut(diagnosis.crash)


def _error_lines(lines: list[str], source: str, rules, context, groups: list, diagnoses: list) -> list:
    """A log with nothing decisive assembled: the failures its error lines state outside every
    assembled crash (`Decode transfer failed … with exception KVTransferError(…)`, a glog `E…`
    record, `ERROR: …`) decide instead, when a rule knows them as a cause."""
    from ..tracebacks.error_lines import error_line_crashes

    covered = tuple((crash.first_line, crash.last_line) for group in groups for crash in group
                    if crash.source == source)
    crashes = error_line_crashes(lines, source, covered)
    if not crashes:
        return diagnoses
    diagnosis = rules.diagnose(crashes, context)
    if not rules.primary(diagnosis):
        return diagnoses
    # An error line is weaker evidence than a traceback: the process may have carried on.
    return [dataclasses.replace(diagnosis, confidence=round(diagnosis.confidence * 0.8, 2), notes=diagnosis.notes + (
        "from the error lines the log prints outside any traceback (none assembled decided)",))] + diagnoses[1:]


def _repeats(quoted, diagnoses: list) -> bool:
    """Is the error a text quotes one of its assembled crashes again (a notice's own `raise
    RuntimeError("server launch failed")` line, read with other frames)? Then it says nothing new."""
    def words(crash) -> str:
        return (crash.message or "").split("\n", 1)[0].strip().strip("\"'`()").strip()

    said = words(quoted)
    return bool(said) and any(
        words(crash) == said and quoted.exception in (crash.exception, None)
        for diagnosis in diagnoses for crash in diagnosis.crashes)


def _announced(lines: list[str], source: str, rules, context, diagnoses: list) -> list:
    """A log whose crashes a rule knows only by shape (a process died): the errors its
    crash-announcing lines name inline decide instead, when a rule knows them."""
    from ..tracebacks.paste import announced_crashes

    crashes = announced_crashes(lines, source)
    if not crashes:
        return diagnoses
    diagnosis = rules.diagnose(crashes, context)
    if not rules.primary(diagnosis):
        return diagnoses
    return [dataclasses.replace(diagnosis, notes=diagnosis.notes + (
        "from the error a crash line names inline (its traceback is not in the log)",))] + diagnoses[1:]


def _from_paste(lines: list[str], source: str, rules, context, assembled: bool = False,
                words_over_shape: bool = False):
    """A report's text with no assembled crash: the errors it quotes, else the text itself
    (also when the quoted errors are known only by shape and `words_over_shape`)."""
    from ..tracebacks.paste import paste_crashes

    candidates = paste_crashes(lines, source, force=bool(assembled))
    if not candidates:
        return None
    *mentions, whole = candidates
    diagnosis = rules.diagnose(tuple(mentions), context) if mentions else None
    if diagnosis is None or not diagnosis.match.rule_id:
        described = rules.diagnose((whole,), context)
        if described.match.rule_id or diagnosis is None:
            diagnosis = described
    elif words_over_shape and not rules.decisive(diagnosis):
        # A bare quoted `KeyError: …` known only by its shape never hides what the text says
        # in words a real rule knows.
        described = rules.diagnose((whole,), context)
        if rules.decisive(described):
            diagnosis = described
    # Words in a report are weaker evidence than a traceback the service printed.
    note = ("from the errors the text quotes (no traceback assembled)" if diagnosis.crash is not whole
            else "from the report's words alone (no error line found)")
    return dataclasses.replace(diagnosis, confidence=round(diagnosis.confidence * 0.8, 2),
                               notes=diagnosis.notes + (note,))


def diagnose_file(path: str, rules, context) -> list:
    """Diagnoses of every crash group in one log file (`-`: stdin), in log order."""
    return diagnose_lines(_read_lines(path), "<stdin>" if path == "-" else path, rules, context)


def run_diagnose(args: argparse.Namespace) -> int:
    from ..rules.explain import incident_dict, incident_text

    config = load_config(args.config)
    rules = _quietly(_load_rules, _rules_dirs(args, config))
    context = _quietly(_context, config)
    for path in args.logfiles:
        _read_lines(path)  # fail on a missing file before printing anything for it
    # Like the other commands, --config also names the state dir; with neither there is no history.
    history = _history(args.state_dir or (config.paths.state_dir if config is not None else None))
    for path in args.logfiles:
        diagnoses = _quietly(diagnose_file, path, rules, context)
        if args.json:
            incidents = [{**incident_dict(d), **history(d.signature.fingerprint)} for d in diagnoses]
            print_json({"path": path, "incidents": incidents})
            continue
        print(f"{path}: {len(diagnoses)} incident(s)" + ("" if context else _context_note(path)))
        for number, diagnosis in enumerate(diagnoses, 1):
            print("\n".join(incident_text(number, diagnosis, args.explain)))
            print("\n".join(_history_text(history(diagnosis.signature.fingerprint))))
    return 0


def _context_note(path: str) -> str:
    from ..context.from_log import context_from_log

    if context_from_log(_read_lines(path)) is not None:
        return " (launch context from the log's own server_args)"
    return " (no --config and no server_args in the log: category-level diagnosis)"


def _history(state_dir: str | None):
    """fingerprint -> {"frozen", "previous_incidents"} from a daemon's incident store (read only)."""
    if state_dir is None:
        return lambda fingerprint: {}
    from ..incidents import Store, StoreError, database_path

    try:
        store = Store(database_path(state_dir), create=False)
    except StoreError as error:
        if error.reason == "missing":  # nothing recorded yet: nothing seen, nothing frozen
            return lambda fingerprint: {"frozen": False, "previous_incidents": []}
        raise CliError(str(error)) from None

    def lookup(fingerprint: str) -> dict:
        previous = store.find_recent(fingerprint, limit=20)
        return {"frozen": store.is_frozen(fingerprint),
                "previous_incidents": [{"id": row["id"], "status": row["status"]} for row in previous]}

    return lookup


def _history_text(seen: dict) -> list[str]:
    if not seen:
        return []
    lines = []
    if seen["previous_incidents"]:
        ids = ", ".join(f"{row['id']} ({row['status']})" for row in seen["previous_incidents"])
        lines.append(f"   seen before: incidents {ids}")
    if seen["frozen"]:
        lines.append("   auto-remediation is FROZEN for this signature: the daemon would not remediate "
                     "(ddtreed remediate unfreeze SIGNATURE)")
    return lines


def run_list(args: argparse.Namespace) -> int:
    rules = _quietly(_load_rules, _rules_dirs(args))
    if args.json:
        print_json([_rule_dict(rule) for rule in rules.rules])
        return 0
    rows = [[r.id, r.category, str(r.priority), "yes" if r.precise else "", ", ".join(r.remediations) or "(advice)"]
            for r in rules.rules]
    print(table(rows, ["id", "category", "priority", "precise", "remediations"]))
    return 0


def _rule_dict(rule) -> dict:
    return {
        "id": rule.id, "category": rule.category, "title": rule.title, "meaning": rule.meaning,
        "priority": rule.priority, "precise": rule.precise,
        "when": rule.when.source if rule.when else None, "remediations": list(rule.remediations),
        "advice": rule.advice, "sglang_versions": rule.sglang_versions,
        "references": list(rule.references), "source": f"{rule.source}:{rule.line}",
    }


def run_check(args: argparse.Namespace) -> int:
    from ..paths import shipped
    from ..rules import RuleError, remediation_ids_in, rule_files
    from ..rules.loader import NoRulesError, parse_files

    dirs = _rules_dirs(args)
    files = rule_files(dirs)
    remediation_ids = remediation_ids_in(args.remediations_dir or [str(shipped("remediations"))])
    try:
        rules = _quietly(parse_files, files, remediation_ids, dirs)
    except RuleError as error:
        if args.json:
            print_json({"ok": False, "files": len(files), "problems": error.problems})
        else:
            print("\n".join(error.problems), file=sys.stderr)
        return 2 if isinstance(error, NoRulesError) else 1
    if args.json:
        print_json({"ok": True, "files": len(files), "rules": len(rules), "problems": []})
    else:
        checked = "checked against" if remediation_ids is not None else "no remediation catalog to check"
        print(f"ok: {len(rules)} rule(s) in {len(files)} file(s); remediation ids {checked}"
              + (f" {len(remediation_ids)} known ids" if remediation_ids is not None else ""))
    return 0


def run_test(args: argparse.Namespace) -> int:
    from ..rules import RuleError, RuleSet
    from ..rules.loader import parse_files
    from ..rules.model import CrashView
    from ..signature import signature_of
    from ..tracebacks import assemble_lines

    try:
        rules = RuleSet(parse_files([Path(args.rule_file)]))
    except RuleError as error:
        raise CliError(str(error), exit_code=2) from None
    context = _quietly(_context, load_config(args.config))
    groups = _quietly(assemble_lines, _read_lines(args.logfile), args.logfile)
    print(f"{args.logfile}: {len(groups)} crash group(s); {len(rules)} rule(s) from {args.rule_file}")
    matched_any = False
    for number, group in enumerate(groups, 1):
        for crash in group:
            signature = signature_of(crash)
            print(f"group {number} {crash.rank or 'untagged'} lines {crash.first_line}-{crash.last_line}: "
                  f"{crash.exception or crash.kind}: {crash.message.splitlines()[0][:160] if crash.message else ''}")
            for rule in rules.rules:
                match, explanation = rule.evaluate(CrashView.of(crash), signature.params, context)
                matched_any |= match is not None
                print(_test_line(rule.id, explanation, match))
    return 0 if matched_any else 1


def _test_line(rule_id: str, explanation, match) -> str:
    lines = [f"  {'MATCH' if match else 'no   '} {rule_id}"]
    lines.extend(f"      - {reason}" for reason in explanation.reasons)
    if match is not None:
        lines.append(f"      category:     {match.category}{' (precise)' if match.precise else ''}")
        lines.append(f"      diagnosis:    {match.diagnosis}")
        lines.append(f"      params:       {dict(match.params)}")
        lines.append(f"      remediations: {', '.join(match.remediations) or '(advice only)'}")
    return "\n".join(lines)
