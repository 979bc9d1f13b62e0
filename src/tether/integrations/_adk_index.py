"""Which streams an ADK listing holds and where each stands, in one narrow read.

``Store.list_tasks`` answers with whole :class:`~tether.store.TaskRow`\\ s: eighteen fields, a
``TaskRow`` built for each, every session of every app, and each row's newest event looked up twice
(its time and its seq). ``list_sessions`` needs three columns of its own app's sessions: the id, when
the stream was made (a session deleted and made again under the same id is another), and its
version; the time of its last update it keeps with the state it caches for that version. On the SQL
backends this reads those three, filtered on the id's prefix in the database; on any other store it
falls back to ``list_tasks``.

The version follows ``TASK_COLUMNS`` (``store/_sql.py``): the index row is brought up to its newest
event only every ``HEAD_EVERY``-th event, so the newest event's seq is read off the events' primary
key, as the store's own row read does. ``tests/integrations/test_adk_listing.py`` holds this read
to ``list_tasks``' answer on every backend.

It uses the SQL backends' connections from outside ``store/``: a stopgap until the store offers such
a read itself (``list_tasks`` returning chosen columns, filtered on an id prefix).
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

from tether.store import Store, TaskFilter
from tether.store._sql import pyformat

__all__ = ["StreamPosition", "stream_positions"]

StreamPosition = tuple[str, float, int]
"""A stream's id, when it was created, and its version (its newest event's seq)."""

# The newest event's seq as the last row of the stream's range of the events' primary key (a tenth
# quicker in SQLite than max(seq), which reads the same row).
_POSITIONS = """
SELECT t.task_id, t.created_at,
       COALESCE((SELECT e.seq FROM events e WHERE e.task = t.id ORDER BY e.seq DESC LIMIT 1), t.version)
FROM tasks t
WHERE t.tenant = ? AND t.type = ? AND substr(t.task_id, 1, ?) = ?
"""
# With the user too, the database reads its index on (tenant, user_id) rather than every session.
_OF_USER = " AND t.user_id = ?"
# SQLite compares text bytewise, so the ids with a prefix are a range of its index on (tenant,
# task_id): quicker than a scan when they are a small part of the table (a scan is quicker for most
# of it). In PostgreSQL the order depends on the database's collation, where a range is no prefix.
_IN_RANGE = " AND t.task_id >= ? AND t.task_id < ?"
_LIMIT = 10_000_000


def stream_positions(
    store: Store, tenant: str, type: str, prefix: str, *, user_id: str | None = None, few: bool = False
) -> list[StreamPosition]:
    """Every stream of ``type`` (and ``user_id``, if given) whose id starts with ``prefix`` (not
    empty), in no particular order. ``few``: they are a small part of the table."""
    query = _POSITIONS
    params: list[Any] = [tenant, type, len(prefix), prefix]
    if user_id is not None:
        query, params = query + _OF_USER, [*params, user_id]
    # A backend's module is imported if, and only if, a store of it exists: none is imported here.
    sqlite_backend, postgres = sys.modules.get("tether.store.sqlite"), sys.modules.get("tether.store.postgres")
    if sqlite_backend is not None and isinstance(store, sqlite_backend.SQLiteStore):
        if few and user_id is None:
            following = prefix[:-1] + chr(ord(prefix[-1]) + 1)  # the first id past every id with the prefix
            query, params = query + _IN_RANGE, [*params, prefix, following]
        try:
            with store._lock:  # the store's connection serves one thread at a time
                rows: list[StreamPosition] = store._conn.execute(query, params).fetchall()
            return rows
        except sqlite3.Error:
            pass  # the store's own read, below, raises it as the store's error
    if postgres is not None and isinstance(store, postgres.PostgresStore):
        statement = pyformat(query)
        found: list[StreamPosition] = store._run(lambda conn: conn.execute(statement, params).fetchall())
        return found
    rows_of_type = store.list_tasks(tenant, TaskFilter(type=type, user_id=user_id), limit=_LIMIT)
    return [(r.task_id, r.created_at, r.version) for r in rows_of_type if r.task_id.startswith(prefix)]
