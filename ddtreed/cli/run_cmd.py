"""`ddtreed run` (the daemon) and `ddtreed demo` (the whole loop against the demo service)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from ..records import Healthy, Outcome
from .common import CliError, add_config, add_json, add_state_dir, load_config, print_json


# What each injected fault must be diagnosed as (GPU proofs, docs/gpu-e2e.md).
FAULT_CATEGORIES = {"device-assert": "illegal-memory-access", "oom-at-capture": "cuda-oom"}


def register(commands) -> None:
    run = commands.add_parser(
        "run", help="supervise the service named in a config (the daemon)",
        description="Launch the service from the config, follow its logs, diagnose crashes, apply "
                    "fixes under the configured policy, restart and verify. Runs until SIGTERM. "
                    "SIGHUP reloads config, rules and remediations; SIGUSR1 logs the current state.",
    )
    add_config(run, required=True)
    add_state_dir(run)
    run.add_argument("--log-format", choices=("json", "console"), default=None,
                     help="structured log format (default: console on a terminal, JSON otherwise)")
    run.set_defaults(handler=_run)

    demo = commands.add_parser(
        "demo", help="run the whole loop against the bundled demo service (about a minute)",
        description="Installs a small SGLang-like service with the founding bug (DDTree budget 32, "
                    "verify graph captured 8 wide), supervises it with the real daemon, and shows "
                    "crash → diagnosis → patch → restart → healthy → incident recorded. Exits 0 "
                    "only if the loop closed (with --fault: only if the fault was diagnosed right).",
    )
    add_state_dir(demo)
    add_json(demo)
    demo.add_argument("--preflight", action="store_true",
                      help="show the prevented path: preflight patches before the first launch")
    demo.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                      help="where the demo's verify step runs (cuda: a real CUDA graph)")
    demo.add_argument("--fault", choices=("none", "device-assert", "oom-at-capture"), default="none",
                      help="inject another failure instead of the founding width bug (GPU proofs)")
    demo.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                      help="give up after this long (default 300)")
    demo.set_defaults(handler=_demo)


def _run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.state_dir:
        config = config.with_state_dir(args.state_dir)
    from ..service.host import write_atomic
    from ..ops.logsetup import configure

    from ..service.state_lock import StateDirLocked, acquire, release

    # One daemon per state dir, decided before anything in it is read or written: a second one
    # would read the first one's "address in use" as a crash of its own and take the service down.
    try:
        lock = acquire(config.paths.state_dir)
    except StateDirLocked as error:
        raise CliError(str(error), exit_code=2) from None
    except OSError as error:
        raise CliError(f"{config.paths.state_dir}: cannot lock the state dir: {error.strerror}", exit_code=2) from None
    try:
        # stdout: journald under systemd (JSON), readable lines on a terminal
        configure(json_output=None if args.log_format is None else args.log_format == "json")
        daemon = _daemon(config)
        daemon.signals.install()  # handlers only enqueue: the loop acts between steps
        pid_file = Path(config.paths.state_dir) / "ddtreed.pid"  # `fleet rules push` signals this pid
        write_atomic(str(pid_file), f"{os.getpid()}\n".encode(), mode=0o644)
        try:
            return daemon.run()
        finally:
            pid_file.unlink(missing_ok=True)
    finally:
        release(lock)


def _daemon(config, **options):
    from ..loop.daemon import Daemon
    from ..incidents import StoreError

    try:
        return Daemon(config, **options)
    except (ValueError, StoreError, OSError) as error:  # rule/remediation files, state dir
        raise CliError(str(error), exit_code=2) from None


def _demo(args: argparse.Namespace) -> int:
    from .. import demo
    from ..ops.logsetup import CURRENT_STDERR, configure

    # --state-dir means what it means everywhere: the directory that holds incidents.sqlite3, so
    # `ddtreed incidents --state-dir X` afterwards shows the demo's incident (issue 17.5).
    demo_dir = Path(args.state_dir or tempfile.mkdtemp(prefix="ddtreed-demo-"))
    fault = None if args.fault == "none" else args.fault
    # An injected fault runs on a correct width (budget = block - 1 verifies 8 tokens), so the
    # founding bug does not crash first and hide it.
    config_path = demo.prepare(demo_dir, device=args.device, fault=fault, budget=32 if fault is None else 7,
                               state_dir=demo_dir)
    config = load_config(str(config_path))
    # The crash path is the point of the plain demo; --preflight shows the prevented path.
    config = replace(config, preflight=replace(config.preflight, enabled=args.preflight))
    configure(json_output=False, level="info", stream=CURRENT_STDERR)
    _say(args, f"demo: state and logs in {demo_dir}; config {config_path}")
    _say(args, "demo: launching the demo DDTree service (block 8, budget 32) under ddtreed …")
    daemon = _daemon(config)
    daemon.signals.install()  # handlers only enqueue: the loop acts between steps
    stop_on(daemon, Healthy if args.preflight else Outcome)  # one incident (or the prevented start), then stop
    timer = threading.Timer(args.timeout, daemon.request_stop)
    timer.start()
    try:
        daemon.run()
    finally:
        timer.cancel()
    return _report(args, daemon, config)


def stop_on(daemon, event_type) -> None:
    """Ask `daemon` to stop at its first event of `event_type` (the demo's and tests' way to end it)."""
    daemon.subscribe(lambda event: daemon.request_stop() if isinstance(event, event_type) else None)


def _report(args: argparse.Namespace, daemon, config) -> int:
    from .incidents_cmd import render_incident

    store = daemon.store
    incidents = store.list_incidents(limit=10)
    if args.fault != "none":  # an injected fault: the point is the diagnosis and what was tried
        wanted = f"diagnosed as {FAULT_CATEGORIES[args.fault]}"
        closed = any(incident["category"] == FAULT_CATEGORIES[args.fault] for incident in incidents)
    else:
        wanted = "prevented" if args.preflight else "resolved"
        closed = any(incident["status"] == wanted for incident in incidents)
    if args.json:
        from ..incidents.views import as_json

        print_json({"ok": closed, "state_dir": config.paths.state_dir,
                    "incidents": [as_json(store.get(incident["id"])) for incident in incidents]})
    else:
        for incident in reversed(incidents):
            print(render_incident(store.get(incident["id"])))
            print()
        verdict = f"the loop closed ({wanted})" if closed else f"the loop did NOT close (no incident {wanted})"
        print(f"demo: {verdict}. Review with: ddtreed incidents --state-dir {config.paths.state_dir}")
    return 0 if closed else 1


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(text, file=sys.stderr, flush=True)
