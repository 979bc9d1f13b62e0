"""The SQLite backend's schema: created and migrated by tether itself (:data:`MIGRATIONS`, whose
index is the version, recorded in ``PRAGMA user_version``). A file that is not a tether database,
or one written by a newer tether, is refused with a message saying so.
"""

from __future__ import annotations

import sqlite3

from tether.errors import ConfigurationError, SchemaVersionError
from tether.store._sql import ARCHIVED_INERT, PARKED_COLUMN, SCALE_INDEXES, WORKERS_TABLE, newer_schema
from tether.store._sqlite_files import rollback

__all__ = ["EVENTS_AS_ROWS", "MIGRATIONS", "SCHEMA_VERSION", "check_schema", "migrate"]

# The trigger that brings a task's row up to its events every HEAD_EVERY-th event (migration 3). A
# table dropped takes its triggers with it: the events' rebuild (migration 8) makes it again.
_MOVE_TASK = """
CREATE TRIGGER events_move_task AFTER INSERT ON events WHEN NEW.seq % 64 = 0 BEGIN
    UPDATE tasks SET calls_done = calls_done + (
                         SELECT count(*) FROM events e
                         WHERE e.task = NEW.task AND e.seq > tasks.version AND e.seq <= NEW.seq
                           AND e.type = 'CallCompleted'),
                     version = NEW.seq, updated_at = NEW.at
    WHERE id = NEW.task AND version < NEW.seq;
END;
"""

# The events as a rowid table whose primary key (task, seq) is a unique index: read in the same order,
# and a second event at a seq refused by the insert itself, as before. SQLite keeps up to ~4 KB of a
# rowid table's row in its page, against ~1 KB of a WITHOUT ROWID table's, whose 1-4 KB events each
# took an overflow page of their own. Rebuilt inside the migration's transaction: the rows copied in
# (task, seq) order, the old table dropped, the new one renamed, its trigger made again.
EVENTS_AS_ROWS = f"""
CREATE TABLE events_rows (
    task   INTEGER NOT NULL,
    seq    INTEGER NOT NULL,
    type   TEXT NOT NULL,
    schema INTEGER NOT NULL,
    at     REAL NOT NULL,
    data   TEXT NOT NULL,
    fence  INTEGER,
    PRIMARY KEY (task, seq)
);
INSERT INTO events_rows (task, seq, type, schema, at, data, fence)
    SELECT task, seq, type, schema, at, data, fence FROM events ORDER BY task, seq;
DROP TABLE events;
ALTER TABLE events_rows RENAME TO events;
{_MOVE_TASK}"""

MIGRATIONS: list[str] = [
    # 1: tasks, events, snapshots, ledger.
    """
    CREATE TABLE tether_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO tether_meta VALUES ('application', 'tether');
    CREATE TABLE tasks (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant        TEXT NOT NULL,
        task_id       TEXT NOT NULL,
        type          TEXT NOT NULL,
        status        TEXT NOT NULL,
        user_id       TEXT,
        session_id    TEXT,
        created_at    REAL NOT NULL,
        parent        INTEGER REFERENCES tasks (id),
        parent_seq    INTEGER,
        lease_owner   TEXT,
        lease_expires REAL,
        lease_token   INTEGER NOT NULL DEFAULT 0,
        wake_at       REAL,
        UNIQUE (tenant, task_id)
    );
    CREATE INDEX tasks_by_status ON tasks (tenant, status, created_at);
    CREATE INDEX tasks_by_created ON tasks (tenant, created_at);
    CREATE INDEX tasks_by_user ON tasks (tenant, user_id, created_at);
    CREATE INDEX tasks_by_session ON tasks (tenant, session_id, created_at);
    -- (task, seq) is the primary key, so the version check of an append is the insert itself.
    CREATE TABLE events (
        task   INTEGER NOT NULL,
        seq    INTEGER NOT NULL,
        type   TEXT NOT NULL,
        schema INTEGER NOT NULL,
        at     REAL NOT NULL,
        data   TEXT NOT NULL,
        fence  INTEGER,
        PRIMARY KEY (task, seq)
    ) WITHOUT ROWID;
    CREATE TABLE snapshots (
        task     INTEGER NOT NULL,
        seq      INTEGER NOT NULL,
        schema   INTEGER NOT NULL,
        checksum TEXT NOT NULL,
        data     TEXT NOT NULL,
        PRIMARY KEY (task, seq)
    );
    CREATE TABLE ledger (
        tenant      TEXT NOT NULL,
        key         TEXT NOT NULL,
        status      TEXT NOT NULL,
        result      TEXT,
        started_at  REAL NOT NULL,
        finished_at REAL,
        runs        INTEGER NOT NULL,
        PRIMARY KEY (tenant, key)
    ) WITHOUT ROWID;
    """,
    # 2: the index row keeps where a task stands (a listing, a status: one row read): its version
    # and last change, moved by a trigger in the statement that inserts each event (so the
    # one-statement append stays one statement), with its committed calls counted; the rest of its
    # head the log writes.
    """
    ALTER TABLE tasks ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN updated_at REAL NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN calls_done INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN summary TEXT;
    ALTER TABLE tasks ADD COLUMN output TEXT;
    UPDATE tasks SET
        version = COALESCE((SELECT max(seq) FROM events WHERE task = tasks.id), parent_seq, 0),
        updated_at = COALESCE((SELECT at FROM events WHERE task = tasks.id ORDER BY seq DESC LIMIT 1), created_at);
    CREATE TRIGGER events_move_task AFTER INSERT ON events BEGIN
        UPDATE tasks SET version = NEW.seq, updated_at = NEW.at,
                         calls_done = calls_done + (NEW.type = 'CallCompleted')
        WHERE id = NEW.task;
    END;
    """,
    # 3: the row follows its events every HEAD_EVERY-th event, not every event (an append writes its
    # event's page alone); reads add what came after (store/_sql.py, TASK_COLUMNS).
    "DROP TRIGGER events_move_task;" + _MOVE_TASK,
    # 4: the claim reads only the tasks it may take, in the order it takes them, a fork check only a
    # task's forks, a listing of one type only that type (so their cost does not grow with the
    # tasks waiting on people, asleep or of other kinds).
    SCALE_INDEXES,
    # 5: the branches rewinds set aside are inert: no worker takes one again.
    ARCHIVED_INERT + ";",
    # 6: a task no run can go on with (a divergence, an unreadable record) is parked, not claimed again.
    PARKED_COLUMN,
    # 7: the workers say they are alive (Store.record_worker), so a person learns whether any is there.
    WORKERS_TABLE.replace("{time}", "REAL"),
    # 8: the events in a rowid table, so an event of a few KB shares its page with others.
    EVENTS_AS_ROWS,
]
SCHEMA_VERSION = len(MIGRATIONS)


def check_schema(conn: sqlite3.Connection, path: str) -> None:
    """For a read-only open: the file must already be a tether database of a version we read."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "tether_meta" not in tables or version == 0:
        what = f"it has tables {', '.join(sorted(tables))}" if tables else "it is empty"
        raise ConfigurationError(
            f"{path!r} is not a tether database ({what}); nothing to read, and nothing was changed"
        )
    if version > SCHEMA_VERSION:
        raise newer_schema(repr(path), version, SCHEMA_VERSION)
    if version < SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path!r} has tether schema version {version} and needs migrating to {SCHEMA_VERSION}; "
            "open it once with a command that writes (or your app) to migrate it",
            found=version,
            supported=SCHEMA_VERSION,
        )


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the file to :data:`SCHEMA_VERSION`, creating tether's tables in a new one."""
    conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then see it done
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version == 0 and tables - {"sqlite_sequence"}:
            raise ConfigurationError(
                f"{path!r} is a SQLite database but not a tether database "
                f"(it has tables {', '.join(sorted(tables))}); use another file"
            )
        if version > SCHEMA_VERSION:
            raise newer_schema(repr(path), version, SCHEMA_VERSION)
        if version > 0 and "tether_meta" not in tables:
            raise ConfigurationError(f"{path!r} is not a tether database (no tether_meta table)")
        for index in range(version, SCHEMA_VERSION):
            for statement in _statements(MIGRATIONS[index]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {index + 1}")
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def _statements(script: str) -> list[str]:
    """The script's statements, one by one (a trigger's body, with its own semicolons, is one)."""
    code = "\n".join(line for line in script.splitlines() if not line.strip().startswith("--"))
    statements: list[str] = []
    pending = ""
    for piece in code.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                statements.append(pending.strip())
            pending = ""
    return statements
