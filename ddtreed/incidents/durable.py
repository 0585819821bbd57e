"""The incident store for a long-running loop: writes wait out a full disk or a lock."""

from __future__ import annotations

from typing import Callable

import structlog

from .connection import StoreError
from .store import Store

log = structlog.get_logger(__name__)

RETRY_INITIAL_S = 1.0
RETRY_MAX_S = 30.0


class DurableStore:
    """A Store whose calls retry a retryable StoreError (disk full, locked, I/O) with backoff.

    `wait(seconds)` is how the caller waits (the daemon answers signals and the watchdog
    meanwhile); anything not retryable is raised. Nothing already recorded is lost: each call
    is one transaction.
    """

    def __init__(self, store: Store, wait: Callable[[float], None]):
        self._store = store
        self._wait = wait

    def __getattr__(self, name: str):
        method = getattr(self._store, name)
        if not callable(method):
            return method

        def durable(*args, **kwargs):
            delay = RETRY_INITIAL_S
            while True:
                try:
                    return method(*args, **kwargs)
                except StoreError as error:
                    if not error.retryable:
                        raise
                    log.error("store_write_failed", call=name, error=str(error), retry_in_s=delay,
                              hint="free space in the state dir (or release the lock); ddtreed retries")
                    self._wait(delay)
                    delay = min(delay * 2, RETRY_MAX_S)

        return durable
