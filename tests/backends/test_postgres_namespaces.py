"""The kit's PostgreSQL namespaces: each test gets a schema holding tether's tables and no rows. One a
test has put away is used again only emptied, under a new name, and only if it is still exactly what
tether's migrations make; what a test left behind (a connection, a changed table) reaches no later
test."""

from __future__ import annotations

import uuid
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


def _backend(prefix: str) -> PostgresBackend:
    return PostgresBackend(f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={prefix}")


def _oid(schema: str) -> int | None:
    with psycopg.connect(PG_URL) as conn:
        row = conn.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return None if row is None else int(row[0])


def _held_by(schema: str) -> int:
    """How many of the server's connections are a tether store's on ``schema``."""
    with psycopg.connect(PG_URL) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (f"tether:{schema}",))
        return int(row.fetchone()[0])  # type: ignore[index]


def _schemas(prefix: str) -> list[str]:
    with psycopg.connect(PG_URL) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"{prefix}\\_%",))
        return [r[0] for r in rows]


def test_a_put_away_schema_comes_back_empty_under_a_new_name() -> None:
    prefix = f"spare{uuid.uuid4().hex[:6]}"
    backend = _backend(prefix)
    with backend.namespace(Path(".")) as first:
        assert _write(first, "a") == 1
        made = _oid(_schema(first))
        store = open_store(first)  # left open, as a test may leave a store
        store.get_task("default", "a")
        assert _held_by(_schema(first)) >= 1
    assert _held_by(_schema(first)) == 0  # its connections were ended with the test
    with backend.namespace(Path(".")) as second:
        assert _schema(second) != _schema(first)
        assert _oid(_schema(second)) == made  # the same schema, renamed
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
    prefix = f"changed{uuid.uuid4().hex[:6]}"
    backend = _backend(prefix)
    changes = [
        "ALTER TABLE {tasks} ADD COLUMN extra text",
        "ALTER TABLE {tasks} ALTER COLUMN task_id TYPE text COLLATE \"C\"",
        "CREATE RULE norm AS ON INSERT TO {ledger} DO INSTEAD NOTHING",
        "ALTER TABLE {tasks} SET UNLOGGED",
    ]
    for change in changes:
        with backend.namespace(Path(".")) as first:
            _write(first, "a")
            made = _oid(_schema(first))
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                names = {t: sql.Identifier(_schema(first), t).as_string(conn) for t in ("tasks", "ledger")}
                conn.execute(change.format(**names).encode())
        assert made not in [_oid(s) for s in _schemas(prefix)], change  # dropped, not kept as a spare
        with backend.namespace(Path(".")) as second:
            assert _oid(_schema(second)) != made, change
            assert "extra" not in _columns(_schema(second), "tasks")
            assert "version" in _columns(_schema(second), "tasks")
