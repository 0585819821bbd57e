"""The remediation files on disk: backups and the intent journal; applications go to the incident store.

Layout under `<state_dir>/remediation/`: `backups/<application_id>/<n>.before|.after` (exact
bytes), `journal.json` (the one operation in flight, written and fsync'd before any target file
is touched), `lock`. The applications themselves are rows of the incident database
(`ApplicationTable`): one record, which the daemon, `remediate` and recovery all read.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..service.host import write_atomic
from ..ops.redact import redact
from .applications import ApplicationTable


class Store:
    def __init__(self, state_dir: str | os.PathLike[str], applications: ApplicationTable | None = None):
        self.root = Path(state_dir) / "remediation"
        self.applications = applications or ApplicationTable(str(state_dir))
        self.journal_path = self.root / "journal.json"

    def _ensure(self) -> None:
        self.root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # the state dir: not ours to chmod
        _private_dir(self.root)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One writer at a time (daemon and CLI may share a state dir)."""
        self._ensure()
        descriptor = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            info = os.fstat(descriptor)
            if stat.S_IMODE(info.st_mode) != 0o600 and info.st_uid == os.geteuid():
                os.fchmod(descriptor, 0o600)  # one an older ddtreed created 0644
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(descriptor, fcntl.LOCK_UN)
        finally:
            os.close(descriptor)

    def entries(self) -> list[dict[str, Any]]:
        return self.applications.entries()

    def find(self, application_id: str) -> dict[str, Any] | None:
        return self.applications.find(application_id)

    def upsert(self, entry: dict[str, Any]) -> None:
        self.applications.upsert(entry)

    def write_backup(self, application_id: str, name: str, data: bytes) -> str:
        self._ensure()
        directory = self.root / "backups" / application_id
        _private_dir(directory.parent)
        _private_dir(directory)
        path = directory / name
        write_atomic(str(path), data, 0o600)
        return str(path)

    def read_backup(self, path: str) -> bytes:
        return Path(path).read_bytes()

    def drop_backups(self, application_id: str) -> None:
        shutil.rmtree(self.root / "backups" / application_id, ignore_errors=True)

    def orphan_backups(self) -> list[str]:
        """Backup folders no application and no journal refers to (a kill before the journal)."""
        folder = self.root / "backups"
        if not folder.is_dir():
            return []
        known = {e["application_id"] for e in self.entries()}
        journal = self.journal()
        if journal:
            known.add(journal["entry"]["application_id"])
        return sorted(p.name for p in folder.iterdir() if p.name not in known)

    def journal(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.journal_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def write_journal(self, operation: str, entry: dict[str, Any]) -> None:
        self._ensure()
        # Recovery needs the files, never the launch argv/env: those stay out (their secrets too).
        data = json.dumps({"operation": operation, "entry": redact(entry)}, sort_keys=True).encode()
        write_atomic(str(self.journal_path), data, 0o600)

    def clear_journal(self) -> None:
        try:
            os.unlink(self.journal_path)
        except FileNotFoundError:
            return
        directory = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _private_dir(path: Path) -> None:
    """A 0700 directory (its parent exists); one an older ddtreed left 0755 is tightened."""
    path.mkdir(exist_ok=True, mode=0o700)
    info = path.stat()
    if stat.S_IMODE(info.st_mode) != 0o700 and info.st_uid == os.geteuid():
        os.chmod(path, 0o700)
