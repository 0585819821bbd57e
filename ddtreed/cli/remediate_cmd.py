"""`ddtreed remediate list|apply|revert|status|unfreeze|promote`: the catalog and what is applied."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from .common import CliError, add_config, add_json, add_state_dir, load_config, print_json, state_dir, table


def register(commands) -> None:
    group = commands.add_parser("remediate", help="list, apply, revert and show remediations")
    actions = group.add_subparsers(dest="remediate_command", metavar="ACTION")
    group.set_defaults(handler=lambda args: _usage(group))

    listing = actions.add_parser("list", help="the remediation catalog")
    _common(listing)
    listing.set_defaults(handler=cmd_list)

    apply = actions.add_parser("apply", help="apply one remediation (patch, flags or env)")
    apply.add_argument("remediation_id", metavar="ID")
    where = apply.add_mutually_exclusive_group()
    where.add_argument("--site-packages", metavar="DIR", help="the service's site-packages (patches)")
    add_config(where)
    apply.add_argument("--dry-run", action="store_true", help="print the unified diff; change nothing")
    _common(apply)
    apply.set_defaults(handler=cmd_apply)

    revert = actions.add_parser("revert", help="undo an application (exact original bytes)")
    revert.add_argument("application_id", metavar="APPLICATION_ID")
    revert.add_argument("--force", action="store_true", help="restore even if the file changed since")
    _common(revert)
    revert.set_defaults(handler=cmd_revert)

    status = actions.add_parser("status", help="what is applied where, with hashes")
    status.add_argument("--all", action="store_true", help="include reverted applications")
    _common(status)
    status.set_defaults(handler=cmd_status)

    unfreeze = actions.add_parser("unfreeze", help="let the daemon remediate a frozen signature again")
    unfreeze.add_argument("signature", metavar="SIGNATURE", help="the fingerprint (incidents show it)")
    add_config(unfreeze)
    add_state_dir(unfreeze)
    add_json(unfreeze)
    unfreeze.set_defaults(handler=cmd_unfreeze)

    promote = actions.add_parser(
        "promote", help="try the better configuration a degradation step replaced; keep it if it verifies",
        description="Undo the remembered degradation steps (flags/env), launch the service, verify it "
                    "as the daemon does, and keep the better configuration only if it verifies. Run it "
                    "while the daemon is stopped: the service is stopped again afterwards.")
    add_config(promote, required=True)
    add_state_dir(promote)
    add_json(promote)
    promote.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                         help="give up after this long (default: startup budget + probes + window)")
    promote.set_defaults(handler=cmd_promote)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _common(parser: argparse.ArgumentParser) -> None:
    add_state_dir(parser)
    add_json(parser)
    parser.add_argument("--remediations-dir", metavar="DIR", action="append", default=None,
                        help="remediation files (default: the config's, else the shipped ones)")


def _catalog(args, config=None):
    from ..remediation import RemediationError
    from ..loop.wiring import catalog_for

    try:
        return catalog_for(config, args.remediations_dir)
    except RemediationError as error:
        raise CliError(str(error), exit_code=2) from None


def _engine(args, config=None):
    """The daemon's engine (wiring.engine_for): one catalog, one host, one incident store."""
    from ..incidents import StoreError
    from ..remediation import RemediationError
    from ..loop.wiring import engine_for

    try:
        return engine_for(config, state_dir(args, config), args.remediations_dir)
    except RemediationError as error:
        raise CliError(str(error), exit_code=2) from None
    except StoreError as error:
        raise CliError(str(error)) from None


def cmd_list(args) -> int:
    catalog = _catalog(args)
    rows = [{"id": r.id, "kind": r.kind, "title": r.title, "categories": list(r.categories),
             "diagnostic": r.diagnostic, "layouts": [layout.name for layout in r.layouts]} for r in catalog]
    if args.json:
        print_json(rows)
        return 0
    print(table([[r["id"], r["kind"], r["title"]] for r in rows], ["ID", "KIND", "WHAT IT DOES"]))
    return 0


def _context(args, config):
    """The service context: from --config (preflight's context module), else --site-packages."""
    from ..records import ServiceContext

    if config is None:
        return ServiceContext(site_packages=args.site_packages)
    from ..service.host import LocalHost

    try:
        from ..context import service_context
    except ImportError:
        return ServiceContext(argv=tuple(config.service.argv), site_packages=config.service.site_packages)
    context = service_context(config, LocalHost())
    if config.service.site_packages and not context.site_packages:
        from dataclasses import replace

        context = replace(context, site_packages=config.service.site_packages)
    return context


def cmd_apply(args) -> int:
    from ..remediation import ApplyError

    config = load_config(args.config)
    engine = _engine(args, config)
    try:
        remediation = engine.catalog.get(args.remediation_id)
    except KeyError as error:
        raise CliError(error.args[0]) from None
    if remediation.kind == "patch" and not args.site_packages and config is None:
        raise CliError(f"{args.remediation_id} patches a package: give --site-packages DIR or --config FILE")
    if remediation.kind != "patch" and config is None:
        raise CliError(f"{args.remediation_id} changes the launch: give --config FILE (it holds the argv)")
    context = _context(args, config)
    env = dict(config.service.env) if config is not None else {}
    plan = engine.plan(args.remediation_id, context, env=env)
    if args.dry_run or not plan.applicable:
        return _show_plan(args, plan)
    try:
        application = engine.apply(plan)
    except ApplyError as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json({"applied": True, **asdict(application)})
    else:
        print(f"applied {application.remediation_id} as {application.application_id} ({plan.reason})")
        for change in application.files:
            print(f"  {change.path}\n    sha256 {change.before_sha256} -> {change.after_sha256}")
        if application.launch is not None:
            print("  new argv: " + " ".join(application.launch.argv))
        print(f"undo with: ddtreed remediate revert {application.application_id}")
    return 0


def _show_plan(args, plan) -> int:
    """Dry run, or a refusal: exit 0 for a dry run that could apply, 1 otherwise."""
    code = 0 if plan.applicable else 1
    if args.json:
        print_json({"applicable": plan.applicable, "already_applied": plan.already_applied,
                    "reason": plan.reason, "layout": plan.layout, "version": plan.version,
                    "target": plan.target, "diff": plan.diff,
                    "argv": list(plan.launch.argv) if plan.launch else None,
                    "env": dict(plan.launch.env) if plan.launch else None})
        return code
    if not plan.applicable:
        print(f"ddtreed: {plan.remediation_id} not applied: {plan.reason}", file=sys.stderr)
        return 0 if plan.already_applied else code
    print(f"# {plan.remediation_id}: {plan.reason} (dry run: nothing changed)")
    sys.stdout.write(plan.diff)
    return code


def cmd_revert(args) -> int:
    from ..remediation import ApplyError

    engine = _engine(args)
    try:
        previous = engine.revert(args.application_id, force=args.force)
    except ApplyError as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json({"reverted": args.application_id, "argv": list(previous.argv) if previous else None})
    else:
        print(f"reverted {args.application_id}")
        if previous is not None:
            print("  launch goes back to: " + " ".join(previous.argv))
    return 0


def cmd_status(args) -> int:
    engine = _engine(args)
    from ..records import IN_PLACE

    entries = [e for e in engine.history() if args.all or e["status"] in IN_PLACE]
    if args.json:
        print_json(entries)
        return 0
    if not entries:
        print("no remediation applied" + ("" if args.all else " (--all shows reverted ones)"))
        return 0
    rows = []
    for entry in entries:
        where = entry["files"][0]["path"] if entry["files"] else "launch"
        state = entry["status"]
        for change in entry["files"]:
            if change.get("current_sha256") != change["after_sha256"] and state in IN_PLACE:
                state = "applied (file changed since!)"
        after = entry["files"][0]["after_sha256"][:16] if entry["files"] else "-"
        rows.append([entry["application_id"], entry["remediation_id"], state, where, after])
    print(table(rows, ["APPLICATION", "REMEDIATION", "STATUS", "WHERE", "SHA256 AFTER"]))
    return 0


def cmd_unfreeze(args) -> int:
    from ..incidents import Store, StoreError, database_path

    path = database_path(state_dir(args, load_config(args.config)))
    try:
        with Store(path, create=False) as store:
            lifted = store.unfreeze(args.signature)
    except StoreError as error:
        raise CliError(str(error)) from None
    if not lifted:
        raise CliError(f"signature {args.signature} is not frozen in {path}")
    if args.json:
        print_json({"unfrozen": args.signature})
    else:
        print(f"unfrozen {args.signature}: the daemon may remediate it again")
    return 0


def cmd_promote(args) -> int:
    from ..loop.promote import PromoteError, promote

    config = load_config(args.config)
    if args.state_dir:
        config = config.with_state_dir(args.state_dir)
    try:
        result = promote(config, timeout=args.timeout)
    except PromoteError as error:
        raise CliError(str(error), exit_code=error.exit_code) from None
    if args.json:
        print_json(asdict(result))
    else:
        print(result.text())
    return 0 if result.promoted else 1
