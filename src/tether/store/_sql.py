"""The SQL the two SQL backends share: the task index's columns and statements, the claim, the
ledger and lease statements, the task filter, the text of payloads and of schema refusals.

Statements are written once with SQLite's ``?`` placeholders; the PostgreSQL backend turns them
into psycopg's with :func:`pyformat` when it is imported. What differs between the databases —
the migrations' types, the guarded append, row locking (``FOR UPDATE SKIP LOCKED``), wake-ups
(``LISTEN/NOTIFY`` against ``PRAGMA data_version``) — stays in each backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from tether.errors import SchemaVersionError
from tether.store.base import FINISHED, EventRow, TaskFilter, TaskRow, WorkerRow

__all__ = [
    "ARCHIVED_INERT",
    "CLAIMABLE",
    "DUE",
    "FINISHED_SQL",
    "HEAD_EVERY",
    "ID_ORDER",
    "LISTED",
    "PARKED_COLUMN",
    "SCALE_INDEXES",
    "TASK_COLUMNS",
    "WORKERS_TABLE",
    "Statements",
    "claim_statement",
    "claim_values",
    "count_tasks_query",
    "id_range",
    "lease_holders_query",
    "list_tasks_query",
    "newer_schema",
    "positions_query",
    "pyformat",
    "settle_values",
    "task_values",
    "text",
    "worker_row",
    "worker_values",
]

HEAD_EVERY = 64
"""How often (in events) the store brings a task's row up to its newest event by itself.

A task's row keeps its version, last change and committed calls *as of* its ``version`` column:
the store moves them with every index change and every ``HEAD_EVERY``-th event, not with every
append, so the common append writes its event alone (one row, one page: a row update with every
append would write a second page for each; docs/performance.md has what it cost). A read adds
what came after: the newest event's seq and time off the events' primary key, and the
``CallCompleted`` events after the row's version, of which there are fewer than ``HEAD_EVERY``."""

# A task's index row as TaskRow reads it: the row, brought up to its newest event (see HEAD_EVERY),
# and its parent's id.
TASK_COLUMNS = """
    t.task_id, t.tenant, t.type, t.status, t.user_id, t.session_id, t.created_at,
    COALESCE((SELECT e.at FROM events e WHERE e.task = t.id ORDER BY e.seq DESC LIMIT 1), t.updated_at),
    COALESCE((SELECT max(e.seq) FROM events e WHERE e.task = t.id), t.version),
    p.task_id, t.parent_seq, t.lease_owner, t.lease_expires, t.lease_token, t.wake_at,
    t.calls_done + (SELECT count(*) FROM events e WHERE e.task = t.id AND e.seq > t.version
                    AND e.type = 'CallCompleted'),
    t.summary, t.output, t.parked
"""
_FROM_TASKS = "FROM tasks t LEFT JOIN tasks p ON p.id = t.parent"

LISTED = "type NOT LIKE 'tether.%'"
"""The tasks a listing shows when no type is asked for (tether's own streams left out): the term the
listing says and the listed tasks' index is made for, word for word (SQLite reads a partial index
only for a query that says what the index says)."""

# When an unfinished task is due: a pending or running one at its wake-up time if it has one (an
# answer, a cancel), else at its creation; a sleeping or waiting one at its wake-up time, never
# without one (a wait with no timeout is woken by its answer). The claim reads the index of this
# (``tasks_due``) in order from the oldest and stops at the first task it may take: tasks not due yet
# and waits without a timeout are never read (a claim that read every unfinished task of the tenant
# would cost more with every task waiting or asleep; docs/workers.md), and a task another
# claimer is taking is skipped for the next, so two claimers never wait on each other. A claim takes
# tasks only (LISTED): tether's own streams are never run, whatever their row says (a conversation's
# branch made by a fork read "pending" before a branch kept its stream's status).
CLAIMABLE = "status IN ('pending', 'running', 'sleeping', 'awaiting_input')"
DUE = "(CASE WHEN status IN ('pending', 'running') THEN COALESCE(wake_at, created_at) ELSE wake_at END)"
_CLAIM = f"""
UPDATE tasks SET lease_owner = ?, lease_expires = ?, lease_token = lease_token + 1
WHERE id = (
    SELECT id FROM tasks
    WHERE tenant = ? AND {CLAIMABLE} AND {DUE} <= ?
      AND (lease_owner IS NULL OR lease_expires <= ?) AND {LISTED} AND parked IS NULL
    ORDER BY {DUE}
    LIMIT 1{{lock}}
)
RETURNING task_id, lease_token
"""


# The indexes that keep a claim, a fork check (a task's children, before its history goes), a
# listing of one type (LangGraph's threads, ADK's sessions) and a listing of tasks (tether's own
# streams left out, as list_tasks_query says it) from reading every task; both backends'
# migrations create them as written.
SCALE_INDEXES = f"""
CREATE INDEX tasks_due ON tasks (tenant, {DUE}) WHERE {CLAIMABLE};
CREATE INDEX tasks_by_parent ON tasks (parent) WHERE parent IS NOT NULL;
CREATE INDEX tasks_by_type ON tasks (tenant, type, created_at);
CREATE INDEX tasks_by_type_user ON tasks (tenant, type, user_id, created_at);
CREATE INDEX tasks_listed ON tasks (tenant, created_at) WHERE {LISTED};
"""


def claim_statement(*, lock: str = "") -> str:
    """The claim: take the lease of the runnable task that is due first (see :func:`claim_values`).
    ``lock`` is how the database keeps two claimers off one row (PostgreSQL: ``FOR UPDATE SKIP
    LOCKED``; SQLite needs none, its writers take turns)."""
    return _CLAIM.format(lock=f"\n    {lock}" if lock else "")


FINISHED_SQL = ", ".join(f"'{status}'" for status in sorted(FINISHED))
"""The statuses a task ends in (``store.base.FINISHED``), as an SQL list."""

PARKED_COLUMN = "ALTER TABLE tasks ADD COLUMN parked TEXT;"
"""The migration that gives a task's row its mark of needing attention (``TaskRow.parked``)."""

WORKERS_TABLE = """
CREATE TABLE workers (
    tenant     TEXT NOT NULL,
    worker_id  TEXT NOT NULL,
    app        TEXT,
    started_at {time} NOT NULL,
    seen_at    {time} NOT NULL,
    stopped_at {time},
    PRIMARY KEY (tenant, worker_id)
);
CREATE INDEX workers_seen ON workers (tenant, seen_at);
"""
"""The migration that keeps the workers' liveness records (``Store.record_worker``), ``{time}`` the
database's type for an epoch in seconds with its fraction."""

ARCHIVED_INERT = (
    "UPDATE tasks SET wake_at = NULL, lease_owner = NULL, lease_expires = NULL, status = 'cancelled' "
    f"WHERE status NOT IN ({FINISHED_SQL}) AND id IN (SELECT task FROM events WHERE type = 'TaskArchived')"
)
"""The migration that makes the branches rewinds set aside before they were made inert (see
``Statements.rename_task``) inert too: a worker took a waiting or sleeping one when due."""


@dataclass(frozen=True, slots=True)
class Statements:
    """The statements both backends run, as written for SQLite (``?``); :meth:`in_pyformat` gives
    them in psycopg's placeholders."""

    claim: str = claim_statement()
    select_task: str = f"SELECT {TASK_COLUMNS} {_FROM_TASKS} WHERE t.tenant = ? AND t.task_id = ?"
    task_id: str = "SELECT id FROM tasks WHERE tenant = ? AND task_id = ?"
    task_taken: str = "SELECT 1 FROM tasks WHERE tenant = ? AND task_id = ?"
    parent_of: str = "SELECT parent, parent_seq FROM tasks WHERE id = ?"
    child_of: str = "SELECT 1 FROM tasks WHERE parent = ?"
    # A rewind's set-aside branch: renamed, and inert (as its TaskArchived folds it): cancelled unless it
    # had finished, no wake-up, no lease; no worker takes it again.
    rename_task: str = (
        "UPDATE tasks SET task_id = ?, wake_at = NULL, lease_owner = NULL, lease_expires = NULL, "
        f"status = CASE WHEN status IN ({FINISHED_SQL}) THEN status ELSE 'cancelled' END WHERE id = ?"
    )
    insert_task: str = (
        "INSERT INTO tasks (tenant, task_id, type, status, user_id, session_id, created_at, "
        "parent, parent_seq, wake_at, version, updated_at, calls_done, summary, output, "
        "lease_owner, lease_expires, lease_token) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    # A stream's version: its newest event's seq (the row's for a stream with none), given its id twice.
    version_of: str = (
        "SELECT COALESCE((SELECT max(seq) FROM events WHERE task = ?), (SELECT version FROM tasks WHERE id = ?))"
    )
    move_task: str = "UPDATE tasks SET status = COALESCE(?, status), wake_at = ?, parked = NULL WHERE id = ?"
    # Parked only at the version the run that could not go on saw: a task that moved on meanwhile is not.
    park: str = (
        "UPDATE tasks SET parked = ? WHERE tenant = ? AND task_id = ? "
        "AND COALESCE((SELECT max(seq) FROM events e WHERE e.task = tasks.id), version) = ?"
    )
    # The row brought up to the stream's event ``seq`` at ``at``, committed calls counted on from the
    # row's version (see HEAD_EVERY); parameters (seq, seq, at, id, seq).
    settle_row: str = (
        "UPDATE tasks SET calls_done = calls_done + (SELECT count(*) FROM events e WHERE e.task = tasks.id "
        "AND e.seq > tasks.version AND e.seq <= ? AND e.type = 'CallCompleted'), version = ?, updated_at = ? "
        "WHERE id = ? AND version < ?"
    )
    write_head: str = "UPDATE tasks SET calls_done = ?, summary = ?, output = ? WHERE id = ?"
    delete_events: str = "DELETE FROM events WHERE task = ?"
    delete_snapshots: str = "DELETE FROM snapshots WHERE task = ?"
    delete_task: str = "DELETE FROM tasks WHERE id = ?"
    unfork: str = "UPDATE tasks SET parent = NULL, parent_seq = NULL WHERE id = ?"
    latest_snapshot: str = (
        "SELECT seq, schema, checksum, data FROM snapshots WHERE task = ? AND seq <= ? ORDER BY seq DESC LIMIT 1"
    )
    delete_snapshot: str = "DELETE FROM snapshots WHERE task = ? AND seq = ?"
    ledger: str = "SELECT key, status, result, started_at, finished_at, runs FROM ledger WHERE tenant = ? AND key = ?"
    ledger_begin: str = "INSERT INTO ledger (tenant, key, status, started_at, runs) VALUES (?, ?, 'started', ?, 1)"
    ledger_run_again: str = "UPDATE ledger SET runs = runs + 1 WHERE tenant = ? AND key = ?"
    forget_ledger: str = "DELETE FROM ledger WHERE tenant = ? AND key = ?"
    # A lease is taken when nobody holds it, when it ran out, or from a holder named (known to be dead, or
    # taken from at a version: only while the task is still there, nothing appended by the holder since).
    acquire_lease: str = (
        "UPDATE tasks SET lease_owner = ?, lease_expires = ?, lease_token = lease_token + 1 "
        "WHERE id = ? AND (lease_owner IS NULL OR lease_expires <= ? OR (lease_owner = ? AND (CAST(? AS INTEGER) "
        "IS NULL OR COALESCE((SELECT max(seq) FROM events e WHERE e.task = tasks.id), version) = ?))) "
        "RETURNING lease_token"
    )
    name_session: str = "UPDATE tasks SET session_id = ? WHERE id = ? AND session_id IS NULL"
    record_worker: str = (
        "INSERT INTO workers (tenant, worker_id, app, started_at, seen_at, stopped_at) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (tenant, worker_id) DO UPDATE SET app = excluded.app, started_at = excluded.started_at, "
        "seen_at = excluded.seen_at, stopped_at = excluded.stopped_at"
    )
    forget_workers: str = "DELETE FROM workers WHERE tenant = ? AND seen_at < ?"
    workers: str = (
        "SELECT worker_id, started_at, seen_at, app, stopped_at FROM workers WHERE tenant = ? AND seen_at > ? "
        "ORDER BY seen_at DESC, worker_id LIMIT ?"
    )
    renew_lease: str = "UPDATE tasks SET lease_expires = ? WHERE id = ? AND lease_token = ? AND lease_owner IS NOT NULL"
    release_lease: str = "UPDATE tasks SET lease_owner = NULL, lease_expires = NULL WHERE id = ? AND lease_token = ?"

    def in_pyformat(self) -> Statements:
        """The same statements with psycopg's placeholders."""
        return Statements(**{f.name: pyformat(getattr(self, f.name)) for f in fields(self)})


def claim_values(tenant: str, owner: str, ttl: float, now: float) -> tuple[Any, ...]:
    """The claim's parameters, in its placeholders' order."""
    return (owner, now + ttl, tenant, now, now)


# The owners of the live leases on due tasks whose names start with a prefix (a host's: ``host:``),
# each with one task it holds. It reads the claim's index (``tasks_due``) as far as a claim that finds
# nothing reads it: the due tasks, every one of them held then; never a task not due or finished.
_LEASE_HOLDERS = f"""
SELECT lease_owner, min(task_id) FROM tasks
WHERE tenant = ? AND {CLAIMABLE} AND {DUE} <= ?
  AND lease_owner IS NOT NULL AND (lease_expires IS NULL OR lease_expires > ?)
  AND substr(lease_owner, 1, length(CAST(? AS TEXT))) = ? AND {LISTED}
GROUP BY lease_owner
"""


def lease_holders_query(tenant: str, prefix: str, now: float) -> tuple[str, list[Any]]:
    """The statement and parameters of ``Store.lease_holders``."""
    return _LEASE_HOLDERS, [tenant, now, now, prefix, prefix]


def settle_values(internal: int, last: EventRow) -> tuple[Any, ...]:
    """``settle_row``'s parameters: the row of stream ``internal`` brought up to its event ``last``."""
    return (last.seq, last.seq, last.at, internal, last.seq)


def task_values(
    tenant: str, row: TaskRow, parent: int | None, *, wake_at: float | None, first: EventRow
) -> tuple[Any, ...]:
    """``insert_task``'s parameters for ``row``, under the row id of its parent stream, whose first
    event is ``first`` (its version and last change)."""
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
        first.seq,
        first.at,
        row.calls_done,
        row.summary,
        row.output,
        row.lease_owner,
        row.lease_expires,
        row.lease_token,
    )


def list_tasks_query(
    tenant: str, flt: TaskFilter, *, limit: int, offset: int, collate: str = ""
) -> tuple[str, list[Any]]:
    """The statement and parameters that list ``tenant``'s tasks matching ``flt``, newest first.
    ``collate``: the clause that orders ids by code point (see :func:`id_range`).

    With two statuses or more, each status's newest ``limit + offset`` tasks are read in order from
    the index of statuses, and the page taken from them all: no index gives tasks of several
    statuses in order, and walking every task newest first for the few of the statuses asked for
    (a listing of unfinished tasks among 100,000 finished) read them all."""
    order = f"ORDER BY t.created_at DESC, t.task_id{collate} DESC"  # ties by id in code point order
    if flt.status is None or len(flt.status) < 2:
        where, matching = _matching(tenant, flt, collate)
        return f"SELECT {TASK_COLUMNS} {_FROM_TASKS} WHERE {where} {order} LIMIT ? OFFSET ?", [*matching, limit, offset]
    arms: list[str] = []
    params: list[Any] = []
    for n, status in enumerate(dict.fromkeys(flt.status)):
        where, of_status = _matching(tenant, replace(flt, status=(status,)), collate)
        arms.append(f"SELECT id FROM (SELECT t.id FROM tasks t WHERE {where} {order} LIMIT ?) AS status{n}")
        params += [*of_status, limit + offset]
    query = f"SELECT {TASK_COLUMNS} {_FROM_TASKS} WHERE t.id IN ({' UNION ALL '.join(arms)}) {order} LIMIT ? OFFSET ?"
    return query, [*params, limit, offset]


def count_tasks_query(tenant: str, flt: TaskFilter, *, cap: int, collate: str = "") -> tuple[str, list[Any]]:
    """The statement and parameters that count ``tenant``'s tasks matching ``flt``, up to ``cap``: the
    listing's filter on the index row alone (no row built, no event read; paging through the
    listing to count, as ``tether tasks`` did, took 1-13 s beside 100,000 tasks)."""
    where, params = _matching(tenant, flt, collate)
    return f"SELECT count(*) FROM (SELECT 1 FROM tasks t WHERE {where} LIMIT ?) AS matching", [*params, cap]


def _matching(tenant: str, flt: TaskFilter, collate: str) -> tuple[str, list[Any]]:
    """The condition on a task's row (``t``) that ``flt`` says, and its parameters."""
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
        where.append(f"t.{LISTED}")
    if flt.created_after is not None:
        where.append("t.created_at >= ?")
        params.append(flt.created_after)
    if flt.created_before is not None:
        where.append("t.created_at < ?")
        params.append(flt.created_before)
    if flt.id_prefix is not None:  # a range of the index of ids, not LIKE: % and _ are characters
        condition, bounds = _starting(flt.id_prefix, collate)
        where.append(condition)
        params += bounds
    if flt.forks_of is not None:  # read through the index of parents
        where.append("t.parent = (SELECT id FROM tasks WHERE tenant = ? AND task_id = ?)")
        params += [tenant, flt.forks_of]
    return " AND ".join(where), params


ID_ORDER = ' COLLATE "C"'
"""PostgreSQL's clause that compares ids byte by byte (UTF-8's order is code points'), whatever the
database's collation: what its index of ids by prefix (``tasks_by_id``) is made with. SQLite
compares text byte by byte already."""


def id_range(prefix: str) -> list[str]:
    """The ids that start with ``prefix``, as a range in code point order: ``[prefix, successor)``,
    the successor being ``prefix`` with its last character one higher (a character after U+10FFFF
    does not exist: those are dropped first; the surrogates, which no id holds, are stepped over).
    Every id from ``prefix`` up to it starts with ``prefix``, and no other id does. For a prefix of
    U+10FFFF's alone, only the lower bound: ``[prefix]``."""
    stem = prefix.rstrip("\U0010ffff")
    if not stem:
        return [prefix]
    following = ord(stem[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:
        following = 0xE000
    return [prefix, stem[:-1] + chr(following)]


def _starting(prefix: str, collate: str) -> tuple[str, list[str]]:
    """The condition that a task's id starts with ``prefix``, read as a range of an index of ids
    (see :func:`id_range`), and its parameters."""
    bounds = id_range(prefix)
    column = f"t.task_id{collate}"
    condition = f"{column} >= ?" if len(bounds) == 1 else f"{column} >= ? AND {column} < ?"
    return condition, bounds


# The narrow read of Store.stream_positions: the newest event's seq as the last row of the stream's
# range of the events' primary key (as TASK_COLUMNS reads it), of the streams whose id has the prefix.
_POSITIONS = """
SELECT t.task_id, t.created_at,
       COALESCE((SELECT e.seq FROM events e WHERE e.task = t.id ORDER BY e.seq DESC LIMIT 1), t.version)
FROM tasks t
WHERE t.tenant = ? AND t.type = ? AND """


def positions_query(
    tenant: str, type: str, prefix: str, user_id: str | None, *, collate: str = ""
) -> tuple[str, list[Any]]:
    """The statement and parameters of ``Store.stream_positions``: the streams read by the range of
    ids the prefix spans (an app's own document among its users', one user's sessions among an
    app's), not every stream of the type."""
    condition, bounds = _starting(prefix, collate)
    params: list[Any] = [tenant, type, *bounds]
    if user_id is None:
        return _POSITIONS + condition, params
    return _POSITIONS + condition + " AND t.user_id = ?", [*params, user_id]


IDS_KEPT = 1 << 16
"""How many task ids a SQL store keeps the row id of (its cache of ``(tenant, task_id) → id``)."""


def keep_id(ids: dict[tuple[str, str], int], key: tuple[str, str], internal: int, *also: dict[int, int]) -> int:
    """Cache ``key``'s row id in ``ids`` (and return it). Past :data:`IDS_KEPT` ids, all are dropped
    first, and what ``also`` knows of their streams: a cache read again when next needed, so that a
    process that goes through millions of tasks keeps nothing of each for good."""
    if len(ids) >= IDS_KEPT:
        ids.clear()
        for known in also:
            known.clear()
    ids[key] = internal
    return internal


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


def worker_values(tenant: str, worker: WorkerRow) -> tuple[Any, ...]:
    """``Statements.record_worker``'s parameters."""
    return (tenant, worker.worker_id, worker.app, worker.started_at, worker.seen_at, worker.stopped_at)


def worker_row(row: Sequence[Any]) -> WorkerRow:
    """A row of ``Statements.workers`` as a :class:`WorkerRow`."""
    worker_id, started_at, seen_at, app, stopped_at = row
    return WorkerRow(
        worker_id, float(started_at), float(seen_at), app, None if stopped_at is None else float(stopped_at)
    )
