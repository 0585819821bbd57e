"""Opening a SQLite file for reading only, with the standard library alone.

Shared by the incident store (`incidents.connection.connect_read_only`) and `ddtreed status`'s
reader (`cli/status_read.py`), which must start without importing sqlite-utils.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the readers start fast)
if TYPE_CHECKING:
    from typing import Any


def open_read_only(path: Path, timeout_s: float, **connect_options: Any) -> sqlite3.Connection:
    """`mode=ro` first (it still sees what a live daemon's WAL holds); where SQLite cannot even
    create the WAL index beside the file (a read-only directory), `immutable=1`, which reads the
    file as it lies and takes no locks. The last sqlite3.Error when neither opens."""
    uri = path.resolve().as_uri()
    failure: sqlite3.Error | None = None
    for options in ("mode=ro", "immutable=1"):
        try:
            connection = sqlite3.connect(f"{uri}?{options}", uri=True, timeout=timeout_s, **connect_options)
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as error:
            failure = error
            continue
        return connection
    assert failure is not None
    raise failure
