"""The daemon-state snapshot: `<state_dir>/daemon-state.json`, rewritten atomically on every change.

The daemon is the only writer; `ddtreed status`, the metrics endpoint and people read it. A reader
sees the old snapshot or the new one, never half of one (temp file, rename; no fsync: see
`_replace_snapshot`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from ..vocabulary import DAEMON_STATES

STATUS_FILE = "daemon-state.json"

# The daemon's states, in the order a crash travels through them (records.DaemonState says each).
STATES = DAEMON_STATES


class StatusError(ValueError):
    """An unreadable snapshot file, worded as one line naming the file."""


class DaemonStatus:
    """What the daemon is doing right now. Times are epoch seconds (time.time()).

    Mutable on purpose: the loop owns one instance, sets fields as things happen, and calls
    write_status() at each state change. A plain class with the fields of `FIELDS` (a dataclass's
    behaviour: keyword construction with defaults, ==, repr, `to_dict()`, `replace()`), not a
    dataclass: `dataclasses` brings `inspect` and ~10 ms to every `ddtreed status` (issue 19.4).
    """

    # name -> default, in the snapshot's key order; pid and state are required
    FIELDS: dict[str, Any] = {
        "pid": None, "state": None,
        "status_text": "",  # the same line as systemd's STATUS=, e.g. "serving, accept len 3.4"
        "service_pid": None, "service_started_at": None,
        "restarts": 0,  # service restarts since this daemon started
        "last_healthy_at": None,  # last passing probe, or the service's own serving lines
        "last_accept_length": None, "current_incident_id": None,
        "degraded": None,  # {"remediations": [ids], "since": epoch}
        "canary": None,  # {"last_run_at": epoch, "passed": bool, "detail": str}
        "config": None,  # the config file the daemon runs with
        "service_token": None,  # in the service tree's environment: finds it after a ddtreed crash
        # While a start or a verification window runs (ddtreed.ops.progress): phase, elapsed_s/budget_s
        # or window_s/watching_until, and the text systemd shows; None otherwise.
        "progress": None,
        "updated_at": 0.0,
    }
    __slots__ = tuple(FIELDS)

    pid: int
    state: str
    status_text: str
    service_pid: int | None
    service_started_at: float | None
    restarts: int
    last_healthy_at: float | None
    last_accept_length: float | None
    current_incident_id: int | None
    degraded: dict[str, Any] | None
    canary: dict[str, Any] | None
    config: str | None
    service_token: str | None
    progress: dict[str, Any] | None
    updated_at: float

    def __init__(self, pid: int, state: str, **values: Any) -> None:
        unknown = set(values) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"DaemonStatus got unexpected keyword argument(s) {', '.join(sorted(unknown))}")
        self.pid, self.state = pid, state
        for name, default in self.FIELDS.items():
            if name not in ("pid", "state"):
                setattr(self, name, values.get(name, default))
        self.check()

    def check(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, got {self.state!r}")

    def to_dict(self) -> dict[str, Any]:
        """Every field (a deep copy of the dict values, as `dataclasses.asdict` gives)."""
        return {name: _copied(getattr(self, name)) for name in self.FIELDS}

    def replace(self, **changes: Any) -> "DaemonStatus":
        """A new snapshot with `changes` (as `dataclasses.replace`): the old one never changes."""
        values = {name: getattr(self, name) for name in self.FIELDS}
        values.update(changes)
        return DaemonStatus(**values)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq=True

    def __repr__(self) -> str:
        return "DaemonStatus(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS) + ")"


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(item) for item in value)
    return value


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
    known = DaemonStatus.FIELDS
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


class StatusBoard:
    """The daemon's one place to change its state: writes the snapshot and tells systemd.

    `board.update(state="verifying", status_text="capturing CUDA graphs")` rewrites the file and
    calls `on_text` (e.g. `Notifier.status`) when the text changed.
    """

    def __init__(self, state_dir: str, current: DaemonStatus,
                 on_text: Callable[[str], object] | None = None) -> None:
        self.state_dir = state_dir
        self.current = current
        self.on_text = on_text
        self._last_text = ""
        self._failing = False

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
            self.current = self.current.replace(**changes)
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
        self.current = write_status(self.state_dir, self.current.replace(**changes))  # a copy: earlier
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
