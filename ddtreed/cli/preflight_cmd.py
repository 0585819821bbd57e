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
            "Evaluate the launch argv and the installed sglang against the preflight checks. "
            "Exit 0: nothing would crash; 1: at least one would-crash finding; 2: bad config."
        ),
    )
    parser.add_argument("--config", metavar="FILE", required=True,
                        help="ddtreed TOML config (see examples/founding-ddtree-tp8.toml)")
    add_json(parser)
    add_state_dir(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..context import service_context
    from ..host import LocalHost
    from ..logsetup import configure
    from ..preflight import run_preflight, would_crash

    # The report is the output; the library's own log lines (probe trouble) go to stderr.
    configure(json_output=False, level="warning", stream=sys.stderr)
    config = load_config(args.config)
    if args.state_dir:
        config = config.with_state_dir(args.state_dir)
    host = _host_for(config, LocalHost())
    context = service_context(config, host)
    findings = run_preflight(config, context, host, engine=_engine(config, host), force=True)
    if args.json:
        print_json({
            "config": config.source, "sglang_version": context.sglang_version,
            "site_packages": context.site_packages, "findings": [f.to_dict() for f in findings],
        })
    else:
        print(_summary(context))
        for finding in findings:
            print(finding.render())
        if not findings:
            print("no findings: nothing known would crash at launch")
    return 1 if would_crash(findings) else 0


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
