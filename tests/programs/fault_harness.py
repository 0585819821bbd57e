"""Drive the real `ddtreed run` for the fault tests: start, read its JSON events, kill, clean up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from supervision_helpers import wait_for  # one poll-with-deadline for every test (tests/ is on sys.path)

REPO = Path(__file__).resolve().parents[2]


class DaemonProcess:
    """One `ddtreed run --config CONFIG --log-format json`, its events in `log_path`."""

    def __init__(self, config: Path, log_path: Path, env: dict[str, str] | None = None):
        self.log_path = Path(log_path)
        self._out = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ddtreed", "run", "--config", str(config), "--log-format", "json"],
            stdout=self._out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
            env={**os.environ, **(env or {})})
        self.pid = self.process.pid

    def events(self, name: str | None = None) -> list[dict]:
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            start = line.find("{")
            if start < 0:
                continue
            try:
                record = json.loads(line[start:])
            except ValueError:
                continue
            if name is None or record.get("event") == name:
                found.append(record)
        return found

    def has(self, name: str) -> bool:
        return bool(self.events(name))

    def kill(self) -> None:
        """SIGKILL the daemon only (its service lives in its own session and survives it).

        Through the Popen handle: once the daemon is reaped (it killed itself at a test hook) its
        pid may be reused, and a bare os.kill would hit a stranger."""
        self.process.kill()  # a no-op once the daemon's exit status was collected
        self.process.wait(10)
        self._out.close()

    def stop(self, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"ddtreed pid {self.pid} ignored SIGTERM for {timeout}s") from None
        self._out.close()
        return code


def kill_service_sessions(directory: Path) -> None:
    """What systemd does to the unit's cgroup when the daemon dies: no service process survives.

    Found by command line (every service of a run names files under `directory`), not by the
    service's own start stamp: a service spawned just before the kill may not have written it yet.
    """
    import psutil

    marker = str(Path(directory).resolve())

    def services() -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["cmdline", "status"]):
            cmdline = process.info["cmdline"] or ()
            if process.info["status"] != psutil.STATUS_ZOMBIE and any(marker in part for part in cmdline):
                found.append(process)
        return found

    for process in services():
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    wait_for(lambda: not services(), 10.0, what="the killed service sessions to exit")


def count(events_file: Path, what: str) -> int:
    if not events_file.exists():
        return 0
    return sum(1 for line in events_file.read_text().splitlines() if line.startswith(what + " "))


def killed_at_commit(config: Path, log_path: Path) -> DaemonProcess:
    """A real `ddtreed run` that SIGKILLs itself the moment a crash's row is committed, before its
    rules run (DDTREED_KILL_AT=incident:committed): returned once it is dead, its service alive."""
    daemon = DaemonProcess(config, log_path, env={"DDTREED_KILL_AT": "incident:committed"})
    wait_for(lambda: daemon.process.poll() is not None, 60, what="the daemon to reach its kill point")
    assert daemon.process.returncode == -signal.SIGKILL
    daemon.kill()
    return daemon


def seed_open_crash_row(state: Path, column: str | None = None, value: str | None = None) -> int:
    """What a killed daemon leaves in `state`'s incident database: one open crash row, not yet
    judged; with `column`, that column's stored JSON replaced by `value` as it is (a record of another
    version, a corrupted or hostile row). Returns the incident's id."""
    from ddtreed.incidents import Store, database_path
    from ddtreed.records import Crash
    from ddtreed.signature import signature_of

    state.mkdir(parents=True, exist_ok=True)
    crash = Crash(kind="traceback", exception="RuntimeError", message="e0")
    with Store(database_path(state)) as store:
        incident = store.open_incident("crash", (crash,), signature_of(crash), None, None, service="sglang")
        if column is not None:
            with store.atomic() as db:
                db.execute(f"UPDATE incidents SET {column} = ? WHERE id = ?", [value, incident])
    return incident
