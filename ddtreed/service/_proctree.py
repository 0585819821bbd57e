"""LocalHost's process-tree work with psutil: sweep a service's survivors, GPU holders, log rotation."""

from __future__ import annotations

import fnmatch
import os
import signal
import time

import psutil
import structlog

from . import rotation

log = structlog.get_logger(__name__)

TOKEN_VARIABLE = "DDTREED_SERVICE_TOKEN"
STATE_DIR_VARIABLE = "DDTREED_STATE_DIR"  # the supervising daemon's state dir, in the service's env
_COMM_LENGTH = 15  # Linux truncates process names (comm) to 15 bytes
_ANCESTRY_LIMIT = 64  # deep enough for any real tree; bounds a walk over a racing process table
_SWEEP_WAIT_S = 3.0  # SIGKILL takes effect at once; this only covers scheduling latency


def session_pids(session_id: int) -> list[int]:
    """Live (not zombie) pids whose session id is `session_id`.

    On Linux one pass of `getsid` over the pids in /proc (a syscall each, no file read): the stop
    of an exited service asks this twice before its sweep, so it must cost next to nothing; the
    state (zombie or not) is read only for the members found. psutil elsewhere."""
    if not os.path.isdir("/proc/self"):
        return _session_pids_psutil(session_id)
    found = []
    own = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid != own and _session_of(pid) == session_id and not _zombie(pid):
            found.append(pid)
    return sorted(found)


def _zombie(pid: int) -> bool:
    """/proc/PID/stat's state is Z (exited, not reaped); a process gone meanwhile counts as one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"  # the name before ")" may hold spaces
    except (OSError, IndexError):
        return True


def _session_pids_psutil(session_id: int) -> list[int]:
    found = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        if _session_of(proc.pid) == session_id:
            found.append(proc.pid)
    return found


def sweep(session_id: int, name_patterns: tuple[str, ...], token: str | None) -> list[int]:
    """SIGKILL the survivors of a service tree and wait until they are gone; return their pids."""
    own_session = os.getsid(0)
    victims = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        # Never sweep by session id when it is our own: that would kill the daemon's siblings.
        in_session = session_id != own_session and _session_of(proc.pid) == session_id
        if in_session or (_named_like(proc, name_patterns) and _belongs(proc, session_id, token)):
            victims.append(proc)
    for proc in victims:
        try:
            proc.send_signal(signal.SIGKILL)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        log.warning("sweep.killed", pid=proc.pid, name=proc.info["name"], session_id=session_id)
    _wait_gone(victims, time.monotonic() + _SWEEP_WAIT_S)
    return [proc.pid for proc in victims]


def token_holders(token: str) -> list[int]:
    """Pids whose environment carries this service token (a previous launch's survivors)."""
    holders = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get(TOKEN_VARIABLE) == token:
                holders.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
    return holders


def leftover_tokens(state_dir: str, port: int | None) -> set[str]:
    """Service tokens of processes that are a leftover of this state dir's service: they carry a
    DDTREED_SERVICE_TOKEN and either name this state dir (DDTREED_STATE_DIR, set at every launch)
    or hold the service's port. Never by program or title alone: another daemon's live service on
    this machine runs the same program under the same titles."""
    listeners = _listeners(port)
    state_dir = os.path.realpath(state_dir)
    tokens = set()
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        try:
            environ = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
        token, owner = environ.get(TOKEN_VARIABLE), environ.get(STATE_DIR_VARIABLE)
        # On the port but naming another state dir: another live daemon's service, never ours.
        if token and (owner == state_dir or (proc.pid in listeners and owner is None)):
            tokens.add(token)
    return tokens


def sweep_token(token: str, name_patterns: tuple[str, ...]) -> list[int]:
    """SIGKILL every process carrying `token`, with the rest of their sessions; return the pids."""
    killed: list[int] = []
    for session_id in sorted({sid for pid in token_holders(token) if (sid := _session_of(pid))}):
        killed += sweep(session_id, name_patterns, token)
    return sorted(set(killed))


def _listeners(port: int | None) -> set[int]:
    if port is None:
        return set()
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):  # not root on some systems: the program match remains
        return set()
    return {c.pid for c in connections if c.pid and c.laddr and c.laddr.port == port
            and c.status == psutil.CONN_LISTEN}


def gpu_holders(pids: list[int] | None) -> list[int]:
    """Pids with a GPU context according to NVML; [] where NVML (pynvml) is absent."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        log.debug("gpu.nvml_unavailable", error=str(error))
        return []
    try:
        holders = set()
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for getter in (pynvml.nvmlDeviceGetComputeRunningProcesses,
                           pynvml.nvmlDeviceGetGraphicsRunningProcesses):
                holders.update(info.pid for info in getter(handle))
    except pynvml.NVMLError as error:
        log.warning("gpu.nvml_query_failed", error=str(error))
        return []
    finally:
        pynvml.nvmlShutdown()
    wanted = None if pids is None else set(pids)
    return sorted(pid for pid in holders if wanted is None or pid in wanted)


LocalFiles = rotation.LocalFiles  # the rotation's file operations on this machine (no link following)


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _named_like(proc: psutil.Process, patterns: tuple[str, ...]) -> bool:
    name = proc.info["name"] or ""
    cmdline = proc.info["cmdline"] or []
    candidates = [name, " ".join(cmdline)] + ([os.path.basename(cmdline[0])] if cmdline else [])
    for pattern in patterns:
        if any(fnmatch.fnmatchcase(text, pattern) for text in candidates):
            return True
        # A name set with prctl is cut to 15 bytes: `sglang::scheduler_TP0` reads `sglang::schedul`.
        if len(name) == _COMM_LENGTH and fnmatch.fnmatchcase(name, pattern[:_COMM_LENGTH] + "*"):
            return True
    return False


def _belongs(proc: psutil.Process, session_id: int, token: str | None) -> bool:
    """Descended from the service (ancestry, while it lasts) or carrying its environment token."""
    current: psutil.Process | None = proc
    try:
        for _ in range(_ANCESTRY_LIMIT):
            if current is None or current.pid <= 1:
                break
            if current.pid == session_id or _session_of(current.pid) == session_id:
                return True
            current = current.parent()
        # An orphan is re-parented to init and loses its ancestry; its environment stays.
        return token is not None and proc.environ().get(TOKEN_VARIABLE) == token
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _wait_gone(procs: list[psutil.Process], deadline: float) -> None:
    pending = list(procs)
    while pending and time.monotonic() < deadline:
        pending = [proc for proc in pending if _alive(proc)]
        if pending:
            time.sleep(0.02)
    for proc in pending:
        log.error("sweep.survivor", pid=proc.pid, hint="process survived SIGKILL (uninterruptible "
                  "sleep in a driver?); check `ps -o stat,wchan -p PID`")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
