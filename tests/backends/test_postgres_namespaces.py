"""The kit's PostgreSQL namespaces: each test gets a schema holding tether's tables and no rows. One a
test has put away is used again only emptied, under a new name, and only if it is still exactly what
tether's migrations make; what a test left behind (a connection, a changed table) reaches no later
test."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import PG_PROBLEM, PG_URL
from tether.store import EventRow, TaskRow, open_store
from tether.testing import PostgresBackend

pytestmark = pytest.mark.skipif(bool(PG_PROBLEM), reason=PG_PROBLEM or "")


def _schema(url: str) -> str:
    return url.rpartition("schema=")[2].partition("&")[0]


def _columns(schema: str, table: str) -> list[str]:
    with psycopg.connect(PG_URL) as conn:
        rows = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
            (f'"{schema}".{table}',),
        ).fetchall()
    return sorted(r[0] for r in rows)


def _write(url: str, task_id: str) -> int:
    """Create ``task_id``; the internal id the database gave it."""
    store = open_store(url)
    try:
        store.create_task("default", TaskRow(task_id, "default", "t", "pending", None, None, 1.0, 1.0, 1),
                          EventRow(1, "TaskCreated", 1, 1.0, "{}"))
    finally:
        store.close()
    with psycopg.connect(PG_URL) as conn:
        found = conn.execute(
            sql.SQL("SELECT id FROM {} WHERE task_id = %s").format(sql.Identifier(_schema(url), "tasks")), (task_id,)
        ).fetchone()
    assert found is not None
    return int(found[0])


def test_a_put_away_schema_comes_back_empty_under_a_new_name() -> None:
    backend = PostgresBackend(f"{PG_URL}?schema=spare")
    with backend.namespace(Path(".")) as first:
        assert _write(first, "a") == 1
        store = open_store(first)  # left open, as a test may leave a store
        store.get_task("default", "a")
    with backend.namespace(Path(".")) as second:
        assert _schema(second) != _schema(first)
        reused = open_store(second)
        try:
            assert reused.get_task("default", "a") is None  # no row of the test before
            assert _write(second, "b") == 1  # ids start again, as in a new schema
        finally:
            reused.close()
        # The store the first test left open lost its connections: its name reaches nothing now.
        with pytest.raises(Exception):  # noqa: B017 - whichever error: it must not read or write
            store.get_task("default", "b")
    store.close()


def test_a_schema_a_test_changed_is_dropped_not_used_again() -> None:
    backend = PostgresBackend(f"{PG_URL}?schema=changed")
    with backend.namespace(Path(".")) as first:
        _write(first, "a")
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            tasks = sql.Identifier(_schema(first), "tasks")
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN extra text").format(tasks))
    with psycopg.connect(PG_URL) as conn:  # dropped: no schema of its name, nor a spare holding the column
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (_schema(first),)).fetchone() is None
    with backend.namespace(Path(".")) as second:
        assert "extra" not in _columns(_schema(second), "tasks")
        assert "version" in _columns(_schema(second), "tasks")
