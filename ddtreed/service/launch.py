"""Start the service in its own session, and stop all of it: TERM, grace, KILL, sweep, wait for release."""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import PurePosixPath
from typing import Callable

import structlog

from . import killpoint
from ._proctree import TOKEN_VARIABLE
from ..config import Config
from .host import Host, LocalHost, LocalProcess, Process
from ..records import ExitStatus

log = structlog.get_logger(__name__)

# Process titles SGLang gives its children (setproctitle); they can outlive a killed group.
CHILD_NAME_PATTERNS = (
    "sglang::scheduler*",
    "sglang::detokenizer*",
    "sglang::data_parallel_controller*",
)
DEFAULT_PORT = 30000  # SGLang's own default for --port
_POLL_S = 0.05
_GROUP_TERM_S = 5.0  # after a failed drain the group gets this long before SIGKILL
_CRASH_TERM_S = 1.0  # a failed service's group: SIGTERM, then SIGKILL after this long
_KILL_WAIT_S = 10.0  # SIGKILL is immediate unless a process sits in a driver call
_ROTATE_CHECK_S = 5.0  # a stat per log file at most this often while running
_PROGRESS_EVERY_S = 2.0


def is_requested_stop_exit(status: ExitStatus) -> bool:
    """How a service that ddtreed asked to stop may end: 0, SIGTERM, or SGLang's own SIGKILL of
    its tree after draining (rc 137). Such an exit is the stop, not a crash."""
    return status.code in (0, 128 + signal.SIGTERM, 128 + signal.SIGKILL) or \
        status.signal in (signal.SIGTERM, signal.SIGKILL)


class StopError(RuntimeError):
    """The service's main process survived SIGKILL."""


def service_port(config: Config, argv: list[str]) -> int:
    """The port the service listens on: the config, else `--port` in argv, else SGLang's default."""
    if config.service.port is not None:
        return config.service.port
    for index, arg in enumerate(argv):
        if arg == "--port" and index + 1 < len(argv) and argv[index + 1].isdigit():
            return int(argv[index + 1])
        if arg.startswith("--port=") and arg[7:].isdigit():
            return int(arg[7:])
    return DEFAULT_PORT


class Supervisor:
    """One service launch at a time; stop() leaves no process, port or GPU of it behind."""

    def __init__(self, host: Host, config: Config, argv: list[str], env: dict[str, str],
                 inherit_env: bool = True, release_timeout_s: float = 60.0,
                 rotate_check_s: float = _ROTATE_CHECK_S, clock: Callable[[], float] = time.monotonic):
        self.host = host
        self.config = config
        self.argv = list(argv)
        # `env` holds the service's own variables; a local service also needs PATH, HOME, ...
        self.env = {**os.environ, **env} if inherit_env else dict(env)
        self.port = service_port(config, self.argv)
        self.address = config.service.host
        self.release_timeout_s = release_timeout_s
        self.rotate_check_s = rotate_check_s
        self.process: Process | None = None
        self._clock = clock
        self._token: str | None = None
        self._exit_logged = False
        self.stop_requested = False  # stop() was called for the current launch
        self._foreign_port_logged = False
        self._next_rotate_check = 0.0
        log_dir = PurePosixPath(config.paths.log_dir)
        self.log_paths = [str(log_dir / "service.stdout.log"), str(log_dir / "service.stderr.log")]

    @property
    def token(self) -> str | None:
        """The environment token of the current launch's processes (None before the first start)."""
        return self._token

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> Process:
        """Rotate the logs, then spawn the service in a new session."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"service pid {self.process.pid} is still running; stop it first")
        self.host.makedirs(self.config.paths.log_dir)
        for path in self.log_paths:
            self.host.rotate_file(path, self.config.paths.log_backups)
        # Children inherit this token: it identifies them after they leave the session or are orphaned.
        self._token = secrets.token_hex(8)
        env = {**self.env, TOKEN_VARIABLE: self._token}
        # Python's own stack dump on fatal signals (SIGABRT from a C++ abort, SIGSEGV): evidence
        # in the log, and the last fallback for a hung scheduler's stacks (serving.hang_evidence).
        env.setdefault("PYTHONFAULTHANDLER", "1")
        # SGLang's children rename themselves with setproctitle, which overwrites /proc/PID/environ
        # unless SPT_NOENV is set: the token would vanish from the only place a later daemon reads it.
        env["SPT_NOENV"] = "1"
        self.process = self.host.spawn(self.argv, env, self.config.service.cwd, *self.log_paths)
        killpoint.reached("launch:spawned")  # test hook: the window before the pid and token are recorded
        self._exit_logged = False
        self.stop_requested = False
        self._next_rotate_check = self._clock() + self.rotate_check_s
        log.info("service.started", pid=self.process.pid, port=self.port, argv=self.argv,
                 logs=self.log_paths, host=self.host.name)
        return self.process

    def poll(self, running: bool = False) -> ExitStatus | None:
        """The main process' exit status once it ended; rotates oversized logs while it runs.
        `running`: the caller knows it ran a moment ago (its pidfd was not readable): no waitpid."""
        if self.process is None:
            return None
        status = None if running else self.process.poll()
        if status is None:
            self._rotate_if_large()
        elif not self._exit_logged:
            self._exit_logged = True
            log.warning("service.exited", pid=self.process.pid, status=status.describe())
        return status

    def stop(self, reason: str, drain: bool | None = None, settle_s: float = 0.0) -> ExitStatus:
        """Stop the whole service, the way SGLang wants to be stopped.

        SIGTERM to the launcher process only: SGLang then logs `SIGTERM received… Draining
        requests`, finishes the requests in flight and SIGKILLs its own tree (real 0.5.16: rc 137
        after 4–7 s). Only when the tree outlives `policy.stop_grace_s` does the group get
        SIGTERM, then SIGKILL; survivors outside the group are swept; then the port and GPUs
        must be released. A SIGTERM to the group instead kills the scheduler mid-drain.

        `drain=False` for a service that already failed (a child died, a crash is in progress):
        nothing is left to drain, and SGLang would first sleep 5 s "to let GPU activity settle";
        the group gets SIGTERM at once. Unset: no drain when `reason` is "crash".

        `settle_s`: a failed launcher that printed its own error (an import error, argparse's
        exit 2) is usually exiting already; it gets this long to end by itself, so the incident
        keeps its real exit code instead of ddtreed's SIGTERM.
        """
        if drain is None:
            drain = reason != "crash"
        process = self.process
        if process is None:
            raise RuntimeError("the service was never started")
        grace = self.config.policy.stop_grace_s
        log.info("service.stopping", pid=process.pid, reason=reason, grace_s=grace, drain=drain)
        status = process.poll()
        already_exited = status is not None
        self.stop_requested = True
        if not drain and status is None and settle_s > 0:
            status = self._wait_main_exit(process, settle_s)
        if self._tree_alive(process):
            if drain and status is None and self._signal_main(process, signal.SIGTERM):
                status = self._wait_tree_exit(process, self._clock() + grace)
                if self._tree_alive(process):
                    log.warning("service.drain_timeout", pid=process.pid, grace_s=grace,
                                main_alive=process.poll() is None,
                                hint="the launcher did not finish draining within "
                                     "policy.stop_grace_s; terminating its process group")
            if self._tree_alive(process):
                process.signal_group(signal.SIGTERM)
                # a failed service gets _CRASH_TERM_S: SGLang's launcher sits in a fixed 5 s
                # "let GPU activity settle" sleep after a child's death, and nothing is left to save
                status = self._wait_tree_exit(process, self._clock() + min(
                    grace, _GROUP_TERM_S if drain else _CRASH_TERM_S))
        if self._tree_alive(process):
            status = self._kill_group(process, grace)
        swept = self.host.sweep_session(process.pid, CHILD_NAME_PATTERNS, token=self._token)
        if swept:
            log.error("service.swept", pid=process.pid, killed=swept,
                      hint="children outlived the service's process group; they would hold the "
                           "port and GPU memory and make the next start fail")
        self._wait_released([process.pid, *swept])
        if status is None:
            status = process.poll()
        if status is None:
            raise StopError(f"service pid {process.pid} survived SIGKILL")
        self._exit_logged = True
        log.info("service.stopped", pid=process.pid, status=status.describe(),
                 already_exited=already_exited, reason=reason,
                 expected=not already_exited and is_requested_stop_exit(status))
        return status

    def _signal_main(self, process: Process, signum: int) -> bool:
        """Signal the launcher alone; a host whose process handle cannot (the SSH wrapper
        shell) gets its group signalled instead."""
        if isinstance(process, LocalProcess):
            try:
                os.kill(process.pid, signum)
                return True
            except (ProcessLookupError, PermissionError):
                return False
        return process.signal_group(signum)

    def _tree_alive(self, process: Process) -> bool:
        if process.poll() is None:
            return True
        session_pids = getattr(self.host, "session_pids", None)
        return bool(session_pids(process.pid)) if session_pids else False

    def _wait_tree_exit(self, process: Process, deadline: float) -> ExitStatus | None:
        while self._tree_alive(process) and self._clock() < deadline:
            time.sleep(_POLL_S)
        return process.poll()

    def _wait_main_exit(self, process: Process, seconds: float) -> ExitStatus | None:
        """Poll the launcher for up to `seconds` (counted in polls: a stopped test clock cannot hang it)."""
        for _ in range(max(1, int(seconds / _POLL_S))):
            status = process.poll()
            if status is not None:
                return status
            time.sleep(_POLL_S)
        return process.poll()

    def _kill_group(self, process: Process, grace: float) -> ExitStatus | None:
        main_alive = process.poll() is None
        log.error("service.sigkill", pid=process.pid, grace_s=grace, main_alive=main_alive,
                  hint="the service did not exit within policy.stop_grace_s of SIGTERM: raise it "
                       "if shutdown is slow, or look for a hung rank (py-spy dump --pid PID)")
        process.signal_group(signal.SIGKILL)
        # Members that left the group are the sweep's job; only the main process is awaited here.
        return process.wait(timeout=_KILL_WAIT_S)

    def _wait_released(self, pids: list[int]) -> None:
        """Until the port is free and no old process holds a GPU: a restart before that fails."""
        started = self._clock()
        deadline = started + self.release_timeout_s
        next_progress = started + _PROGRESS_EVERY_S
        while True:
            port_busy = self.host.port_in_use(self.address, self.port)
            if port_busy and self._port_held_by_others(pids):
                port_busy = False  # not ours: waiting cannot free it (the next start's preflight says so)
            holders = self.host.gpu_holders(pids)
            if not port_busy and not holders:
                log.debug("service.released", port=self.port, waited_s=self._clock() - started)
                return
            now = self._clock()
            if now >= deadline:
                log.error("service.release_timeout", port=self.port, port_in_use=port_busy,
                          gpu_holders=holders, waited_s=now - started,
                          hint="another process holds the port or GPU; the next start may fail")
                return
            if now >= next_progress:
                log.info("service.waiting_release", port=self.port, port_in_use=port_busy,
                         gpu_holders=holders, waited_s=round(now - started, 1))
                next_progress = now + _PROGRESS_EVERY_S
            time.sleep(_POLL_S * 2)

    def _port_held_by_others(self, pids: list[int]) -> bool:
        """The port is held, but only by processes that are not this service's (local host only:
        e.g. the server whose port this launch failed to bind). Unknown: False, keep waiting."""
        if not isinstance(self.host, LocalHost):
            return False
        import psutil

        from . import _proctree

        try:
            listeners = {conn.pid for conn in psutil.net_connections(kind="tcp")
                         if conn.laddr and conn.laddr.port == self.port and conn.pid
                         and conn.status == psutil.CONN_LISTEN}
        except (psutil.Error, OSError):
            return False
        ours = set(pids) | set(_proctree.token_holders(self._token) if self._token else [])
        if listeners and not listeners & ours:
            if not self._foreign_port_logged:
                self._foreign_port_logged = True
                log.warning("service.port_held_by_other", port=self.port, holders=sorted(listeners),
                            hint="another process holds the service's port; not waiting for it")
            return True
        return False

    def _rotate_if_large(self) -> None:
        now = self._clock()
        if now < self._next_rotate_check:
            return
        self._next_rotate_check = now + self.rotate_check_s
        paths = self.config.paths
        for path in self.log_paths:
            # The service holds these files open: copy and truncate keeps its descriptor valid.
            if self.host.rotate_file(path, paths.log_backups, over_bytes=paths.log_max_bytes,
                                     copy_truncate=True):
                log.info("service.log_rotated", path=path, max_bytes=paths.log_max_bytes)
