"""The few sqlite-utils calls the store makes, on the standard library's `sqlite3` alone.

`ddtreed run` keeps its incident store open for its whole life; sqlite-utils would bring click,
dateutil, pluggy and ~60 modules with it (3.8 MB of the daemon's RSS, issue 19) for the dozen
methods used here. `Database` offers exactly those, with the same SQL and the same effects:
the tables, indexes and columns it creates read back from `sqlite_master` as sqlite-utils (4.x)
writes them, rows are written with the same statements and values (dict/list/tuple as JSON, as
sqlite-utils' `jsonify_if_needed`), and a statement run outside a transaction is committed at
once. tests/test_incidents_lite.py runs the same store writes through both and compares the
files, schema and rows.

Not a general library: anything the store does not use raises instead of guessing.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import sys
from typing import Any, Iterable, Iterator, Mapping, Sequence

COLUMN_TYPES = {int: "INTEGER", str: "TEXT", float: "REAL", bytes: "BLOB", bool: "INTEGER"}
_PLAIN = (type(None), int, float, str, bytes)
_TRANSACTION_CONTROL = {"BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"}


class NotFoundError(LookupError):
    """`update()` of a row that is not there (the store checks first: `StoreBase._require`)."""


def quote(identifier: str) -> str:
    return '"{}"'.format(identifier.replace('"', '""'))


def _first_keyword(sql: str) -> str:
    words = sql.lstrip().split(None, 1)
    return words[0].upper().rstrip(";") if words else ""


def value_of(value: Any) -> Any:
    """What sqlite-utils stores for `value`: JSON for dict/list/tuple, ISO text for dates, str for
    a UUID or timedelta, float for a Decimal; anything else as it is."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=repr, ensure_ascii=False)
    # Only a module that is loaded can have made the value: no import for the check.
    decimal, datetime, uuid = (sys.modules.get(name) for name in ("decimal", "datetime", "uuid"))
    if decimal is not None and isinstance(value, decimal.Decimal):
        return float(value)
    if datetime is not None and isinstance(value, (datetime.time, datetime.date, datetime.datetime)):
        return value.isoformat()
    if (datetime is not None and isinstance(value, datetime.timedelta)) or \
            (uuid is not None and isinstance(value, uuid.UUID)):
        return str(value)
    return value


class Database:
    """A connection with sqlite-utils' `execute`/`query`/`[table]` subset (see the module doc)."""

    def __init__(self, connection: sqlite3.Connection):
        self.conn = connection
        self.execute("PRAGMA recursive_triggers=on;")  # as sqlite-utils sets it on every connection

    def execute(self, sql: str, parameters: Sequence | Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        """Run one statement; a write outside a transaction is committed at once."""
        was_in_transaction = self.conn.in_transaction
        try:
            cursor = self.conn.execute(sql) if parameters is None else self.conn.execute(sql, parameters)
        except Exception:
            if not was_in_transaction and self.conn.in_transaction:
                self.conn.execute("ROLLBACK")  # the implicit transaction of a failed statement
            raise
        if not was_in_transaction and self.conn.in_transaction and cursor.description is None \
                and _first_keyword(sql) not in _TRANSACTION_CONTROL:
            self.conn.execute("COMMIT")
        return cursor

    def query(self, sql: str, parameters: Sequence | Mapping[str, Any] | None = None) -> Iterator[dict]:
        """Rows of a SELECT as dicts (the statement runs now; rows are fetched as iterated)."""
        cursor = self.conn.execute(sql) if parameters is None else self.conn.execute(sql, parameters)
        if cursor.description is None:
            raise ValueError("query() is for statements that return rows; use execute()")
        keys = [column[0] for column in cursor.description]
        return (dict(zip(keys, row)) for row in cursor)

    @property
    def journal_mode(self) -> str:
        return self.execute("PRAGMA journal_mode;").fetchone()[0]

    def enable_wal(self) -> None:
        if self.journal_mode == "wal":
            return
        if self.conn.in_transaction:
            raise sqlite3.OperationalError("cannot switch to WAL inside a transaction")
        with self._autocommit():
            self.execute("PRAGMA journal_mode=wal;")

    def table_names(self) -> list[str]:
        return [row[0] for row in self.execute("select name from sqlite_master where type = 'table'").fetchall()]

    def close(self) -> None:
        self.conn.close()

    def __getitem__(self, name: str) -> "Table":
        return Table(self, name)

    @contextlib.contextmanager
    def _autocommit(self) -> Iterator[None]:
        level = self.conn.isolation_level
        self.conn.isolation_level = None
        try:
            yield
        finally:
            self.conn.isolation_level = level


class Table:
    def __init__(self, db: Database, name: str):
        self.db, self.name = db, name

    def exists(self) -> bool:
        return self.name in self.db.table_names()

    @property
    def count(self) -> int:
        return self.db.execute(f"select count(*) from {quote(self.name)}").fetchone()[0]

    def create(self, columns: Mapping[str, type], pk: str | None = None, not_null: Iterable[str] = (),
               defaults: Mapping[str, Any] | None = None,
               foreign_keys: Iterable[tuple[str, str, str]] = ()) -> "Table":
        """CREATE TABLE as sqlite-utils writes it: one column a line, PRIMARY KEY, NOT NULL,
        DEFAULT 'text', REFERENCES "table"("column") in that order."""
        not_null, defaults = set(not_null), dict(defaults or {})
        references = {}
        for column, other_table, other_column in foreign_keys:
            references[column] = f"REFERENCES {quote(other_table)}({quote(other_column)})"
        unknown = (not_null | set(defaults) | set(references) | ({pk} if pk else set())) - set(columns)
        if unknown:
            raise ValueError(f"{self.name}: no such columns {sorted(unknown)}")
        lines = []
        for column, kind in columns.items():
            extras = ["PRIMARY KEY"] if column == pk else []
            if column in not_null:
                extras.append("NOT NULL")
            if defaults.get(column) is not None:
                extras.append(f"DEFAULT {_default(defaults[column])}")
            if column in references:
                extras.append(references[column])
            lines.append(f"   {quote(column)} {COLUMN_TYPES[kind]}" + "".join(" " + extra for extra in extras))
        columns_sql = ",\n".join(lines)
        self.db.execute(f"CREATE TABLE {quote(self.name)} (\n{columns_sql}\n);\n        ")
        return self

    def create_index(self, columns: Sequence[str], index_name: str | None = None,
                     unique: bool = False) -> "Table":
        name = index_name or "idx_{}_{}".format(self.name.replace(" ", "_"), "_".join(columns))
        self.db.execute("CREATE {}INDEX {}\n    ON {} ({});".format(
            "UNIQUE " if unique else "", quote(name), quote(self.name), ", ".join(map(quote, columns))))
        return self

    def add_column(self, name: str, kind: type = str) -> "Table":
        self.db.execute(f"ALTER TABLE {quote(self.name)} ADD COLUMN {quote(name)} {COLUMN_TYPES[kind]};")
        return self

    def insert(self, row: Mapping[str, Any]) -> "Table":
        names = sorted(row)
        self.db.execute(f"INSERT INTO {quote(self.name)} ({', '.join(map(quote, names))}) "
                        f"VALUES ({', '.join('?' for _ in names)})", [value_of(row[name]) for name in names])
        return self

    def upsert(self, row: Mapping[str, Any], pk: str) -> "Table":
        """Insert, or update every given column of the row with this primary key."""
        if row.get(pk) is None:
            raise ValueError(f"{self.name}: upsert() needs a value for the primary key {pk}")
        names = sorted(row)
        others = [name for name in names if name != pk]
        action = ("DO UPDATE SET " + ", ".join(f"{quote(name)} = excluded.{quote(name)}" for name in others)
                  if others else "DO NOTHING")
        self.db.execute(f"INSERT INTO {quote(self.name)} ({', '.join(map(quote, names))}) "
                        f"VALUES ({', '.join('?' for _ in names)}) ON CONFLICT({quote(pk)}) {action}",
                        [value_of(row[name]) for name in names])
        return self

    def update(self, pk_value: Any, changes: Mapping[str, Any]) -> "Table":
        """UPDATE the row whose primary key is `pk_value` (NotFoundError when there is none)."""
        [pk] = self._primary_key()
        if not changes:
            if self.db.execute(f"select 1 from {quote(self.name)} where {quote(pk)} = ?", [pk_value]).fetchone():
                return self
            raise NotFoundError(f"{self.name}: no row {pk_value!r}")
        sets = ", ".join(f"{quote(name)} = ?" for name in changes)
        cursor = self.db.execute(f"update {quote(self.name)} set {sets} where {quote(pk)} = ?",
                                 [value_of(value) for value in changes.values()] + [pk_value])
        if cursor.rowcount != 1:
            raise NotFoundError(f"{self.name}: no row {pk_value!r}")
        return self

    def _primary_key(self) -> list[str]:
        columns = self.db.execute(f"PRAGMA table_info({quote(self.name)})").fetchall()
        return [row[1] for row in sorted((row for row in columns if row[5]), key=lambda row: row[5])]


def _default(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    raise ValueError(f"a DEFAULT the store does not use: {value!r}")
