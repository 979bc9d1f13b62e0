"""The SQL the two SQL backends share: the task index's columns and statements, the claim, the
ledger and lease statements, the task filter, the text of payloads and of schema refusals.

Statements are written once with SQLite's ``?`` placeholders; the PostgreSQL backend turns them
into psycopg's with :func:`pyformat` when it is imported. What differs between the databases —
the migrations' types, the guarded append, row locking (``FOR UPDATE SKIP LOCKED``), wake-ups
(``LISTEN/NOTIFY`` against ``PRAGMA data_version``) — stays in each backend.
"""

from __future__ import annotations

from typing import Any

from tether.errors import SchemaVersionError
from tether.store.base import TaskFilter, TaskRow

__all__ = [
    "ACQUIRE_LEASE",
    "CHILD_OF",
    "DELETE_EVENTS",
    "DELETE_SNAPSHOT",
    "DELETE_SNAPSHOTS",
    "DELETE_TASK",
    "FORGET_LEDGER",
    "INSERT_TASK",
    "LATEST_SNAPSHOT",
    "LEDGER",
    "LEDGER_BEGIN",
    "LEDGER_RUN_AGAIN",
    "PARENT_OF",
    "RELEASE_LEASE",
    "RENAME_TASK",
    "RENEW_LEASE",
    "SELECT_TASK",
    "TASK_ID",
    "TASK_TAKEN",
    "VERSION_OF",
    "claim_statement",
    "claim_values",
    "list_tasks_query",
    "newer_schema",
    "pyformat",
    "task_values",
    "text",
]

# A task's index row as TaskRow reads it: its version and last change come from its newest event
# (a fork with no events of its own yet is at its fork point).
TASK_COLUMNS = """
    t.task_id, t.tenant, t.type, t.status, t.user_id, t.session_id, t.created_at,
    COALESCE((SELECT at FROM events e WHERE e.task = t.id ORDER BY seq DESC LIMIT 1), t.created_at),
    COALESCE((SELECT max(seq) FROM events e WHERE e.task = t.id), t.parent_seq, 0),
    p.task_id, t.parent_seq, t.lease_owner, t.lease_expires, t.lease_token, t.wake_at
"""
_FROM_TASKS = "FROM tasks t LEFT JOIN tasks p ON p.id = t.parent"
SELECT_TASK = f"SELECT {TASK_COLUMNS} {_FROM_TASKS} WHERE t.tenant = ? AND t.task_id = ?"

TASK_ID = "SELECT id FROM tasks WHERE tenant = ? AND task_id = ?"
TASK_TAKEN = "SELECT 1 FROM tasks WHERE tenant = ? AND task_id = ?"
PARENT_OF = "SELECT parent, parent_seq FROM tasks WHERE id = ?"
CHILD_OF = "SELECT 1 FROM tasks WHERE parent = ?"
RENAME_TASK = "UPDATE tasks SET task_id = ? WHERE id = ?"
INSERT_TASK = (
    "INSERT INTO tasks (tenant, task_id, type, status, user_id, session_id, created_at, "
    "parent, parent_seq, wake_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# A stream's version: its newest event, else (a fork with none of its own yet) its fork point.
VERSION_OF = (
    "SELECT COALESCE((SELECT max(seq) FROM events WHERE task = ?), (SELECT parent_seq FROM tasks WHERE id = ?), 0)"
)
DELETE_EVENTS = "DELETE FROM events WHERE task = ?"
DELETE_SNAPSHOTS = "DELETE FROM snapshots WHERE task = ?"
DELETE_TASK = "DELETE FROM tasks WHERE id = ?"

LATEST_SNAPSHOT = (
    "SELECT seq, schema, checksum, data FROM snapshots WHERE task = ? AND seq <= ? ORDER BY seq DESC LIMIT 1"
)
DELETE_SNAPSHOT = "DELETE FROM snapshots WHERE task = ? AND seq = ?"

LEDGER = "SELECT key, status, result, started_at, finished_at, runs FROM ledger WHERE tenant = ? AND key = ?"
LEDGER_BEGIN = "INSERT INTO ledger (tenant, key, status, started_at, runs) VALUES (?, ?, 'started', ?, 1)"
LEDGER_RUN_AGAIN = "UPDATE ledger SET runs = runs + 1 WHERE tenant = ? AND key = ?"
FORGET_LEDGER = "DELETE FROM ledger WHERE tenant = ? AND key = ?"

# A lease is taken when nobody holds it, when it ran out, or from a holder known to be dead.
ACQUIRE_LEASE = (
    "UPDATE tasks SET lease_owner = ?, lease_expires = ?, lease_token = lease_token + 1 "
    "WHERE id = ? AND (lease_owner IS NULL OR lease_expires <= ? OR lease_owner = ?) "
    "RETURNING lease_token"
)
RENEW_LEASE = "UPDATE tasks SET lease_expires = ? WHERE id = ? AND lease_token = ? AND lease_owner IS NOT NULL"
RELEASE_LEASE = "UPDATE tasks SET lease_owner = NULL, lease_expires = NULL WHERE id = ? AND lease_token = ?"

_CLAIM = """
UPDATE tasks SET lease_owner = ?, lease_expires = ?, lease_token = lease_token + 1
WHERE id = (
    SELECT id FROM tasks
    WHERE tenant = ?
      AND (lease_owner IS NULL OR lease_expires <= ?)
      AND (status IN ('pending', 'running')
           OR (status IN ('sleeping', 'awaiting_input') AND wake_at <= ?))
    ORDER BY COALESCE(wake_at, created_at)
    LIMIT 1{lock}
)
RETURNING task_id, lease_token
"""


def claim_statement(*, lock: str = "") -> str:
    """The claim: take the lease of the runnable task that is due first. ``lock`` is how the
    database keeps two claimers off one row (PostgreSQL: ``FOR UPDATE SKIP LOCKED``; SQLite
    needs none, its writers take turns)."""
    return _CLAIM.format(lock=f"\n    {lock}" if lock else "")


def claim_values(tenant: str, owner: str, ttl: float, now: float) -> tuple[Any, ...]:
    """The claim's parameters, in its placeholders' order."""
    return (owner, now + ttl, tenant, now, now)


def task_values(tenant: str, row: TaskRow, parent: int | None, *, wake_at: float | None) -> tuple[Any, ...]:
    """:data:`INSERT_TASK`'s parameters for ``row``, under the row id of its parent stream."""
    return (
        tenant,
        row.task_id,
        row.type,
        row.status,
        row.user_id,
        row.session_id,
        row.created_at,
        parent,
        row.parent_seq,
        wake_at,
    )


def list_tasks_query(tenant: str, flt: TaskFilter, *, limit: int, offset: int) -> tuple[str, list[Any]]:
    """The statement and parameters that list ``tenant``'s tasks matching ``flt``, newest first."""
    where = ["t.tenant = ?"]
    params: list[Any] = [tenant]
    if flt.status is not None:
        where.append(f"t.status IN ({', '.join('?' * len(flt.status))})")
        params.extend(flt.status)
    for column, value in (("type", flt.type), ("user_id", flt.user_id), ("session_id", flt.session_id)):
        if value is not None:
            where.append(f"t.{column} = ?")
            params.append(value)
    if flt.type is None and not flt.internal:
        where.append("t.type NOT LIKE 'tether.%'")
    if flt.created_after is not None:
        where.append("t.created_at >= ?")
        params.append(flt.created_after)
    if flt.created_before is not None:
        where.append("t.created_at < ?")
        params.append(flt.created_before)
    params.extend([limit, offset])
    query = (
        f"SELECT {TASK_COLUMNS} {_FROM_TASKS} WHERE {' AND '.join(where)} "
        "ORDER BY t.created_at DESC, t.task_id DESC LIMIT ? OFFSET ?"
    )
    return query, params


def pyformat(statement: str) -> str:
    """A statement written with ``?`` placeholders in psycopg's style: ``%s``, and ``%`` doubled.
    The shared statements hold no ``?`` inside a literal."""
    return statement.replace("%", "%%").replace("?", "%s")


def text(data: str | bytes) -> str:
    """A payload as text: stored as TEXT so the database's JSON functions work on it."""
    return data.decode() if isinstance(data, bytes) else data


def newer_schema(where: str, found: int, supported: int) -> SchemaVersionError:
    """The refusal of a database written by a newer tether than this one."""
    return SchemaVersionError(
        f"{where} has tether schema version {found}, but this tether knows "
        f"versions up to {supported}; upgrade tether (pip install -U tether)",
        found=found,
        supported=supported,
    )
