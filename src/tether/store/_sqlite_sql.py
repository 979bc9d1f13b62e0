"""The statements only the SQLite backend runs — the guarded append, multi-row inserts, ranged
reads — and the shared ones (``_sql.py``) as SQLite takes them."""

from __future__ import annotations

import functools

from tether.store import _sql

__all__ = [
    "INSERT_FIRST",
    "INSERT_FIRST_FENCED",
    "INSERT_NEXT",
    "READ_FROM",
    "READ_RANGE",
    "ROWS_PER_STATEMENT",
    "SQL",
    "insert_rows",
]

# A stream's first event is written by create_task (a fork's too, at its fork point + 1), so the
# predecessor of an appended event is always in the stream's own rows.
INSERT_FIRST = (
    "INSERT INTO events (task, seq, type, schema, at, data, fence) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 "
    "WHERE EXISTS (SELECT 1 FROM events WHERE task = ?1 AND seq = ?2 - 1)"
)
INSERT_FIRST_FENCED = (
    "INSERT INTO events (task, seq, type, schema, at, data, fence) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 "
    "WHERE (SELECT lease_token FROM tasks WHERE id = ?1) = ?7 "
    "AND EXISTS (SELECT 1 FROM events WHERE task = ?1 AND seq = ?2 - 1)"
)
READ_FROM = "SELECT seq, type, schema, at, data, fence FROM events WHERE task = ? AND seq > ? ORDER BY seq"
READ_RANGE = (
    "SELECT seq, type, schema, at, data, fence FROM events WHERE task = ? AND seq > ? AND seq <= ? ORDER BY seq"
)
SQL = _sql.Statements()  # the statements shared with PostgreSQL; the claim needs no row lock here
INSERT_NEXT = "INSERT INTO events (task, seq, type, schema, at, data, fence) VALUES (?, ?, ?, ?, ?, ?, ?)"
ROWS_PER_STATEMENT = 128  # 7 parameters a row: well under SQLite's oldest limit of 999 per statement


@functools.cache
def insert_rows(count: int) -> str:
    """One INSERT of ``count`` event rows."""
    return INSERT_NEXT + ", (?, ?, ?, ?, ?, ?, ?)" * (count - 1)
