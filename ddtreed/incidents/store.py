"""`Store`: the one object the daemon and the CLI use to read and write the incident database."""

from __future__ import annotations

from .state import StateMixin
from .timeline import IncidentsMixin


class Store(IncidentsMixin, StateMixin):
    """Incidents, steps, applications, frozen signatures, baselines, goldens, degraded state.

    `Store(path)` creates the file 0600 (its directory 0700) and applies pending migrations;
    `Store(path, create=False)` raises StoreError(reason="missing") instead of creating it.
    Every write is one transaction; SQLite failures become `StoreError` with a one-line message.
    """
