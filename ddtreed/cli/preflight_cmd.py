"""`ddtreed preflight`: what would crash at launch, why, and which remediation prevents it."""

from __future__ import annotations

import argparse
import sys

from .common import CliError, add_json, add_state_dir, load_config, print_json


def register(commands) -> None:
    parser = commands.add_parser(
        "preflight",
        help="predict launch crashes from the config and the installed sglang (nothing is changed)",
        description=(
            "Evaluate the launch argv, the programs it runs, the installed sglang and the "
            "directories ddtreed writes against the preflight checks. A check that cannot decide "
            "(e.g. sglang not found) is listed as skipped, with the reason. Exit 0: nothing "
            "would crash; 1: at least one would-crash finding; 2: bad config; 3 (--strict only): "
            "some checks were skipped or failed to run."
        ),
        epilog="example:\n  ddtreed preflight --config /etc/ddtreed/kimi.toml --strict",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", required=True,
                        help="ddtreed TOML config (see ddtreed/data/examples/founding-ddtree-tp8.toml)")
    add_json(parser)
    add_state_dir(parser)
    parser.add_argument("--strict", action="store_true",
                        help="exit 3 when any check was skipped or could not run (CI gates)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..context import service_context
    from ..service.host import LocalHost
    from ..ops.logsetup import configure
    from ..preflight import incomplete, run_preflight, would_crash

    # The report is the output; the library's own log lines (probe trouble) go to stderr.
    configure(json_output=False, level="warning", stream=sys.stderr)
    config = load_config(args.config)
    if args.state_dir:
        config = config.with_state_dir(args.state_dir)
    host = _host_for(config, LocalHost())
    context = service_context(config, host)
    findings = run_preflight(config, context, host, engine=_engine(config, host), force=True)
    unfinished = incomplete(findings)
    if args.json:
        print_json({
            "config": config.source, "sglang_version": context.sglang_version,
            "site_packages": context.site_packages, "complete": not unfinished,
            "findings": [f.to_dict() for f in findings if f not in unfinished],
            "skipped": [{"check": f.check, "kind": f.kind, "reason": f.why} for f in unfinished],
        })
    else:
        print(_summary(context))
        for finding in findings:
            print(finding.render())
        print(_verdict(findings, unfinished))
    if would_crash(findings):
        return 1
    return 3 if args.strict and unfinished else 0


def _verdict(findings, unfinished) -> str:
    from ..preflight import would_crash

    crashing = len(would_crash(findings))
    if crashing:
        head = f"{crashing} would-crash finding{'s' if crashing != 1 else ''}"
    elif unfinished:
        head = "no would-crash findings from the checks that ran"
    elif findings:
        head = "no would-crash findings"
    else:
        head = "no findings: nothing known would crash at launch"
    if not unfinished:
        return head
    names = ", ".join(f.check for f in unfinished)
    return (f"{head}; INCOMPLETE: {len(unfinished)} check{'s' if len(unfinished) != 1 else ''} "
            f"did not run ({names}), so they vouch for nothing")


def _summary(context) -> str:
    algorithm = context.speculative_algorithm or "no speculative decoding"
    shape = ""
    if context.block_size is not None:
        shape = f", block size {context.block_size} ({context.block_size_source})"
    if context.ddtree_budget is not None:
        shape += f", budget {context.ddtree_budget} (verify width {context.ddtree_budget + 1})"
    installed = (f"sglang {context.sglang_version or 'of unknown version'} at {context.site_packages}"
                 if context.site_packages else "sglang not found for the service's interpreter")
    return f"{algorithm}{shape}, tp {context.tp_size}, port {context.port}; {installed}"


def _host_for(config, local):
    """The service's host: this machine, or the inventory's SSH host for `service.remote`."""
    if not config.service.remote:
        return local
    from ..fleet import host_for

    try:
        return host_for(config)
    except ValueError as error:  # InventoryError: a bad inventory is a bad config
        raise CliError(str(error), exit_code=2) from None


def _engine(config, host):
    """The remediation engine, to drop remediations that cannot apply; None when unavailable."""
    try:
        from ..paths import shipped
        from ..remediation.catalog import load_remediations
        from ..remediation.engine import Engine
    except ImportError:
        return None
    dirs = config.paths.remediations_dirs or (str(shipped("remediations")),)
    try:
        return Engine(host, config.paths.state_dir, load_remediations(dirs))
    except Exception as error:  # noqa: BLE001 - a bad catalog is reported, preflight still runs
        print(f"ddtreed: warning: remediations not loaded: {error}", file=sys.stderr)
        return None
