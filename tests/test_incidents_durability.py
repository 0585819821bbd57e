"""The incident row's durability contract (issue 19, session 7): committed without an fsync
(WAL, `synchronous=NORMAL`: it survives a kill of the daemon), made durable (one fdatasync of
the -wal file: it survives a power cut) before the daemon does anything to the host or tells
anyone; every other write durable at its commit (`synchronous=FULL`).

Proved on real processes: the syscalls of a real store under strace, a real `ddtreed run`
SIGKILLed between the row's commit and its sync (the `incident:committed` kill point), and the
order of the real daemon's WAL writes, WAL syncs and signals to its service under strace.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "programs"))

import fast_service  # noqa: E402
from fault_harness import DaemonProcess, kill_service_sessions, wait_for  # noqa: E402

from ddtreed.demo import free_port  # noqa: E402
from ddtreed.incidents import Store, database_path  # noqa: E402
from ddtreed.ops.status import read_status  # noqa: E402
from ddtreed.service.killpoint import VARIABLE as KILL_AT  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LINGER = Path(__file__).resolve().parent / "programs" / "crash_and_linger.py"


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    return subprocess.run(["strace", "-o", os.devnull, "true"], capture_output=True).returncode == 0


needs_strace = pytest.mark.skipif(not _strace_works(), reason="needs strace with ptrace allowed")


def _config(directory: Path) -> Path:
    """The lingering crash under policy off: detected, stopped by the daemon, relaunched once."""
    return fast_service.write_config(directory, port=free_port(), policy={"mode": "off", "max_restarts": 1},
                                     service={"argv": [sys.executable, str(LINGER)]})


class Trace:
    """strace -f -y output as (tid, call, arguments, result) in the order the calls finished."""

    LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((.*))$")
    RESULT = re.compile(r"\)\s+= (.*)$")

    def __init__(self, path: Path):
        self.calls: list[tuple[int, str, str, str]] = []
        pending: dict[int, tuple[str, str]] = {}
        for line in path.read_text(errors="replace").splitlines():
            match = self.LINE.match(line)
            if match is None:
                continue
            tid = int(match.group(1))
            if match.group(2):  # the end of a call another thread's line interrupted
                call, start = pending.pop(tid, (match.group(2), ""))
                text = start + match.group(3)
            else:
                call, text = match.group(4), match.group(5)
                if text.endswith("<unfinished ...>"):
                    pending[tid] = (call, text[: -len("<unfinished ...>")])
                    continue
            ended = self.RESULT.search(text)
            arguments, result = (text[:ended.start()], ended.group(1)) if ended else (text, "")
            self.calls.append((tid, call, arguments, result))

    def events(self, wal: str) -> list[tuple[str, str]]:
        """("write" | "sync" | "signal" | "spawn", detail): the -wal file's writes and syncs, and
        every signal a process sent to another one or to a process group, in order."""
        found = []
        for tid, call, arguments, result in self.calls:
            if call == "pwrite64" and arguments.startswith(tuple(f"{fd}<{wal}>" for fd in range(1024))):
                found.append(("write", arguments[:60]))
            elif call in ("fdatasync", "fsync") and f"<{wal}>" in arguments and result.startswith("0"):
                found.append(("sync", arguments))
            elif call == "kill" and arguments:
                target = int(arguments.split(",")[0])
                if target != tid:  # a process killing itself is no action of the daemon's
                    found.append(("signal", arguments))
            elif call == "execve" and result.startswith("0"):
                found.append(("spawn", arguments[:80]))
        return found


def _traced_daemon(config: Path, trace: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        ["strace", "-f", "-y", "-o", str(trace), "-e", "trace=pwrite64,fdatasync,fsync,kill,execve",
         sys.executable, "-m", "ddtreed", "run", "--config", str(config), "--log-format", "json"],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)


@needs_strace
def test_the_relaxed_commit_waits_for_no_disk_and_make_durable_syncs_the_wal(tmp_path):
    """On a real store: `open_incident(durable=False)` commits with no fsync at all; the
    `make_durable()` after it is one fdatasync of the -wal file; a plain write (and a recurrence
    without `durable=False`) still syncs the -wal at its commit."""
    path = database_path(tmp_path / "state")
    Store(path).close()
    script = textwrap.dedent(f"""
        import os
        from ddtreed.incidents import Store
        mark = lambda name: os.write(2, ("@" + name + "@").encode())
        store = Store({str(path)!r})
        mark("relaxed")
        incident = store.open_incident("crash", message="boom", durable=False)
        mark("make_durable")
        store.make_durable()
        mark("step")
        store.add_step(incident, "diagnosed", "a step")
        mark("recurrence")
        store.record_recurrence(incident, "again")
        mark("end")
        store.close()
    """)
    trace = tmp_path / "trace.txt"
    subprocess.run(["strace", "-f", "-y", "-o", str(trace), "-e", "trace=write,pwrite64,fdatasync,fsync",
                    sys.executable, "-c", script], check=True, cwd=REPO, capture_output=True)
    wal = f"{path}-wal"
    seen: dict[str, list[tuple[str, str]]] = {}  # per phase: ("write" | "sync", file) in order
    phase = "open"
    for _tid, call, arguments, _result in Trace(trace).calls:
        marker = re.search(r'"@(\w+)@"', arguments) if call == "write" else None
        if marker:
            phase = marker.group(1)
        elif call in ("fdatasync", "fsync", "pwrite64") and "<" in arguments:
            target = arguments.split("<", 1)[1].split(">", 1)[0]
            seen.setdefault(phase, []).append(("sync" if call != "pwrite64" else "write", target))
    relaxed = [event for event in seen["relaxed"] if event[1] == wal]
    # committed: its frames written to the -wal and never synced (a new WAL's header is synced
    # before its first frame, at NORMAL too: that sync holds none of the row)
    last_sync = max((i for i, event in enumerate(relaxed) if event[0] == "sync"), default=-1)
    assert [event for event in relaxed[last_sync + 1:]] and all(e[0] == "write" for e in relaxed[last_sync + 1:])
    assert len(relaxed) - last_sync - 1 >= 2  # the incident's frames: its page(s) and the commit frame
    syncs = {name: [target for kind, target in events if kind == "sync"] for name, events in seen.items()}
    assert syncs["make_durable"] in ([wal], [wal, str(path.parent)])  # the -wal (and its directory once)
    assert syncs["step"] == [wal]  # every other write: synced at its commit, as before
    assert syncs["recurrence"] == [wal]
    with Store(path) as store:
        assert [step["step"] for step in store.get(1)["steps"]] == ["detected", "diagnosed", "recurred"]


def test_a_daemon_killed_between_the_commit_and_the_sync_keeps_the_incident(tmp_path):
    """`ddtreed run` SIGKILLs itself right after the crash's row is committed at NORMAL, before
    its fsync (DDTREED_KILL_AT=incident:committed): the row is in the database for the next
    start, and nothing left the daemon before it died: its service was never signalled and the
    status file never named the incident."""
    directory = tmp_path / "run"
    directory.mkdir()
    config = _config(directory)
    daemon = DaemonProcess(config, directory / "daemon.jsonl", env={KILL_AT: "incident:committed"})
    try:
        wait_for(lambda: daemon.process.poll() is not None, 60, what="the daemon to reach its kill point")
        assert daemon.process.returncode == -signal.SIGKILL
        status = read_status(directory / "state")
        assert status is not None and status.current_incident_id is None
        assert status.state not in ("crashed", "diagnosing")
        with Store(database_path(directory / "state"), create=False) as store:
            [incident] = store.list_incidents()
            assert incident["status"] == "open"
            assert [step["step"] for step in store.get(incident["id"])["steps"]] == ["detected"]
        assert not daemon.has("incident_opened")  # the log line comes after the stop
        services = [p for p in _service_pids(directory)]
        assert services, "the service was stopped (or died) though the daemon never got to act"
    finally:
        daemon.kill()
        kill_service_sessions(directory)


def _service_pids(directory: Path) -> list[int]:
    import psutil

    return [process.pid for process in psutil.process_iter(["cmdline", "status"])
            if process.info["status"] != psutil.STATUS_ZOMBIE and str(LINGER) in (process.info["cmdline"] or ())]


@needs_strace
def test_nothing_is_done_to_the_service_before_the_incident_is_on_disk(tmp_path):
    """The real daemon under strace, one incident (detected, the lingering service stopped by the
    daemon, relaunched, the same crash again, stopped again): at every signal the daemon sends and
    every process it starts, the -wal file holds no write that was not synced after it. The
    incident's own commit is no such sync: the sync comes from `make_durable`, on the daemon's
    own descriptor of the -wal, and the service is signalled only after it."""
    directory = tmp_path / "run"
    directory.mkdir()
    config = _config(directory)
    state = directory / "state"
    Store(database_path(state)).close()  # migrated before: the trace holds the daemon's life only
    wal = f"{database_path(state)}-wal"
    trace, log = directory / "trace.txt", directory / "daemon.jsonl"
    process = _traced_daemon(config, trace, log)
    try:
        events = lambda: DaemonProcess.events(_Log(log))  # noqa: E731
        wait_for(lambda: any(e.get("event") == "restart_budget_spent" for e in events()), 90,
                 what="the daemon to handle the crash, its recurrence and give up")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        kill_service_sessions(directory)
    found = Trace(trace).events(wal)
    signals = [index for index, (kind, _) in enumerate(found) if kind == "signal"]
    assert len(signals) >= 2, found  # the daemon stopped its service twice (incident, recurrence)
    unsynced = False
    for kind, detail in found:
        if kind == "write":
            unsynced = True
        elif kind == "sync":
            unsynced = False
        else:
            assert not unsynced, f"{kind} {detail} with a write to the -wal not yet synced: {found}"
    # the first signal: its incident's frames, then a sync on another descriptor than SQLite's own
    first = signals[0]
    write = max(index for index in range(first) if found[index][0] == "write")
    sync = min(index for index in range(write, first) if found[index][0] == "sync")
    sqlite_fd, ours = found[write][1].split("<")[0], found[sync][1].split("<")[0]
    assert sqlite_fd != ours, "the incident's commit synced itself: it was not committed at NORMAL"
    with Store(database_path(state), create=False) as store:
        [incident] = store.list_incidents()
        assert [step["step"] for step in store.get(incident["id"])["steps"]][:2] == ["detected", "diagnosed"]


class _Log:
    """What DaemonProcess.events reads: a log path (the daemon here runs under strace)."""

    def __init__(self, path: Path):
        self.log_path = path


@needs_strace
def test_make_durable_syncs_the_wal_of_a_database_reached_through_a_symlink(tmp_path):
    """The database path a symlink to a file elsewhere (the state dir on another disk, linked
    file by file): SQLite writes the -wal next to the link's target, so `make_durable()` must sync
    that file, not find no `<link>-wal` and sync the database file, which holds none of the row."""
    target = tmp_path / "disk" / "incidents.db"
    target.parent.mkdir()
    Store(target).close()
    path = database_path(tmp_path / "state")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    script = textwrap.dedent(f"""
        import os
        from ddtreed.incidents import Store
        store = Store({str(path)!r})
        store.open_incident("crash", message="boom", durable=False)
        assert os.path.exists({str(target)!r} + "-wal") and not os.path.lexists({str(path)!r} + "-wal")
        os.write(2, b"@make_durable@")
        store.make_durable()
        os.write(2, b"@end@")
        store.close()
    """)
    trace = tmp_path / "trace.txt"
    subprocess.run(["strace", "-f", "-y", "-o", str(trace), "-e", "trace=write,fdatasync,fsync",
                    sys.executable, "-c", script], check=True, cwd=REPO, capture_output=True)
    synced, phase = [], ""
    for _tid, call, arguments, result in Trace(trace).calls:
        marker = re.search(r'"@(\w+)@"', arguments) if call == "write" else None
        if marker:
            phase = marker.group(1)
        elif phase == "make_durable" and call in ("fdatasync", "fsync") and result.startswith("0"):
            synced.append(arguments.split("<", 1)[1].split(">", 1)[0])
    assert synced in ([f"{target}-wal"], [f"{target}-wal", str(target.parent)])
    with Store(path) as store:
        assert store.get(1)["steps"][0]["step"] == "detected"


def test_an_incident_made_durable_after_the_wal_was_deleted_survives_a_kill(tmp_path):
    """Someone deletes the -wal under the running daemon (a cleanup of "temporary" files): SQLite
    goes on writing into the unlinked file. `make_durable()` must not take the missing -wal for
    "checkpointed" and sync the database file: the incident committed after it, and the ones in
    the deleted WAL not checkpointed yet, are then on disk before the daemon acts, and a kill right
    after loses none of them; the store writes into a -wal at its path again."""
    path = database_path(tmp_path / "state")
    script = textwrap.dedent(f"""
        import os, signal
        from ddtreed.incidents import Store
        store = Store({str(path)!r})
        store.open_incident("crash", message="before the deletion", durable=False)
        store.make_durable()
        os.unlink({str(path)!r} + "-wal")
        store.open_incident("crash", message="after the deletion", durable=False)
        store.make_durable()
        store.add_step(2, "diagnosed", "a step after it")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    with Store(path) as store:
        assert [store.get(i)["message"] for i in (1, 2)] == ["before the deletion", "after the deletion"]
        assert [step["step"] for step in store.get(2)["steps"]] == ["detected", "diagnosed"]
