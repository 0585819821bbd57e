"""Is the pid in `<state_dir>/ddtreed.pid` really that state dir's ddtreed daemon?

A pid file outlives a daemon that was SIGKILLed, and the kernel reuses pids: signalling the pid
it names could hit any process. Before a signal, the process must look like `ddtreed run` (its
command line), must not name another state dir, and must have started no later than the pid
file was written (a reused pid starts after it).
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

PID_FILE = "ddtreed.pid"
CLOCK_SLACK_S = 2.0  # btime and the file's mtime are whole seconds; start and write are ms apart


@dataclass(frozen=True)
class Holder:
    """What the host says about the pid a pid file names."""

    pid: int
    cmdline: tuple[str, ...]  # () when no such process
    started_at: float | None  # epoch seconds
    written_at: float | None  # the pid file's mtime, epoch seconds


def problem(holder: Holder, state_dir: str) -> str | None:
    """Why `holder` is not the ddtreed daemon of `state_dir` (one clause), or None when it is."""
    if not holder.cmdline:
        return f"no process has pid {holder.pid} (the pid file is stale)"
    shown = " ".join(holder.cmdline)[:120]
    if not _is_ddtreed_run(holder.cmdline):
        return f"pid {holder.pid} is not a ddtreed daemon ({shown!r}): the pid file is stale"
    named = _option(holder.cmdline, "--state-dir")
    if named is not None and posixpath.normpath(named) != posixpath.normpath(state_dir):
        return f"pid {holder.pid} is the ddtreed of {named}, not of {state_dir}"
    if (holder.started_at is not None and holder.written_at is not None
            and holder.started_at > holder.written_at + CLOCK_SLACK_S):
        return (f"pid {holder.pid} started {holder.started_at - holder.written_at:.0f}s after the pid "
                "file was written: a reused pid, the pid file is stale")
    return None


def _is_ddtreed_run(cmdline: tuple[str, ...]) -> bool:
    """`ddtreed run …`, `python -m ddtreed run …` or `/usr/local/bin/ddtreed run …`."""
    for index, part in enumerate(cmdline):
        if posixpath.basename(part) == "ddtreed" or part == "ddtreed":
            return "run" in cmdline[index + 1:]
    return False


def _option(cmdline: tuple[str, ...], name: str) -> str | None:
    for index, part in enumerate(cmdline):
        if part == name and index + 1 < len(cmdline):
            return cmdline[index + 1]
        if part.startswith(name + "="):
            return part.split("=", 1)[1]
    return None


# ---- the same facts gathered on a remote host in one shell round trip --------------------------

# Prints the facts `parse_remote` reads: the pid's argv (\037 between arguments, \036 for a
# newline), its /proc stat line, the boot time, the clock tick and the pid file's mtime.
# Positional args: pid, pid file.
REMOTE_SCRIPT = (
    'pid=$1; file=$2; '
    'if [ -r "/proc/$pid/cmdline" ]; then printf "cmdline "; tr "\\000\\n" "\\037\\036" <"/proc/$pid/cmdline"; echo; '
    'printf "stat "; cat "/proc/$pid/stat"; fi; '
    'printf "btime "; awk "/^btime/{print \\$2}" /proc/stat; '
    'printf "ticks "; getconf CLK_TCK; '
    'printf "written "; stat -c %Y -- "$file"'
)


def parse_remote(pid: int, text: str) -> Holder:
    facts = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        facts[key] = value
    cmdline = tuple(part.replace("\036", "\n") for part in facts.get("cmdline", "").split("\037") if part)
    return Holder(pid, cmdline, _started(facts.get("stat", ""), facts.get("btime"), facts.get("ticks")),
                  _number(facts.get("written")))


def _started(stat_line: str, boot: str | None, ticks: str | None) -> float | None:
    """Field 22 of /proc/PID/stat (clock ticks after boot); the name in () may hold spaces."""
    fields = stat_line.rpartition(")")[2].split()
    boot_at, per_second = _number(boot), _number(ticks)
    if len(fields) < 20 or boot_at is None or not per_second:
        return None
    try:
        return boot_at + int(fields[19]) / per_second
    except ValueError:
        return None


def _number(text: str | None) -> float | None:
    try:
        return float(text.strip()) if text else None
    except ValueError:
        return None


# ---- this host ---------------------------------------------------------------------------------

def local_holder(state_dir: str | os.PathLike[str]) -> Holder | None:
    """The facts about the pid this machine's pid file names; None without a readable pid file."""
    import psutil

    path = Path(state_dir) / PID_FILE
    try:
        pid = int(path.read_text().split()[0])
        written_at = path.stat().st_mtime
    except (OSError, ValueError, IndexError):
        return None
    try:
        process = psutil.Process(pid)
        return Holder(pid, tuple(process.cmdline()), process.create_time(), written_at)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return Holder(pid, (), None, written_at)
    except psutil.AccessDenied:
        return Holder(pid, ("?",), None, written_at)


def running_daemon(state_dir: str | os.PathLike[str]) -> int | None:
    """The pid of this state dir's live ddtreed daemon (not this process), else None."""
    holder = local_holder(state_dir)
    if holder is None or holder.pid == os.getpid():
        return None
    return holder.pid if problem(holder, os.fspath(state_dir)) is None else None
