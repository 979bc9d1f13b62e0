"""The statements only the PostgreSQL backend runs — the append and the latest read, each one
round trip — and the shared ones (``_sql.py``) in psycopg's placeholders."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson
import psycopg

from tether.errors import ConflictError
from tether.store import _sql
from tether.store._postgres_io import from_jsonb, to_jsonb
from tether.store.base import EventRow, IndexUpdate, StreamAppend, read_across_forks

__all__ = [
    "APPEND",
    "APPEND_GROUP",
    "APPEND_ONE",
    "CREATE",
    "LATEST",
    "SQL",
    "AmbiguousRefusalError",
    "PartRefusedError",
    "append_statement",
    "drop_history",
    "group_statement",
    "landed",
    "read_stream",
    "replace_history",
    "write_group",
    "write_parts",
]

# One statement, one round trip: the guard (fencing token, predecessor present) and the
# insert and the index update share a snapshot; a concurrent append of the same seq loses
# on the primary key. The row is brought up to the events with an index change, or when the batch
# reaches a multiple of HEAD_EVERY (the events it inserts are not visible to the row's update, so it
# counts them from ``ins``).
APPEND = """
WITH guard AS (
    SELECT 1 WHERE (%(fence)s::bigint IS NULL OR (SELECT lease_token FROM tasks WHERE id = %(task)s) = %(fence)s)
      AND EXISTS (SELECT 1 FROM tasks WHERE id = %(task)s AND task_id = %(task_id)s AND tenant = %(tenant)s)
      AND (EXISTS (SELECT 1 FROM events WHERE task = %(task)s AND seq = %(first)s - 1)
           OR (SELECT parent_seq FROM tasks WHERE id = %(task)s) = %(first)s - 1)
), ins AS (
    INSERT INTO events (task, seq, type, schema, at, data, fence)
    SELECT %(task)s, e.seq, e.type, e.schema, e.at, e.data::jsonb, %(fence)s
    FROM unnest(%(seqs)s::integer[], %(types)s::text[], %(schemas)s::integer[], %(ats)s::float8[],
                %(datas)s::text[]) AS e(seq, type, schema, at, data)
    WHERE EXISTS (SELECT 1 FROM guard)
    RETURNING seq, at, type
), idx AS (
    UPDATE tasks SET
        version = (SELECT max(seq) FROM ins),
        updated_at = (SELECT at FROM ins ORDER BY seq DESC LIMIT 1),
        calls_done = COALESCE(%(calls_done)s, calls_done
            + (SELECT count(*) FROM events e WHERE e.task = tasks.id AND e.seq > tasks.version
               AND e.type = 'CallCompleted')
            + (SELECT count(*) FROM ins WHERE type = 'CallCompleted')),
        status = CASE WHEN %(moves)s THEN COALESCE(%(status)s, status) ELSE status END,
        wake_at = CASE WHEN %(moves)s THEN %(wake)s ELSE wake_at END,
        parked = CASE WHEN %(moves)s THEN NULL ELSE parked END,
        summary = CASE WHEN %(head)s THEN %(summary)s ELSE summary END,
        output = CASE WHEN %(head)s THEN %(output)s ELSE output END,
        session_id = COALESCE(session_id, %(session)s)
    WHERE id = %(task)s AND EXISTS (SELECT 1 FROM ins)
      AND (%(indexed)s OR (SELECT max(seq) FROM ins) / {every} > (%(first)s::integer - 1) / {every})
    RETURNING 1
)
SELECT (SELECT count(*) FROM ins)
""".replace("{every}", str(_sql.HEAD_EVERY))

# The common case, one event and no index change: the same guard, a plain INSERT ... SELECT, the
# row brought up to it every HEAD_EVERY-th event. Its values come in once each, by position
# (cheaper for the driver than named parameters).
APPEND_ONE = """
WITH ins AS (
    INSERT INTO events (task, seq, type, schema, at, data, fence)
    SELECT v.task, v.seq, v.type, v.schema, v.at, v.data::jsonb, v.fence
    FROM (VALUES (%s::bigint, %s::integer, %s::text, %s::integer, %s::float8, %s::text, %s::bigint, %s::text,
                  %s::text))
        AS v (task, seq, type, schema, at, data, fence, task_id, tenant)
    WHERE (v.fence IS NULL OR (SELECT lease_token FROM tasks WHERE id = v.task) = v.fence)
      AND EXISTS (SELECT 1 FROM tasks WHERE id = v.task AND task_id = v.task_id AND tenant = v.tenant)
      AND (EXISTS (SELECT 1 FROM events WHERE task = v.task AND seq = v.seq - 1)
           OR (SELECT parent_seq FROM tasks WHERE id = v.task) = v.seq - 1)
    RETURNING task, seq, at, type
), idx AS (
    UPDATE tasks SET calls_done = calls_done + (ins.type = 'CallCompleted')::int
            + (SELECT count(*) FROM events e WHERE e.task = ins.task AND e.seq > tasks.version
               AND e.type = 'CallCompleted'),
        version = ins.seq, updated_at = ins.at
    FROM ins WHERE tasks.id = ins.task AND ins.seq %% {every} = 0
    RETURNING 1
)
SELECT count(*) FROM ins
""".replace("{every}", str(_sql.HEAD_EVERY))

# A multi-stream append (a group commit of many tasks' records) in one statement, so one round trip
# and, on an autocommit connection, its own transaction: each part's guard as APPEND's; every part's
# events inserted only if every part passed (all or nothing), in (row id, seq) order; each row brought
# up to its events with an index change (as APPEND does) or when the part reaches a multiple of
# HEAD_EVERY, after its row is locked in row-id order (two such appends over the same streams queue on
# each other instead of deadlocking). The parts and their events come in as two JSON texts (encoded
# by orjson at once, not adapted by psycopg parameter by parameter in the commit thread's Python). It
# returns the first part, in row-id order, whose guard failed (none: every part landed). Each part's
# guard is one scalar subquery on its row by primary key, which the planner cannot turn into a join:
# an EXISTS it can, and on a small table (a new schema) that join scans the tenant's tasks per part.
APPEND_GROUP = """
WITH p AS (
    SELECT * FROM json_to_recordset(%s::json) AS p(i integer, task bigint, task_id text, fence bigint,
        first integer, n integer, indexed boolean, moves boolean, status text, wake float8, head boolean,
        calls_done integer, summary text, output text, session text)
), ok AS (
    SELECT p.i, p.task, p.fence FROM p
    WHERE (SELECT t.task_id = p.task_id AND t.tenant = %s AND (p.fence IS NULL OR t.lease_token = p.fence)
                  AND (t.parent_seq = p.first - 1
                       OR EXISTS (SELECT 1 FROM events WHERE task = p.task AND seq = p.first - 1))
           FROM tasks t WHERE t.id = p.task)
), ins AS (
    INSERT INTO events (task, seq, type, schema, at, data, fence)
    SELECT ok.task, e.seq, e.type, e.schema, e.at, e.data, ok.fence
    FROM json_to_recordset(%s::json) AS e(i integer, seq integer, type text, schema integer, at float8, data jsonb)
    JOIN ok ON ok.i = e.i
    WHERE (SELECT count(*) FROM ok) = (SELECT count(*) FROM p)
    ORDER BY ok.task, e.seq
    RETURNING task, seq, at, type
), m AS (
    SELECT p.*, ins.last, ins.at, ins.completes FROM p JOIN (
        SELECT task, max(seq) AS last, (array_agg(at ORDER BY seq DESC))[1] AS at,
               count(*) FILTER (WHERE type = 'CallCompleted') AS completes
        FROM ins GROUP BY task) ins ON ins.task = p.task
    WHERE p.indexed OR ins.last / {every} > (p.first - 1) / {every}
), locked AS MATERIALIZED (
    SELECT id FROM tasks WHERE id IN (SELECT task FROM m) ORDER BY id FOR UPDATE
), idx AS (
    UPDATE tasks SET
        calls_done = COALESCE(m.calls_done, tasks.calls_done + m.completes
            + (SELECT count(*) FROM events e WHERE e.task = tasks.id AND e.seq > tasks.version
               AND e.type = 'CallCompleted')),
        version = m.last, updated_at = m.at,
        status = CASE WHEN m.moves THEN COALESCE(m.status, tasks.status) ELSE tasks.status END,
        wake_at = CASE WHEN m.moves THEN m.wake ELSE tasks.wake_at END,
        parked = CASE WHEN m.moves THEN NULL ELSE tasks.parked END,
        summary = CASE WHEN m.head THEN m.summary ELSE tasks.summary END,
        output = CASE WHEN m.head THEN m.output ELSE tasks.output END,
        session_id = COALESCE(tasks.session_id, m.session)
    FROM locked JOIN m ON m.task = locked.id WHERE tasks.id = locked.id
    RETURNING 1
)
SELECT p.i FROM p WHERE p.i NOT IN (SELECT i FROM ok) ORDER BY p.task LIMIT 1
""".replace("{every}", str(_sql.HEAD_EVERY))


# The statements shared with SQLite, in psycopg's placeholders; claimers skip each other's rows.
# The lease statements find the row by its name in the statement itself (the unique key), not by a row id
# looked up first: one round trip each instead of two (a run takes and releases its lease off the loop, but
# each round trip was a thread's wait and a statement's Python).
_BY_NAME = "WHERE tenant = ? AND task_id = ?"
_statements = _sql.Statements()
SQL = replace(
    _statements,
    claim=_sql.claim_statement(lock="FOR UPDATE SKIP LOCKED"),
    acquire_lease=_statements.acquire_lease.replace("WHERE id = ?", _BY_NAME, 1),
    renew_lease=_statements.renew_lease.replace("WHERE id = ?", _BY_NAME, 1),
    release_lease=_statements.release_lease.replace("WHERE id = ?", _BY_NAME, 1),
    # A snapshot's data is in one of two columns: text in data, bytes in raw (the other NULL).
    latest_snapshot=_statements.latest_snapshot.replace("checksum, data FROM", "checksum, data, raw FROM", 1),
).in_pyformat()
assert all(_BY_NAME.replace("?", "%s") in s for s in (SQL.acquire_lease, SQL.renew_lease, SQL.release_lease))

# One statement, one round trip: the stream's row, its newest snapshot, and its own events
# after that snapshot. A fork whose events reach back past its fork point (into its parent's)
# takes the general path instead.
LATEST = (
    "WITH t AS (SELECT id, parent, parent_seq FROM tasks WHERE tenant = %s AND task_id = %s), "
    "s AS (SELECT seq, schema, checksum, data, raw FROM snapshots WHERE task = (SELECT id FROM t) "
    "ORDER BY seq DESC LIMIT 1) "
    "SELECT 0, t.parent_seq, NULL::integer, NULL::text, NULL::text, NULL::double precision, "
    "NULL::bigint, (t.parent IS NOT NULL), NULL::bytea FROM t "
    "UNION ALL SELECT 1, seq, schema, checksum, data, NULL, NULL, NULL, raw FROM s "
    "UNION ALL (SELECT 2, e.seq, e.schema, e.type, e.data::text, e.at, e.fence, NULL, NULL FROM events e "
    "WHERE e.task = (SELECT id FROM t) AND e.seq > COALESCE((SELECT seq FROM s), 0) ORDER BY e.seq)"
)

# A task's row and its first event, in one statement (one round trip, its own transaction on the
# autocommit connection); a task id taken fails it on the unique key, writing nothing.
CREATE = f"""
WITH t AS ({SQL.insert_task} RETURNING id)
INSERT INTO events (task, seq, type, schema, at, data) SELECT t.id, %s, %s, %s, %s, %s::jsonb FROM t
RETURNING task
"""


def append_statement(
    internal: int,
    tenant: str,
    task_id: str,
    events: Sequence[EventRow],
    fence: int | None,
    index: IndexUpdate | None,
) -> tuple[str, tuple[Any, ...] | dict[str, Any]]:
    """The guarded insert of ``events`` and its parameters: :data:`APPEND_ONE` for one event and no
    index change (the common case), else :data:`APPEND`."""
    first = events[0]
    params: tuple[Any, ...] | dict[str, Any]
    if len(events) == 1 and index is None:
        statement = APPEND_ONE
        params = (
            internal,
            first.seq,
            first.type,
            first.schema,
            first.at,
            to_jsonb(first.data),
            fence,
            task_id,
            tenant,
        )
    else:
        statement = APPEND
        head = index.head if index is not None else None
        params = {
            "task": internal,
            "task_id": task_id,
            "tenant": tenant,
            "fence": fence,
            "first": first.seq,
            "seqs": [e.seq for e in events],
            "types": [e.type for e in events],
            "schemas": [e.schema for e in events],
            "ats": [e.at for e in events],
            "datas": [to_jsonb(e.data) for e in events],
            "moves": index is not None and index.moves,
            "status": index.status if index is not None else None,
            "wake": index.wake_at if index is not None else None,
            "head": head is not None,
            "indexed": index is not None,
            "calls_done": head.calls_done if head is not None else None,
            "summary": head.summary if head is not None else None,
            "output": head.output if head is not None else None,
            "session": index.session_id if index is not None else None,
        }
    return statement, params


def group_statement(ids: Sequence[int], tenant: str, appends: Sequence[StreamAppend]) -> tuple[str, tuple[str, ...]]:
    """:data:`APPEND_GROUP` and its parameters for ``appends``, ``ids[i]`` the row id of ``appends[i]``'s
    stream."""
    parts = []
    events = []
    for i, part in enumerate(appends):
        rows = part.events
        index = part.index
        head = index.head if index is not None else None
        parts.append(
            {
                "i": i,
                "task": ids[i],
                "task_id": part.task_id,
                "fence": part.fence,
                "first": rows[0].seq,
                "n": len(rows),
                "indexed": index is not None,
                "moves": index is not None and index.moves,
                "status": index.status if index is not None else None,
                "wake": index.wake_at if index is not None else None,
                "head": head is not None,
                "calls_done": head.calls_done if head is not None else None,
                "summary": head.summary if head is not None else None,
                "output": head.output if head is not None else None,
                "session": index.session_id if index is not None else None,
            }
        )
        events += [
            {
                "i": i,
                "seq": e.seq,
                "type": e.type,
                "schema": e.schema,
                "at": e.at,
                "data": orjson.Fragment(to_jsonb(e.data)),
            }
            for e in rows
        ]
    return APPEND_GROUP, (orjson.dumps(parts).decode(), tenant, orjson.dumps(events).decode())


def drop_history(conn: psycopg.Connection[Any], task_id: str, internal: int) -> int:
    """Inside a transaction: delete a stream's events and snapshots (refused while forks read
    them); return how many events went."""
    if conn.execute(SQL.child_of, (internal,)).fetchone() is not None:
        raise ConflictError(task_id, expected=0, actual=None)
    gone = conn.execute(SQL.delete_events, (internal,)).rowcount
    conn.execute(SQL.delete_snapshots, (internal,))
    return int(gone)


def landed(conn: psycopg.Connection[Any], internal: int, events: Sequence[EventRow], fence: int | None) -> bool:
    """Whether an append whose outcome was lost with its connection committed: its last event is there."""
    last = events[-1]
    found = conn.execute("SELECT type, fence FROM events WHERE task = %s AND seq = %s", (internal, last.seq)).fetchone()
    return found is not None and found[0] == last.type and found[1] == fence


def replace_history(
    conn: psycopg.Connection[Any], task_id: str, internal: int, expected_version: int, events: Sequence[EventRow]
) -> int:
    """Inside a transaction: ``Store.compact`` — the stream's events and snapshots deleted, ``events``
    inserted after ``expected_version``, the stream no longer a fork; how many events went."""
    # Two compactions queue on the row; an append racing this one loses to it (or it to the
    # append) on the primary key of seq expected_version + 1, which both insert.
    conn.execute("SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", (internal,))
    found = conn.execute(SQL.version_of, (internal, internal)).fetchone()
    actual = None if found is None or found[0] is None else int(found[0])
    if actual != expected_version:
        raise ConflictError(task_id, expected=expected_version, actual=actual)
    gone = drop_history(conn, task_id, internal)
    conn.execute(SQL.unfork, (internal,))
    try:
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO events (task, seq, type, schema, at, data) VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                [(internal, e.seq, e.type, e.schema, e.at, to_jsonb(e.data)) for e in events],
            )
    except psycopg.errors.UniqueViolation:
        raise ConflictError(task_id, expected=expected_version, actual=None) from None
    conn.execute(SQL.settle_row, _sql.settle_values(internal, events[-1]))
    return gone


class AmbiguousRefusalError(Exception):
    """A pipelined multi-stream append that the primary key refused, for a part not yet known."""


class PartRefusedError(Exception):
    """One part of a multi-stream append (its index, ``args[0]``) failed its guard: the transaction
    is rolled back, then the part is refused with the reason the store gives."""


def write_parts(
    conn: psycopg.Connection[Any], ids: Sequence[int], tenant: str, appends: Sequence[StreamAppend]
) -> None:
    """In a transaction: each part's guarded append, one statement a part in row-id order (``ids[i]``
    is ``appends[i]``'s), checked to have inserted its events; :class:`PartRefusedError` names the
    first part that did not, and nothing is written."""
    with conn.transaction():
        for i in sorted(range(len(appends)), key=ids.__getitem__):
            part = appends[i]
            statement = append_statement(ids[i], tenant, part.task_id, part.events, part.fence, part.index)
            try:
                cursor = conn.execute(*statement)
            except psycopg.errors.UniqueViolation:  # a concurrent append took the seq first
                raise PartRefusedError(i) from None
            if cursor.fetchone()[0] != len(part.events):  # type: ignore[index]
                raise PartRefusedError(i)  # leaving the transaction rolls every part back


def write_group(conn: psycopg.Connection[Any], group: tuple[str, tuple[Any, ...]]) -> None:
    """On an autocommit connection: a multi-stream append as one :data:`APPEND_GROUP` statement, its
    own transaction. :class:`PartRefusedError` names the first part whose guard failed (nothing was
    written); a part refused by the primary key fails the statement without saying which part it
    was: :class:`AmbiguousRefusalError`, and the caller writes it again one statement a part."""
    try:
        refused = conn.execute(*group).fetchone()
    except psycopg.errors.UniqueViolation:  # some part's seq was taken first: which?
        raise AmbiguousRefusalError() from None
    if refused is not None:
        raise PartRefusedError(refused[0])


# A stream's events and where it forked from, found by its name: one round trip for what a run
# reads before its code goes on (two transactions and four statements before: its row id, its
# parent, then its events). A task with no events in the range still gives its row (the LEFT JOIN).
READ_STREAM = """
SELECT t.parent, t.parent_seq, e.seq, e.type, e.schema, e.at, e.data::text, e.fence
FROM tasks t LEFT JOIN events e
  ON e.task = t.id AND e.seq > %(after)s AND (%(upto)s::integer IS NULL OR e.seq <= %(upto)s)
WHERE t.tenant = %(tenant)s AND t.task_id = %(task_id)s
ORDER BY e.seq
"""


def read_stream(
    conn: psycopg.Connection[Any], tenant: str, task_id: str, after: int, upto: int | None
) -> list[EventRow] | None:
    """The events with ``after < seq <= upto`` of a stream, its parent's part first when it is a fork
    whose fork point lies past ``after``; ``None`` when there is no such stream."""
    found = conn.execute(READ_STREAM, {"tenant": tenant, "task_id": task_id, "after": after, "upto": upto}).fetchall()
    if not found:
        return None
    parent, fork_point = found[0][0], found[0][1]
    own = [EventRow(r[2], r[3], r[4], r[5], from_jsonb(r[6]), r[7]) for r in found if r[2] is not None]
    if parent is None or fork_point is None or fork_point <= after:
        return own
    # A fork whose shared part is asked for: the parent's events up to the fork point (and further
    # up the chain), then this stream's own, which all come after the fork point.
    shared = read_across_forks(
        parent,
        after,
        fork_point if upto is None else min(upto, fork_point),
        lambda task: _parent_of(conn, task),
        lambda task, low, last: _segment(conn, task, low, last),
    )
    return [*shared, *own]


def _parent_of(conn: psycopg.Connection[Any], task: int) -> tuple[int, int] | None:
    found = conn.execute(SQL.parent_of, (task,)).fetchone()
    return None if found is None or found[0] is None or found[1] is None else (found[0], found[1])


def _segment(conn: psycopg.Connection[Any], task: int, low: int, last: int | None) -> list[EventRow]:
    cursor = conn.execute(
        "SELECT seq, type, schema, at, data::text, fence FROM events "
        "WHERE task = %s AND seq > %s AND (%s::integer IS NULL OR seq <= %s) ORDER BY seq",
        (task, low, last, last),
    )
    return [EventRow(r[0], r[1], r[2], r[3], from_jsonb(r[4]), r[5]) for r in cursor]
