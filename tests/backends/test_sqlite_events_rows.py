"""SQLite keeps events in a rowid table keyed by (task, seq) (schema 8): a database of schema 7,
whose events are a WITHOUT ROWID table, is rebuilt into it in one transaction, reads back row for
row, keeps refusing a second event at a seq, and its reads go through the key's index."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.errors import ConfigurationError, ConflictError
from tether.events import DecisionMade
from tether.store import EventRow, TaskFilter, _sql, _sqlite_schema
from tether.store import _sqlite_sql as own

SIZES = (40, 1_500, 3_000, 6_000)  # results around and past what a WITHOUT ROWID row keeps in its page


def _schema_7_database(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database as tether wrote it at schema 7: tether's own writes (runs with leases and fenced
    appends, calls of every size, a fork, a conversation), the migrations stopped at 7."""
    with monkeypatch.context() as patched:
        patched.setattr(_sqlite_schema, "SCHEMA_VERSION", 7)
        app = tether.App(f"sqlite:///{path}")

        @app.tool
        def fetch(i: int) -> str:
            return "x" * SIZES[i % len(SIZES)]

        @app.task
        def gather(ctx: tether.TaskContext, count: int) -> int:
            return sum(len(ctx.call(fetch, i=i)) for i in range(count))

        app.run(gather, count=70, task_id="long")  # past the trigger's 64th event
        app.run(gather, count=5, task_id="short")
        app.fork("long", at=20, new_id="branch")
        session = app.session("s1", user_id="u1")
        session.add({"role": "user", "content": "hello " * 400})
        session.add({"role": "assistant", "content": "hi"})
        app.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
    assert "WITHOUT ROWID" in _events_sql(conn)
    conn.close()


def _events_sql(conn: sqlite3.Connection) -> str:
    found = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'events'").fetchone()
    assert found is not None
    return str(found[0])


def _everything(path: Path) -> tuple[list[Any], list[Any], list[Any]]:
    """Every event, task row and snapshot as stored, in order."""
    conn = sqlite3.connect(path)
    try:
        events = conn.execute("SELECT * FROM events ORDER BY task, seq").fetchall()
        tasks = conn.execute("SELECT * FROM tasks ORDER BY id").fetchall()
        snapshots = conn.execute("SELECT * FROM snapshots ORDER BY task, seq").fetchall()
    finally:
        conn.close()
    return events, tasks, snapshots


def test_a_schema_7_database_moves_its_events_to_a_rowid_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v7.db"
    _schema_7_database(path, monkeypatch)
    stored = _everything(path)
    old = tether.App(f"sqlite:///{path}", inline_wait=0)  # migrates
    assert _everything(path) == stored  # every row as it was, in the same order
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == _sqlite_schema.SCHEMA_VERSION
    assert _sqlite_schema.MIGRATIONS[7] == _sqlite_schema.EVENTS_AS_ROWS  # migration 8
    assert "WITHOUT ROWID" not in _events_sql(conn) and "PRIMARY KEY (task, seq)" in _events_sql(conn)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'events' ORDER BY name")] == [
        "events",
        "events_move_task",
        "sqlite_autoindex_events_1",
    ]
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0  # nothing about the file's upkeep changed
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # Events of a few KB now share pages: none past ~4 KB's takes an overflow page.
    overflow = conn.execute("SELECT count(*) FROM dbstat WHERE name = 'events' AND pagetype = 'overflow'").fetchone()
    big = conn.execute("SELECT count(*) FROM events WHERE length(data) > 4000").fetchone()
    assert overflow[0] == big[0] > 0
    conn.close()

    # Read through tether, the migrated database gives what was written, and refuses a stale append.
    assert old.state("long").output == sum(SIZES[i % len(SIZES)] for i in range(70))
    assert len(old.state("long").calls) == 70 and old.state("branch").parent is not None
    assert [m.content for m in old.session("s1").messages()][1] == "hi"
    rows = {r.task_id: r for r in old.store.list_tasks(old.tenant, TaskFilter(internal=True))}
    assert rows["long"].version == len(old.log.events("long")) and rows["long"].calls_done == 70
    version = old.log.version("long")
    with pytest.raises(ConflictError):
        old.log.append("long", [DecisionMade(name="late", choice=1, rationale="after the move")], version - 1)
    assert old.log.version("long") == version
    old.close()

    # The key still refuses a second event at a seq, on the store's unguarded insert too.
    conn = sqlite3.connect(path)
    task, seq = conn.execute("SELECT task, max(seq) FROM events GROUP BY task LIMIT 1").fetchone()
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        conn.execute(own.INSERT_NEXT, (task, seq, "DecisionMade", 1, 1.0, "{}", None))
    conn.close()

    # The trigger made again moves a task's row at its next 64th event.
    store = tether.TaskLog(f"sqlite:///{path}").store
    short = store.get_task("default", "short")
    assert short is not None
    appended = [
        EventRow(s, "DecisionMade", 1, float(s), '{"name": "d", "choice": 1, "rationale": ""}')
        for s in range(short.version + 1, 129)
    ]
    store.append("default", "short", appended, short.version)
    raw = sqlite3.connect(path).execute("SELECT version FROM tasks WHERE task_id = 'short'").fetchone()[0]
    assert raw == 128
    store.close()


def test_a_migration_that_fails_leaves_the_schema_7_database_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v7.db"
    _schema_7_database(path, monkeypatch)
    stored = _everything(path)
    failing = _sqlite_schema.EVENTS_AS_ROWS + "INSERT INTO nowhere VALUES (1);"  # after the old table is dropped
    monkeypatch.setattr(
        _sqlite_schema, "MIGRATIONS", [*_sqlite_schema.MIGRATIONS[:7], failing, *_sqlite_schema.MIGRATIONS[8:]]
    )
    with pytest.raises(ConfigurationError):
        tether.App(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 7 and "WITHOUT ROWID" in _events_sql(conn)
    conn.close()
    assert _everything(path) == stored


READS = {
    "read_from": (own.READ_FROM, 2),
    "read_range": (own.READ_RANGE, 3),
    "guard": (own.INSERT_FIRST, 7),
    "fenced_guard": (own.INSERT_FIRST_FENCED, 7),
    "task_row": (_sql.Statements().select_task, 2),
    "version": (_sql.Statements().version_of, 2),
    "settle_row": (_sql.Statements().settle_row, 5),
    "delete": (_sql.Statements().delete_events, 1),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_the_events_reads_go_through_the_key(tmp_path: Path, name: str) -> None:
    """Each statement on a stream's events searches the (task, seq) index, in its order (no scan of
    the table, no sort)."""
    store = tether.TaskLog(f"sqlite:///{tmp_path / 't.db'}").store
    store.close()
    statement, parameters = READS[name]
    conn = sqlite3.connect(tmp_path / "t.db")
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, [1] * parameters)]
    conn.close()
    on_events = [step for step in plan if step.startswith(("SEARCH e ", "SEARCH events ", "SCAN e", "SCAN events"))]
    assert on_events and all("USING" in s and "INDEX sqlite_autoindex_events_1 (task=?" in s for s in on_events), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
