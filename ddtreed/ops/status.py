"""The daemon-state snapshot: `<state_dir>/daemon-state.json`, rewritten atomically on every change.

The daemon is the only writer; `ddtreed status`, the metrics endpoint and people read it. A reader
sees the old snapshot or the new one, never half of one (temp file, rename; no fsync: see
`_replace_snapshot`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from ..records import DAEMON_STATES

STATUS_FILE = "daemon-state.json"

# The daemon's states, in the order a crash travels through them (records.DaemonState says each).
STATES = DAEMON_STATES


class StatusError(ValueError):
    """An unreadable snapshot file, worded as one line naming the file."""


@dataclass
class DaemonStatus:
    """What the daemon is doing right now. Times are epoch seconds (time.time()).

    Mutable on purpose: the loop owns one instance, sets fields as things happen, and calls
    write_status() at each state change.
    """

    pid: int
    state: str
    status_text: str = ""  # the same line as systemd's STATUS=, e.g. "serving, accept len 3.4"
    service_pid: int | None = None
    service_started_at: float | None = None
    restarts: int = 0  # service restarts since this daemon started
    last_healthy_at: float | None = None  # last passing probe, or the service's own serving lines
    last_accept_length: float | None = None
    current_incident_id: int | None = None
    degraded: dict[str, Any] | None = None  # {"remediations": [ids], "since": epoch}
    canary: dict[str, Any] | None = None  # {"last_run_at": epoch, "passed": bool, "detail": str}
    config: str | None = None  # the config file the daemon runs with
    service_token: str | None = None  # in the service tree's environment: finds it after a ddtreed crash
    # While a start or a verification window runs (ddtreed.ops.progress): phase, elapsed_s/budget_s or
    # window_s/watching_until, and the text systemd shows; None otherwise.
    progress: dict[str, Any] | None = None
    updated_at: float = 0.0

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {self.state!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def status_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / STATUS_FILE


def write_status(state_dir: str | os.PathLike[str], status: DaemonStatus) -> DaemonStatus:
    """Stamp `status.updated_at`, replace the snapshot atomically (mode 0600), return `status`."""
    status.check()  # a field set directly bypasses __post_init__
    status.updated_at = time.time()
    data = json.dumps(status.to_dict(), indent=1, sort_keys=False) + "\n"
    _replace_snapshot(status_path(state_dir), data.encode())
    return status


def _replace_snapshot(path: Path, data: bytes) -> None:
    """Temp file + rename, mode 0600: a reader sees the old snapshot or the new one, never half.

    No fsync: this is a snapshot the daemon rewrites at every state change and at its start, not
    a record (incidents and applications are in SQLite). Two fsyncs per write were the largest
    part of the crash path before the incident row exists (two writes: `crashed`, `diagnosing`;
    benchmarks/record_path.py). After a power cut the file holds an earlier snapshot, or, on a
    file system that does not order the rename after the data, nothing: `read_status` reads an
    empty file as "no snapshot yet".
    """
    from ..service.host import write_atomic  # here, not at the top: `ddtreed status` only reads

    write_atomic(str(path), data, mode=0o600, durable=False)


def read_status(state_dir: str | os.PathLike[str]) -> DaemonStatus | None:
    """The last snapshot, or None when no daemon has written one; StatusError when it is unreadable."""
    path = status_path(state_dir)
    try:
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            return None  # a power cut before the unsynced snapshot reached the disk
        raw = json.loads(text)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise StatusError(f"{path}: cannot read: {error.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StatusError(f"{path}: not a daemon-state JSON file: {error}") from None
    return _from_mapping(path, raw)


def _from_mapping(path: Path, raw: Any) -> DaemonStatus:
    if not isinstance(raw, dict):
        raise StatusError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    known = {f.name for f in fields(DaemonStatus)}
    # Keys from a newer daemon are ignored, so an old CLI can still read a new snapshot.
    values = {key: value for key, value in raw.items() if key in known}
    for key in ("pid", "state"):
        if key not in values:
            raise StatusError(f"{path}: missing key {key!r}")
    if not isinstance(values["pid"], int):
        raise StatusError(f"{path}: pid must be an integer, got {values['pid']!r}")
    try:
        return DaemonStatus(**values)
    except (TypeError, ValueError) as error:
        raise StatusError(f"{path}: {error}") from None


@dataclass
class StatusBoard:
    """The daemon's one place to change its state: writes the snapshot and tells systemd.

    `board.update(state="verifying", status_text="capturing CUDA graphs")` rewrites the file and
    calls `on_text` (e.g. `Notifier.status`) when the text changed.
    """

    state_dir: str
    current: DaemonStatus
    on_text: Callable[[str], object] | None = None
    _last_text: str = field(default="", init=False)
    _failing: bool = field(default=False, init=False)

    @classmethod
    def start(cls, state_dir: str, config: str | None = None,
              on_text: Callable[[str], object] | None = None) -> "StatusBoard":
        board = cls(state_dir, DaemonStatus(pid=os.getpid(), state="starting", config=config), on_text)
        board.publish(status_text="starting")
        return board

    def publish(self, **changes: Any) -> DaemonStatus:
        """`update`, but a full or read-only state dir is reported (once per streak), not raised."""
        try:
            self.update(**changes)
            self._failing = False
        except OSError as error:
            self.current = replace(self.current, **changes)
            if "status_text" in changes and self.on_text is not None:
                self.on_text(changes["status_text"])
            if not self._failing:
                import structlog  # here, not at the top: `ddtreed status` only reads

                structlog.get_logger(__name__).error(
                    "status_write_failed", error=str(error),
                    hint="the state dir is full or read-only; ddtreed keeps running")
            self._failing = True
        return self.current

    def service_started(self, pid: int | None, token: str | None, at: float) -> DaemonStatus:
        """A launch: its pid and token, and one restart more unless it is the first."""
        restarts = self.current.restarts + (1 if self.current.service_started_at else 0)
        return self.publish(service_pid=pid, service_started_at=at, restarts=restarts, service_token=token)

    def update(self, **changes: Any) -> DaemonStatus:
        """Apply field changes (e.g. state=, status_text=, restarts=) and publish them."""
        self.current = write_status(self.state_dir, replace(self.current, **changes))  # a copy: earlier
        # snapshots handed to other threads (the metrics endpoint) never change under them
        text = self.current.status_text
        if self.on_text is not None and text and text != self._last_text:
            self.on_text(text)
        self._last_text = text
        return self.current


def canary_status(result: Any) -> dict[str, Any]:
    """The periodic canary's last run as the snapshot shows it (apart from the probe's fields)."""
    return {"last_run_at": result.at, "passed": result.passed, "detail": result.detail,
            "accept_length": result.accept_length}
