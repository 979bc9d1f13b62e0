"""Databases written by earlier versions of tether open and read as they did, each migrated to the
current schema on SQLite and PostgreSQL (a schema of its own per test)."""

from __future__ import annotations

from pathlib import Path

import tether
from tether.events import OutputSet, PlanSet, StepCompleted, StepStarted
from tether.log.heads import read_head, row_head_of
from tether.store import EventRow
from tether.testing.runtime.timetravel.test_timetravel import _waits_then_sends


def _v1_database(url: str, task: tether.TaskLog, task_id: str) -> None:
    """A database as tether wrote it before heads (schema version 1), holding ``task_id``'s events."""
    rows = task.store.read_events(task.tenant, task_id)
    row = task.store.get_task(task.tenant, task_id)
    assert row is not None
    task_row = ("default", task_id, row.type, row.status, None, None, row.created_at)
    insert_task = "INSERT INTO tasks (tenant, task_id, type, status, user_id, session_id, created_at) VALUES "
    insert_event = "INSERT INTO events (task, seq, type, schema, at, data) VALUES "
    if url.startswith("sqlite:///"):
        import sqlite3

        from tether.store._sqlite_schema import MIGRATIONS, _statements

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        for statement in _statements(MIGRATIONS[0]):
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
        internal = conn.execute(insert_task + "(?, ?, ?, ?, ?, ?, ?)", task_row).lastrowid
        conn.executemany(insert_event + "(?, ?, ?, ?, ?, ?)", [(internal, *r[:5]) for r in rows])
        conn.commit()
        conn.close()
        return
    import psycopg
    from psycopg import sql

    from tether.store._postgres_schema import MIGRATIONS

    base, _, query = url.partition("?")
    schema = dict(part.split("=") for part in query.split("&"))["schema"]
    with psycopg.connect(base, autocommit=True) as conn:
        # The test's schema holds the current tables: this database is of the first version instead.
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute("CREATE TABLE tether_meta (key text PRIMARY KEY, value text NOT NULL)")
        conn.execute("INSERT INTO tether_meta VALUES ('schema_version', '1')")
        conn.execute(MIGRATIONS[0])
        found = conn.execute(insert_task + "(%s, %s, %s, %s, %s, %s, %s) RETURNING id", task_row).fetchone()
        assert found is not None
        with conn.cursor() as cursor:
            cursor.executemany(insert_event + "(%s, %s, %s, %s, %s, %s::jsonb)", [(found[0], *r[:5]) for r in rows])


def test_a_database_from_before_heads_migrates(store_url: str) -> None:
    """Schema 1 to 2: versions and last changes filled in from the events; a task with no head yet
    is read by folding it, as before, until its next append writes one."""
    source = tether.TaskLog("memory://")
    state = source.create(type="t", task_id="old")
    source.append("old", [PlanSet(steps=["a", "b"]), StepStarted(name="a"), StepCompleted(name="a")], 1)
    source.append("old", [OutputSet(output={"x": 1})], 4)
    _v1_database(store_url, source, "old")
    app = tether.App(store_url)
    row = app.log.get("old")
    assert (row.version, row.updated_at, row.summary) == (5, source.get("old").updated_at, None)
    handle = app.get("old")
    assert (handle.position, handle.output) == ("step 2 of 2; 1 committed", {"x": 1})
    assert [line.position for line in app.list_tasks()] == ["step 2 of 2; 1 committed"]
    app.log.append("old", [StepCompleted(name="b")], 5)
    row = app.log.get("old")
    assert read_head(row) == row_head_of(app.state("old")) and row.version == 6
    assert app.get("old").position == "all 2 steps committed" and state.task_id == "old"


def test_a_sqlite_database_from_before_lazy_rows_migrates(tmp_path: Path) -> None:
    """Schema 2 to 3: rows the old trigger kept exact read the same, and appends after the
    migration (which move the row every HEAD_EVERY-th event only) count on from them."""
    import sqlite3

    from tether.store._sqlite_schema import MIGRATIONS, _statements

    path = tmp_path / "v2.db"
    conn = sqlite3.connect(path)
    for script in MIGRATIONS[:2]:
        for statement in _statements(script):
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    internal = conn.execute(
        "INSERT INTO tasks (tenant, task_id, type, status, created_at, summary) "
        "VALUES ('default', 'old', 't', 'running', 1.0, '{\"plan\": null}')"
    ).lastrowid
    conn.executemany(
        "INSERT INTO events (task, seq, type, schema, at, data) VALUES (?, ?, ?, 1, ?, '{}')",
        [(internal, seq, "CallCompleted" if seq > 1 else "TaskCreated", float(seq)) for seq in range(1, 101)],
    )
    conn.commit()
    conn.close()
    store = tether.TaskLog(f"sqlite:///{path}").store
    row = store.get_task("default", "old")
    assert row is not None and (row.version, row.updated_at, row.calls_done) == (100, 100.0, 99)
    store.append("default", "old", [EventRow(s, "CallCompleted", 1, float(s), "{}") for s in range(101, 171)], 100)
    row = store.get_task("default", "old")
    assert row is not None and (row.version, row.updated_at, row.calls_done) == (170, 170.0, 169)
    store.close()
    from tether.store._sql import HEAD_EVERY

    assert f"WHEN NEW.seq % {HEAD_EVERY} = 0" in MIGRATIONS[2]  # the trigger moves the row as reads expect


def test_a_database_whose_set_aside_branches_are_claimable_migrates(store_url: str) -> None:
    """A branch set aside before they were made inert (its row waiting, due): opening the database
    makes it inert, and leaves a task that really waits as it is."""
    from tether.store._sql import ARCHIVED_INERT

    app = tether.App(store_url, inline_wait=0)
    waits = _waits_then_sends(app, [])
    app.run(waits, task_id="p")
    app.run(waits, task_id="other")
    app.rewind("p", to=app.state("p").version)
    app.close()
    old = "UPDATE tasks SET status = 'awaiting_input', wake_at = 1.0 WHERE task_id = 'p~1'"
    if store_url.startswith("sqlite:///"):
        import sqlite3

        from tether.store._sqlite_schema import MIGRATIONS

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        conn.execute(old)
        conn.execute("ALTER TABLE tasks DROP COLUMN parked")  # as a database of that version has it
        conn.execute("DROP TABLE workers")
        conn.execute(f"PRAGMA user_version = {MIGRATIONS.index(ARCHIVED_INERT + ';')}")
        conn.commit()
        conn.close()
    else:
        import psycopg
        from psycopg import sql

        from tether.store._postgres_schema import MIGRATIONS

        base, _, query = store_url.partition("?")
        schema = dict(part.split("=") for part in query.split("&"))["schema"]
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            conn.execute(old)
            conn.execute("ALTER TABLE tasks DROP COLUMN parked")
            conn.execute("DROP TABLE workers")
            conn.execute("ALTER TABLE snapshots DROP COLUMN raw")
            before = MIGRATIONS.index(ARCHIVED_INERT + ";")
            conn.execute("UPDATE tether_meta SET value = %s WHERE key = 'schema_version'", (str(before),))
    reopened = tether.App(store_url)
    row = reopened.store.get_task(reopened.tenant, "p~1")
    assert row is not None and row.status == "cancelled" and row.wake_at is None
    waiting = reopened.store.get_task(reopened.tenant, "other")
    assert waiting is not None and waiting.status == "awaiting_input"
