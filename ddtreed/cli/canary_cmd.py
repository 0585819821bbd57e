"""`ddtreed canary record|check|status`: golden outputs of the running service, and their checks."""

from __future__ import annotations

import argparse
import contextlib
import sys

from .common import CliError, add_json, add_state_dir, load_config, print_json, state_dir

EXIT_FAILED = 1  # the canary ran and failed (or could not run): scripts alert on non-zero


def register(commands) -> None:
    parser = commands.add_parser(
        "canary", help="golden outputs: record them, check the service against them, show the last run",
        description="Greedy canary prompts compared token by token with golden outputs recorded "
                    "per (model, draft model, sglang version); acceptance length watched too.")
    sub = parser.add_subparsers(dest="canary_command", metavar="SUBCOMMAND", required=True)
    record = sub.add_parser("record", help="record the running service's outputs as trusted goldens")
    check = sub.add_parser("check", help="one check of the running service against its goldens")
    status = sub.add_parser("status", help="the last canary run: pass/fail, acceptance, first divergence")
    for command, config_required in ((record, True), (check, True), (status, False)):
        command.add_argument("--config", metavar="FILE", required=config_required,
                             help="ddtreed TOML config (service, [canary] prompts and thresholds)")
        add_state_dir(command)
        add_json(command)
    record.set_defaults(handler=_record)
    check.set_defaults(handler=_check)
    status.set_defaults(handler=_status)


def _record(args: argparse.Namespace) -> int:
    from ..health.canary import CanaryError

    from ..incidents import StoreError

    canary, prober, context, store = _setup(args)
    with store:
        try:
            result = canary.record(prober, context, trusted=True)
        except (CanaryError, StoreError) as error:
            raise CliError(str(error)) from None
    return _print(args, result, None, 0)


def _check(args: argparse.Namespace) -> int:
    from ..incidents import StoreError

    canary, prober, context, store = _setup(args)
    with store:
        try:
            result = canary.check(prober, context)
            goldens = store.goldens(*result.key)
        except StoreError as error:
            raise CliError(str(error)) from None
    return _print(args, result, goldens, 0 if result.passed else EXIT_FAILED)


def _status(args: argparse.Namespace) -> int:
    from ..health.canary import result_from_dict
    from ..incidents import StoreError, database_path

    directory = state_dir(args, load_config(args.config))  # nothing there yet: "no canary run", exit 0
    runs = []
    if database_path(directory).exists():
        try:
            with _quiet(), _store(directory, create=False) as store:
                runs = store.canary_runs(limit=1)
                result = result_from_dict(runs[0]["data"]) if runs else None
                goldens = store.goldens(*result.key) if result else None
        except StoreError as error:
            raise CliError(str(error)) from None
    if not runs:
        if args.json:
            print_json({"last_run": None})
        else:
            print(f"no canary run recorded yet in {directory}")
        return 0
    return _print(args, result, goldens, 0 if result.passed else EXIT_FAILED)


def _setup(args: argparse.Namespace):
    """(Canary, Prober, ServiceContext, Store) for the configured service."""
    from ..health.canary import Canary
    from ..context import service_context
    from ..health.probes import Prober
    from ..service.host import LocalHost
    from ..ops.logsetup import configure

    configure(json_output=False, level="warning", stream=sys.stderr)  # stdout is the report
    config = load_config(args.config)
    if args.state_dir:
        config = config.with_state_dir(args.state_dir)
    host = _host_for(config, LocalHost())
    context = service_context(config, host)
    prober = Prober(host.http_base_url(config.service.host, context.port))
    store = _store(config.paths.state_dir, create=True)
    try:
        canary = Canary(store, config.canary)
    except ValueError as error:
        store.close()
        raise CliError(f"{config.source}: {error}", exit_code=2) from None
    return canary, prober, context, store


def _store(directory: str, create: bool):
    from ..incidents import Store, StoreError, database_path

    try:
        with _quiet():  # a pending migration logs; stdout is the report
            return Store(database_path(directory), create=create)
    except StoreError as error:
        raise CliError(str(error)) from None


def _quiet():
    return contextlib.redirect_stdout(sys.stderr)


def _host_for(config, local):
    if not config.service.remote:
        return local
    from ..fleet import host_for

    try:
        return host_for(config)
    except ValueError as error:
        raise CliError(str(error), exit_code=2) from None


def _print(args: argparse.Namespace, result, goldens, code: int) -> int:
    from ..health.canary.view import render

    if args.json:
        payload = result.to_dict()
        if goldens is not None:
            payload["goldens"] = len(goldens)
        print_json({"last_run": payload} if args.canary_command == "status" else payload)
    else:
        print(render(result, goldens))
    return code
