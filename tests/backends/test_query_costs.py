"""A worker's claim, a task's deletion, a listing of one type and a lookup by a prefix of ids cost
the same beside 10 or 1,500 tasks of each other kind: waiting on people, asleep for an hour, finished. Measured as the
database's own work, not time: SQLite's virtual-machine steps (a progress handler), PostgreSQL's
rows of ``tasks`` read (the transaction's statistics, which count the foreign key's check too).
The statements are the store's own, run on a connection of the test's own in a transaction
rolled back."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import PG_URL, sql_url
from tether.store import EventRow, Store, TaskFilter, TaskRow, _postgres_sql, _sql, _sqlite_sql, open_store
from tether.testing.contract.test_lease_holders import _task

TENANT = "default"
_EVENT = EventRow(1, "DecisionMade", 1, time.time(), "{}")
Statements = Sequence[tuple[str, tuple[Any, ...]]]


# Made as the store makes them, one by one, on PostgreSQL without waiting for each commit to reach the
# disk: the tests measure what reads cost, and the thousands of rows beside them took most of their time.
QUICK_COMMITS = "&options=" + quote("-c synchronous_commit=off")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    for made in sql_url(request.param, tmp_path, "scale"):
        yield made if made.startswith("sqlite") else made + QUICK_COMMITS


def _add(store: Store, start: int, stop: int) -> None:
    """Tasks ``start`` to ``stop`` of each kind that no claim may take: awaiting an answer (no
    timeout), asleep for an hour, finished; and as many conversation sessions, newer than them all
    (a listing of tasks leaves sessions out)."""
    now = time.time()
    for i in range(start, stop):
        for status, wake in (("awaiting_input", None), ("sleeping", now + 3600), ("completed", None)):
            row = TaskRow(f"{status}-{i}", TENANT, "t", status, None, None, now - 100 - i, now, 1, wake_at=wake)
            store.create_task(TENANT, row, _EVENT)
        session = TaskRow(f"session-{i}", TENANT, "tether.session", "open", f"user-{i}", None, now + 100 + i, now, 1)
        store.create_task(TENANT, session, _EVENT)


def _work(url: str, statements: Statements) -> int:
    """What running ``statements`` costs the database: SQLite's VM steps, PostgreSQL's rows of
    ``tasks`` read (sequentially and by index)."""
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        conn.execute("BEGIN IMMEDIATE")
        conn.set_progress_handler(count, 1)
        for statement, params in statements:
            conn.execute(statement, params).fetchall()
        conn.set_progress_handler(None, 1)
        conn.execute("ROLLBACK")
        conn.close()
        return steps
    import psycopg

    schema = url.rpartition("schema=")[2].partition("&")[0]
    with psycopg.connect(PG_URL, options=f"-c search_path={schema}") as pg:
        for statement, params in statements:
            pg.execute(statement, params)
        (read,) = pg.execute(
            "SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
            "WHERE relid = 'tasks'::regclass"
        ).fetchone()  # type: ignore[misc]
        pg.rollback()
        return int(read)


def _row_id(url: str, task_id: str) -> int:
    """A task's row id (the statements below take row ids), read on a connection of the test's own."""
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        (found,) = conn.execute("SELECT id FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        conn.close()
        return int(found)
    import psycopg

    schema = url.rpartition("schema=")[2].partition("&")[0]
    with psycopg.connect(PG_URL, options=f"-c search_path={schema}") as pg:
        (found,) = pg.execute("SELECT id FROM tasks WHERE task_id = %s", (task_id,)).fetchone()  # type: ignore[misc]
        return int(found)


def _analyze(url: str) -> None:
    import psycopg

    schema = url.rpartition("schema=")[2].partition("&")[0]
    with psycopg.connect(PG_URL, autocommit=True, options=f"-c search_path={schema}") as pg:
        pg.execute("ANALYZE tasks")


def _costs(url: str) -> tuple[int, ...]:
    """What a worker's claim costs; what deleting a finished task without forks asks of ``tasks``
    (whether it has forks, then its row: the foreign key of forks checks on PostgreSQL); a page of
    the tasks of one type; a page of tasks (sessions left out); a page of one user's sessions; the
    positions of the streams of one type (the ADK's sessions); and by a prefix of ids among many
    of their type (an ADK app's document among its users'), the positions, a page and a count
    (a task id's first characters, as ``tether show`` looks one up); a page of the tasks of two
    statuses, few among many finished (``tether tasks --status pending --status running``)."""
    sqlite = url.startswith("sqlite:///")
    own = _sqlite_sql.SQL if sqlite else _postgres_sql.SQL
    if not sqlite:  # what autovacuum does as a table grows: the planner learns how many are sessions
        _analyze(url)
    done = _row_id(url, "completed-0")
    collate = "" if sqlite else _sql.ID_ORDER  # the statements as each store runs them

    def page(flt: TaskFilter) -> tuple[str, list[Any]]:
        return _sql.list_tasks_query(TENANT, flt, limit=20, offset=0, collate=collate)

    listing = page(TaskFilter(type="thread"))
    tasks = page(TaskFilter())  # as `tether tasks` lists
    mine = page(TaskFilter(type="tether.session", user_id="me"))
    positions = _sql.positions_query(TENANT, "thread", "thread-", None, collate=collate)
    prefixed = _sql.positions_query(TENANT, "t", "due", None, collate=collate)
    by_prefix = page(TaskFilter(id_prefix="du"))
    count = _sql.count_tasks_query(TENANT, TaskFilter(id_prefix="du"), cap=100, collate=collate)
    unfinished = page(TaskFilter(status=("pending", "running")))
    queries = (listing, tasks, mine, positions, prefixed, by_prefix, count, unfinished)
    ours = [(q if sqlite else _sql.pyformat(q), tuple(params)) for q, params in queries]
    return (
        _work(url, [(own.claim, _sql.claim_values(TENANT, "w", 30, time.time()))]),
        _work(url, [(own.child_of, (done,)), (own.delete_task, (done,))]),
        *(_work(url, [statement]) for statement in ours),
    )


def test_claims_deletes_and_listings_cost_the_same_beside_many_tasks(url: str) -> None:
    store = open_store(url)
    now = time.time()
    due = TaskRow("due", TENANT, "t", "pending", None, None, now, now, 1)
    store.create_task(TENANT, due, _EVENT)
    fork = replace(due, task_id="fork", status="completed", parent_id="due", parent_seq=1)
    store.create_task(TENANT, fork, EventRow(2, "DecisionMade", 1, now, "{}"))  # the parents' index is not empty
    for i in range(2):  # one user's conversation sessions, among every other user's
        session = replace(due, task_id=f"mine-{i}", type="tether.session", status="open", user_id="me")
        store.create_task(TENANT, replace(session, created_at=now - 10**6 - i), _EVENT)
    for i in range(3):  # older than every other task: a walk of all tasks by age finds them last
        thread = replace(due, task_id=f"thread-{i}", type="thread", status="completed", created_at=now - 10**6 - i)
        store.create_task(TENANT, thread, _EVENT)
    _add(store, 0, 10)
    small = _costs(url)
    _add(store, 10, 1_500)
    large = _costs(url)
    names = "claim, delete, listing, tasks, my sessions, positions, by prefix, page, count, unfinished".split(", ")
    for what, before, after in zip(names, small, large, strict=True):
        assert after <= 1.5 * before + 20, f"{what}: {before} beside 10 tasks of each kind, {after} beside 1,500"
    claimed = store.claim(TENANT, "w", 30, time.time())  # and the claim takes the one task due
    assert claimed is not None and claimed[0] == "due"
    assert store.claim(TENANT, "w", 30, time.time()) is None
    store.close()


def _lease_holders_cost(url: str) -> int:
    query, params = _sql.lease_holders_query(TENANT, "here:", time.time())
    return _work(url, [(query if url.startswith("sqlite") else _sql.pyformat(query), tuple(params))])


def test_lease_holders_cost_the_same_beside_many_tasks_no_claim_takes(url: str) -> None:
    """``Store.lease_holders`` (what a worker reads to take over at once what a dead process on its
    host held) costs the same beside 10 or 1,500 tasks of each kind no claim takes, as the claim does."""
    store = open_store(url)
    for i in range(5):
        _task(store, f"held-{i}", f"here:{i}:w", expires=3600)  # alive however long the rows take to make
    _add(store, 0, 10)
    if not url.startswith("sqlite"):
        _analyze(url)
    small = _lease_holders_cost(url)
    _add(store, 10, 1_500)
    if not url.startswith("sqlite"):
        _analyze(url)
    large = _lease_holders_cost(url)
    print(f"lease_holders: {small} beside 10 tasks of each kind, {large} beside 1,500")
    assert large <= 1.5 * small + 20, f"{small} beside 10 tasks of each kind, {large} beside 1,500"
    assert len(store.lease_holders(TENANT, "here:", time.time())) == 5
    store.close()
