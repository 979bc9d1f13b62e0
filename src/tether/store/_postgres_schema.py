"""The PostgreSQL backend's schema: tether creates and migrates its own (``?schema=`` in the URL,
default ``tether``), under an advisory lock so that many processes may start at once.
:data:`MIGRATIONS` is an ordered list whose index is the version, recorded in ``tether_meta``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from tether.errors import ConfigurationError, SchemaVersionError
from tether.store._sql import ARCHIVED_INERT, ID_ORDER, PARKED_COLUMN, SCALE_INDEXES, WORKERS_TABLE, newer_schema

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "check_schema", "migrate"]

MIGRATIONS: list[str] = [
    # 1: tasks, events, snapshots, ledger, and the notification that wakes workers.
    """
    CREATE TABLE tasks (
        id            bigserial PRIMARY KEY,
        tenant        text NOT NULL,
        task_id       text NOT NULL,
        type          text NOT NULL,
        status        text NOT NULL,
        user_id       text,
        session_id    text,
        created_at    double precision NOT NULL,
        parent        bigint REFERENCES tasks (id),
        parent_seq    integer,
        lease_owner   text,
        lease_expires double precision,
        lease_token   bigint NOT NULL DEFAULT 0,
        wake_at       double precision,
        UNIQUE (tenant, task_id)
    );
    CREATE INDEX tasks_by_status ON tasks (tenant, status, created_at);
    CREATE INDEX tasks_by_created ON tasks (tenant, created_at);
    CREATE INDEX tasks_by_user ON tasks (tenant, user_id, created_at);
    CREATE INDEX tasks_by_session ON tasks (tenant, session_id, created_at);
    CREATE TABLE events (
        task   bigint NOT NULL,
        seq    integer NOT NULL,
        type   text NOT NULL,
        schema integer NOT NULL,
        at     double precision NOT NULL,
        data   jsonb NOT NULL,
        fence  bigint,
        PRIMARY KEY (task, seq)
    );
    CREATE TABLE snapshots (
        task     bigint NOT NULL,
        seq      integer NOT NULL,
        schema   integer NOT NULL,
        checksum text NOT NULL,
        data     text NOT NULL,
        PRIMARY KEY (task, seq)
    );
    CREATE TABLE ledger (
        tenant      text NOT NULL,
        key         text NOT NULL,
        status      text NOT NULL,
        result      text,
        started_at  double precision NOT NULL,
        finished_at double precision,
        runs        integer NOT NULL,
        PRIMARY KEY (tenant, key)
    );
    CREATE FUNCTION tether_wake() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('tether_' || TG_TABLE_SCHEMA, '');
        RETURN NULL;
    END $$;
    CREATE TRIGGER tasks_wake AFTER INSERT OR UPDATE OF status, wake_at, lease_owner ON tasks
        FOR EACH ROW EXECUTE FUNCTION tether_wake();
    """,
    # 2: the index row keeps where a task stands (a listing, a status: one row read): its version
    # and last change and its committed calls, moved by the append's own statement, and the head
    # the log writes. Every append updates the row, so a wake-up is sent only when what a claimer
    # looks at changes.
    """
    ALTER TABLE tasks ADD COLUMN version integer NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN updated_at double precision NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN calls_done integer NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN summary text;
    ALTER TABLE tasks ADD COLUMN output text;
    UPDATE tasks SET
        version = COALESCE((SELECT max(seq) FROM events WHERE task = tasks.id), parent_seq, 0),
        updated_at = COALESCE((SELECT at FROM events WHERE task = tasks.id ORDER BY seq DESC LIMIT 1), created_at);
    DROP TRIGGER tasks_wake ON tasks;
    CREATE TRIGGER tasks_wake_new AFTER INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION tether_wake();
    CREATE TRIGGER tasks_wake AFTER UPDATE OF status, wake_at, lease_owner ON tasks FOR EACH ROW
        WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.wake_at IS DISTINCT FROM NEW.wake_at
              OR OLD.lease_owner IS DISTINCT FROM NEW.lease_owner)
        EXECUTE FUNCTION tether_wake();
    """,
    # 3: no wake-up when a lease is taken, for a task created leased, or for the lease of a finished
    # task given back. None of them makes anything claimable or anything anyone
    # waits for: a run's status changes are what readers see, and a finished task is held by nobody
    # to them (serve shows no holder). A NOTIFY holds a lock of the whole database from its commit's
    # WAL flush to its end, so every notifying commit of every process waits for the one before it:
    # with many async runs at once, their lease takes and releases queued there.
    """
    DROP TRIGGER tasks_wake_new ON tasks;
    CREATE TRIGGER tasks_wake_new AFTER INSERT ON tasks FOR EACH ROW WHEN (NEW.lease_owner IS NULL)
        EXECUTE FUNCTION tether_wake();
    DROP TRIGGER tasks_wake ON tasks;
    CREATE TRIGGER tasks_wake AFTER UPDATE OF status, wake_at, lease_owner ON tasks FOR EACH ROW
        WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.wake_at IS DISTINCT FROM NEW.wake_at
              OR (OLD.lease_owner IS NOT NULL AND NEW.lease_owner IS NULL
                  AND NEW.status NOT IN ('completed', 'failed', 'cancelled')))
        EXECUTE FUNCTION tether_wake();
    """,
    # 4: the claim reads only the tasks it may take, in the order it takes them, a fork check only a
    # task's forks, a listing of one type only that type (so their cost does not grow with the
    # tasks waiting on people, asleep or of other kinds).
    SCALE_INDEXES,
    # 5: the ids that start with a prefix (a task id's first characters, an ADK app's document among
    # its users', one user's sessions) read as a range of ids in byte order, whatever the database's
    # collation orders text by (the unique key's index is in that collation: 'a-b' may sort after
    # 'ab' in it, and a range of it would miss ids).
    f"CREATE INDEX tasks_by_id ON tasks (tenant, task_id{ID_ORDER});",
    # 6: the branches rewinds set aside are inert: no worker takes one again.
    ARCHIVED_INERT + ";",
    # 7: a task no run can go on with (a divergence, an unreadable record) is parked, not claimed again.
    PARKED_COLUMN,
    # 8: the workers say they are alive (Store.record_worker), so a person learns whether any is there.
    WORKERS_TABLE.replace("{time}", "double precision"),
    # 9: a snapshot's data is text or bytes (SnapshotRow.data): bytes in a column of their own. data
    # stays NOT NULL (empty beside bytes): a process of the previous release still running on the
    # database reads that empty text, finds it fails its checksum and folds the events instead.
    "ALTER TABLE snapshots ADD COLUMN raw bytea;",
]
SCHEMA_VERSION = len(MIGRATIONS)
LOCK_KEY = 0x7E7E_E12  # pg_advisory_xact_lock key for migrations


def _version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The tether schema version ``schema`` records, 0 if it records none, None if it has no
    ``tether_meta`` table (or does not exist). Two indexed catalog lookups and one row, with no lock
    taken: what every open of an up-to-date database costs (``information_schema`` views cost
    several times that, and more as the catalog grows)."""
    meta = sql.SQL("{}.tether_meta").format(sql.Identifier(schema)).as_string(conn)
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (meta,)).fetchone()
    if not (found and found[0]):
        return None
    row = conn.execute(
        sql.SQL("SELECT value FROM {}.tether_meta WHERE key = 'schema_version'").format(sql.Identifier(schema))
    ).fetchone()
    return int(row[0]) if row else 0


def check_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """For a read-only open: the schema must hold tether's tables at this code's version; nothing
    is created or migrated."""
    version = _version(conn, schema)
    if version is None:
        raise ConfigurationError(
            f"schema {schema!r} holds no tether database; nothing to read, and nothing was created"
        )
    if version != SCHEMA_VERSION:
        raise SchemaVersionError(
            f"schema {schema!r} has tether schema version {version}; this tether reads version "
            f"{SCHEMA_VERSION}" + ("; upgrade tether" if version > SCHEMA_VERSION else "; open it once to migrate"),
            found=version,
            supported=SCHEMA_VERSION,
        )


def migrate(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the schema if need be and bring it to :data:`SCHEMA_VERSION`, in one transaction.

    A schema already at this version is only read, with no lock and no DDL: a migration commits
    whole, so a schema read at this version stays so (a newer tether's migration aside, which the
    next open reports)."""
    if _version(conn, schema) == SCHEMA_VERSION:
        return
    name = sql.Identifier(schema)
    with conn.transaction():
        # Many processes may start at once: one migrates, the others wait here, then see it done.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
                (schema,),
            )
        }
        if tables and "tether_meta" not in tables:
            raise ConfigurationError(
                f"schema {schema!r} holds tables that are not tether's ({', '.join(sorted(tables))}); "
                "use ?schema= to give tether a schema of its own"
            )
        conn.execute("CREATE TABLE IF NOT EXISTS tether_meta (key text PRIMARY KEY, value text NOT NULL)")
        row = conn.execute("SELECT value FROM tether_meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise newer_schema(f"schema {schema!r}", version, SCHEMA_VERSION)
        for index in range(version, SCHEMA_VERSION):
            conn.execute(MIGRATIONS[index])
        conn.execute(
            "INSERT INTO tether_meta VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
