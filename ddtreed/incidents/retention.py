"""Retention: the incident database keeps the newest `keep` incidents and none older than
`max_age_days` ([incidents] in the config), so years of crash history cannot fill the state dir.

Never pruned, whatever the limits say:

- an **open** incident (in progress, or a crash loop still recurring);
- an **escalated** incident nobody acknowledged: ddtreed handed it to a person, and a person
  reviews it before it may go (`ddtreed incidents ack ID` writes its `acknowledged` step);
- an incident a recorded **remediation** refers to (the applications table: what ddtreed changed
  on disk, with the hashes `remediate revert` checks).

The daemon calls `Retention.tick()` on every loop turn; it prunes at start and then once per
`INTERVAL_S`, at most `BATCH` incidents per transaction (a long backlog, e.g. a first start on a
100,000-incident store, is worked off one batch per turn, so the loop never stalls on it).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import structlog

from .connection import StoreError
from .store import Store

log = structlog.get_logger(__name__)

INTERVAL_S = 3600.0  # prune at most once an hour once the backlog is gone
BATCH = 500  # incidents per transaction: a few tens of ms of the loop's time
ACKNOWLEDGED = "acknowledged"  # the step a person's `incidents ack` writes
DAY_S = 86_400.0


class Settings(Protocol):
    keep: int
    max_age_days: float


def prune(store: Store, keep: int, max_age_s: float | None = None, now: float | None = None,
          limit: int | None = None, after: tuple[float, int] | None = None) -> int:
    """Delete prunable incidents (and their steps): beyond the newest `keep` (0: no count limit)
    or started more than `max_age_s` ago (None or 0: no age limit), never the protected ones
    (module docstring), oldest first, at most `limit` in this one transaction; return how many.

    `after` = (started_at, id): look only at incidents after that one (a sweep in batches goes on
    where the last batch stopped instead of walking past the protected ones again).
    """
    return sweep(store, keep, max_age_s, now, limit, after)[0]


def sweep(store: Store, keep: int, max_age_s: float | None = None, now: float | None = None,
          limit: int | None = None, after: tuple[float, int] | None = None
          ) -> tuple[int, tuple[float, int] | None]:
    """`prune`, also returning where the batch stopped: the (started_at, id) to go on `after`,
    None when nothing prunable is left past it."""
    if keep <= 0 and not max_age_s:
        return 0, None
    cutoff = (time.time() if now is None else now) - max_age_s if max_age_s else None
    with store.atomic() as db:
        # The oldest of the newest `keep` incidents: everything before it is beyond the count.
        boundary = db.execute("SELECT started_at, id FROM incidents ORDER BY started_at DESC, id DESC "
                              "LIMIT 1 OFFSET ?", [int(keep) - 1]).fetchone() if keep > 0 else None
        limits = []
        if boundary is not None:
            limits.append("(started_at, id) < (:keep_at, :keep_id)")
        if cutoff is not None:
            limits.append("started_at < :cutoff")
        if not limits:  # fewer incidents than `keep`, no age limit
            return 0, None
        query = (
            "SELECT id, started_at, status FROM incidents WHERE status != 'open' "
            f"AND ({' OR '.join(limits)}) AND (started_at, id) > (:after_at, :after_id) "
            "ORDER BY started_at, id")
        params = {"keep_at": boundary[0] if boundary else None, "keep_id": boundary[1] if boundary else None,
                  "cutoff": cutoff, "after_at": after[0] if after else -1e300, "after_id": after[1] if after else -1}
        doomed: list[int] = []
        last: tuple[float, int] | None = None
        # Candidates in index order; the protected ones are skipped here (few SELECTs per batch,
        # each on an index), so the walk stops after `limit` deletable ones.
        for incident_id, started_at, status in db.execute(query, params):
            last = (started_at, incident_id)
            if _protected(db, incident_id, status):
                continue
            doomed.append(incident_id)
            if limit is not None and len(doomed) >= limit:
                break
        else:
            last = None  # walked to the end: nothing prunable past here
        for start in range(0, len(doomed), 500):  # SQLite caps the number of parameters
            chunk = doomed[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            db.execute(f"DELETE FROM steps WHERE incident_id IN ({marks})", chunk)
            db.execute(f"DELETE FROM incidents WHERE id IN ({marks})", chunk)
    return len(doomed), last


def _protected(db, incident_id: int, status: str) -> bool:
    """An escalated incident nobody acknowledged, or one a recorded remediation refers to."""
    if status == "escalated" and db.execute(
            "SELECT 1 FROM steps WHERE incident_id = ? AND step = ? LIMIT 1",
            [incident_id, ACKNOWLEDGED]).fetchone() is None:
        return True
    return db.execute("SELECT 1 FROM applications WHERE incident_id = ? LIMIT 1",
                      [incident_id]).fetchone() is not None


@dataclass
class Retention:
    """The daemon's pruning schedule: `tick()` on every loop turn is cheap unless one is due.

    `store()` is the store in use now (a DurableStore: its `current`, which the daemon may replace
    when the database was lost), `settings()` the
    [incidents] section now (a SIGHUP reload may change it); times come from `clock` (the
    daemon's: `monotonic()` and `time()`).
    """

    store: Callable[[], Any]
    settings: Callable[[], Settings]
    clock: Any = time
    interval_s: float = INTERVAL_S
    batch: int = BATCH
    runs: list[tuple[float, int]] = field(default_factory=list)  # (monotonic at, deleted) per batch
    _next_at: float = field(default=float("-inf"), init=False)  # due at the first turn: the start
    _backlog: bool = field(default=False, init=False)
    _after: tuple[float, int] | None = field(default=None, init=False)  # where the sweep goes on

    def tick(self) -> int:
        """Prune one batch when due (start, hourly, or a backlog left); never raises."""
        now = self.clock.monotonic()
        if now < self._next_at and not self._backlog:
            return 0
        settings = self.settings()
        store = self.store()
        store = getattr(store, "current", store)  # a DurableStore: the Store it uses now
        if store.db.conn.in_transaction:  # a turn inside someone's write: not now, next turn
            return 0
        max_age_s = settings.max_age_days * DAY_S if settings.max_age_days else None
        try:
            deleted, self._after = sweep(store, settings.keep, max_age_s, now=self.clock.time(),
                                         limit=self.batch, after=self._after)
        except (StoreError, sqlite3.Error) as error:  # a full disk, a lock: try again next interval
            log.warning("incidents.prune_failed", error=str(error), retry_in_s=self.interval_s)
            self._backlog, self._after, self._next_at = False, None, now + self.interval_s
            return 0
        self.runs.append((now, deleted))
        self._backlog = self._after is not None
        if not self._backlog:
            self._next_at = now + self.interval_s
        if deleted:
            log.info("incidents.pruned", deleted=deleted, more=self._backlog, keep=settings.keep,
                     max_age_days=settings.max_age_days)
        return deleted
