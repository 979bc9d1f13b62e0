"""``postgresql://`` — many workers on many machines.

psycopg 3 with a ``psycopg_pool`` pool. tether creates and migrates its own
schema (``?schema=`` in the URL, default ``tether``), under an advisory lock so
that many processes may start at once. Event payloads are JSONB. The common
append is one statement, one round trip: the version check and the fencing
token are conditions of the insert itself. Workers claim with ``FOR UPDATE SKIP
LOCKED`` and wake on ``LISTEN/NOTIFY``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        "the PostgreSQL backend needs psycopg 3 and psycopg_pool: pip install 'tether[postgres]'"
    ) from exc

from tether._validate import option_float, option_int
from tether.errors import (
    ConfigurationError,
    ConflictError,
    SchemaVersionError,
    StoreUnavailableError,
    TaskNotFoundError,
)
from tether.store._postgres_io import (
    CONNECT_TIMEOUT,
    GIVE_UP_AFTER,
    QUERY_TIMEOUT,
    TCP_OPTIONS,
    Watchdog,
    check_schema_name,
    from_jsonb,
    is_connection_fault,
    refused,
    split_url,
    to_jsonb,
    with_default_params,
)
from tether.store.base import (
    ChangeSignal,
    EventRow,
    IndexUpdate,
    LedgerRow,
    SnapshotRow,
    TaskFilter,
    TaskRow,
    check_batch,
    read_across_forks,
    redact_url,
    refusal,
)

__all__ = ["MIGRATIONS", "PostgresStore"]

log = logging.getLogger("tether")
T = TypeVar("T")

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
]
SCHEMA_VERSION = len(MIGRATIONS)
_LOCK_KEY = 0x7E7E_E12  # pg_advisory_xact_lock key for migrations
# One statement, one round trip: the guard (fencing token, predecessor present) and the
# insert and the index update share a snapshot; a concurrent append of the same seq loses
# on the primary key.
_APPEND = """
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
    RETURNING 1
), idx AS (
    UPDATE tasks SET status = COALESCE(%(status)s, status), wake_at = %(wake)s
    WHERE id = %(task)s AND %(reindex)s AND EXISTS (SELECT 1 FROM guard)
    RETURNING 1
)
SELECT (SELECT count(*) FROM ins)
"""

# The common case, one event and no index change: the same guard, a plain INSERT ... SELECT. Its
# values come in once each, by position (cheaper for the driver than named parameters).
_APPEND_ONE = """
INSERT INTO events (task, seq, type, schema, at, data, fence)
SELECT v.task, v.seq, v.type, v.schema, v.at, v.data::jsonb, v.fence
FROM (VALUES (%s::bigint, %s::integer, %s::text, %s::integer, %s::float8, %s::text, %s::bigint, %s::text, %s::text))
    AS v (task, seq, type, schema, at, data, fence, task_id, tenant)
WHERE (v.fence IS NULL OR (SELECT lease_token FROM tasks WHERE id = v.task) = v.fence)
  AND EXISTS (SELECT 1 FROM tasks WHERE id = v.task AND task_id = v.task_id AND tenant = v.tenant)
  AND (EXISTS (SELECT 1 FROM events WHERE task = v.task AND seq = v.seq - 1)
       OR (SELECT parent_seq FROM tasks WHERE id = v.task) = v.seq - 1)
"""

_CLAIM = """
UPDATE tasks SET lease_owner = %(owner)s, lease_expires = %(expires)s, lease_token = lease_token + 1
WHERE id = (
    SELECT id FROM tasks
    WHERE tenant = %(tenant)s
      AND (lease_owner IS NULL OR lease_expires <= %(now)s)
      AND (status IN ('pending', 'running')
           OR (status IN ('sleeping', 'awaiting_input') AND wake_at <= %(now)s))
    ORDER BY COALESCE(wake_at, created_at)
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING task_id, lease_token
"""

_TASK_COLUMNS = """
    t.task_id, t.tenant, t.type, t.status, t.user_id, t.session_id, t.created_at,
    COALESCE((SELECT at FROM events e WHERE e.task = t.id ORDER BY seq DESC LIMIT 1), t.created_at),
    COALESCE((SELECT max(seq) FROM events e WHERE e.task = t.id), t.parent_seq, 0),
    p.task_id, t.parent_seq, t.lease_owner, t.lease_expires, t.lease_token, t.wake_at
"""


class PostgresStore:
    """The PostgreSQL backend.

    Args:
        url: ``postgresql://user@host:5432/db``, with ``?schema=name`` (default ``tether``),
            ``pool_min`` and ``pool_max`` taken out for tether.

    Example:
        >>> store = PostgresStore("postgresql://postgres@127.0.0.1:5432/test?schema=doc")  # doctest: +SKIP
    """

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_min: int = 1,
        pool_max: int = 10,
        query_timeout: float = QUERY_TIMEOUT,
        give_up_after: float = GIVE_UP_AFTER,
        readonly: bool = False,
    ) -> None:
        conninfo, ours = split_url(url)
        waits: dict[str, Any] = {"query_timeout": query_timeout, "give_up_after": give_up_after}
        waits.update({k: v for k, v in ours.items() if k in waits})
        libpq = dict(parse_qsl(urlsplit(conninfo).query))
        waits["connect_timeout"] = libpq.get("connect_timeout", CONNECT_TIMEOUT)
        for name in waits:
            option_float(waits, name)
        self.query_timeout: float = waits["query_timeout"]
        self.give_up_after: float = waits["give_up_after"]
        self.connect_timeout: float = waits["connect_timeout"]
        self.url = redact_url(url)  # what is shown and kept; the password lives only in _conninfo
        self.schema = schema or ours.get("schema", "tether")
        sizes: dict[str, Any] = {"pool_min": pool_min, "pool_max": pool_max}
        sizes.update({k: v for k, v in ours.items() if k in sizes})
        option_int(sizes, "pool_min", low=0)
        option_int(sizes, "pool_max", low=1)
        pool_min, pool_max = sizes["pool_min"], sizes["pool_max"]
        if pool_min > pool_max:
            raise ConfigurationError(f"store option pool_min ({pool_min}) is above pool_max ({pool_max})")
        check_schema_name(self.schema)
        # Every connection says whose it is (pg_stat_activity.application_name), so an operator,
        # or a test, can find and end tether's connections of one schema and nobody else's.
        self.application_name = f"tether:{self.schema}"
        self.readonly = readonly
        if readonly:  # the server itself refuses every write on these connections
            conninfo = with_default_params(conninfo, options="-c default_transaction_read_only=on")
        conninfo = with_default_params(
            conninfo,
            application_name=self.application_name,
            connect_timeout=str(max(1, round(self.connect_timeout))),  # libpq counts whole seconds, at least 2
            **TCP_OPTIONS,
        )
        self._conninfo = conninfo
        self._watchdog = Watchdog()
        try:
            with psycopg.connect(conninfo, autocommit=True) as conn, self._watchdog.watch(conn, self.query_timeout):
                if readonly:
                    self._check_schema(conn)
                else:
                    self._migrate(conn)
        except psycopg.OperationalError as exc:
            raise ConfigurationError(f"cannot reach PostgreSQL at {redact_url(conninfo)}: {exc}") from exc
        search_path = sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema))

        def configure(conn: psycopg.Connection[Any]) -> None:
            conn.execute(search_path)

        self._pool = ConnectionPool(
            conninfo,
            min_size=pool_min,
            max_size=pool_max,
            open=True,
            kwargs={"autocommit": True},
            configure=configure,
            name=f"tether-{self.schema}",
            timeout=self.connect_timeout,
            reconnect_timeout=max(self.give_up_after, 1.0),
        )
        # A store dropped without close() still closes its pool, quietly, when it is collected.
        weakref.finalize(self, _close_pool, self._pool)
        self._ids: dict[tuple[str, str], int] = {}
        self._local = threading.local()
        self._changes = ChangeSignal()
        self._listener_lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._closed = False

    # -- connections --------------------------------------------------------------
    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
        """For a read-only open: the schema must hold tether's tables at this code's version; nothing
        is created or migrated."""
        found = conn.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'tether_meta'",
            (self.schema,),
        ).fetchone()
        if found is None:
            raise ConfigurationError(
                f"schema {self.schema!r} holds no tether database; nothing to read, and nothing was created"
            )
        row = conn.execute(
            sql.SQL("SELECT value FROM {}.tether_meta WHERE key = 'schema_version'").format(sql.Identifier(self.schema))
        ).fetchone()
        version = int(row[0]) if row else 0
        if version != SCHEMA_VERSION:
            raise SchemaVersionError(
                f"schema {self.schema!r} has tether schema version {version}; this tether reads version "
                f"{SCHEMA_VERSION}" + ("; upgrade tether" if version > SCHEMA_VERSION else "; open it once to migrate"),
                found=version,
                supported=SCHEMA_VERSION,
            )

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        schema = sql.Identifier(self.schema)
        with conn.transaction():
            # Many processes may start at once: one migrates, the others wait here, then see it done.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(schema))
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (self.schema,)
                )
            }
            if tables and "tether_meta" not in tables:
                raise ConfigurationError(
                    f"schema {self.schema!r} holds tables that are not tether's ({', '.join(sorted(tables))}); "
                    "use ?schema= to give tether a schema of its own"
                )
            conn.execute("CREATE TABLE IF NOT EXISTS tether_meta (key text PRIMARY KEY, value text NOT NULL)")
            row = conn.execute("SELECT value FROM tether_meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"schema {self.schema!r} has tether schema version {version}, but this tether knows "
                    f"versions up to {SCHEMA_VERSION}; upgrade tether (pip install -U tether)",
                    found=version,
                    supported=SCHEMA_VERSION,
                )
            for index in range(version, SCHEMA_VERSION):
                conn.execute(MIGRATIONS[index])
            conn.execute(
                "INSERT INTO tether_meta VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA_VERSION),),
            )

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn`` on a pooled connection; again on fresh ones if connections broke (a restarted
        server, terminated backends), for at most ``give_up_after`` seconds. ``fn`` must be safe to
        run more than once. Every wait inside is bounded: getting a connection by
        ``connect_timeout``, the statements by ``query_timeout``."""
        deadline = time.monotonic() + self.give_up_after
        attempt = 0
        while True:
            try:
                with self._pool.connection(timeout=self._wait_left(deadline)) as conn:
                    with self._watchdog.watch(conn, self.query_timeout):
                        return fn(conn)
            except psycopg.OperationalError as exc:
                self._recover(attempt, exc, deadline)
                attempt += 1
            except psycopg.Error as exc:
                raise refused(exc) from exc

    def _wait_left(self, deadline: float) -> float:
        return max(0.1, min(self.connect_timeout, deadline - time.monotonic()))

    def _recover(self, attempt: int, exc: psycopg.Error, deadline: float) -> None:
        """After a broken connection: wait a little and try again, or give up at the deadline.

        Broken connections leave the pool as they are returned to it (psycopg_pool discards a
        connection whose state is unknown), so trying again soon reaches a good one. An error the
        server raised about the statement or its data is no connection fault: never retried."""
        if not is_connection_fault(exc):
            raise refused(exc) from exc
        if time.monotonic() >= deadline:
            raise StoreUnavailableError(
                f"PostgreSQL at {self.url} is unreachable: {attempt + 1} tries over {self.give_up_after:g} s "
                f"(give_up_after) failed; the last said: {exc}"
            ) from exc
        log.warning("PostgreSQL connection lost (%s); retrying", exc)
        time.sleep(max(0.0, min(0.05 * 2**attempt, 1.0, deadline - time.monotonic())))

    def _appender(self, deadline: float) -> psycopg.Cursor[Any]:
        """This thread's cursor for appends, on a connection kept while the thread lives: the hot path
        skips the pool. The connection goes back to the pool when the thread ends (or when it breaks)."""
        sticky: _Sticky | None = getattr(self._local, "sticky", None)
        if sticky is None or sticky.conn.closed:
            sticky = self._local.sticky = _Sticky(self._pool, self._pool.getconn(timeout=self._wait_left(deadline)))
        return sticky.cursor

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[Any]]:
        deadline = time.monotonic() + self.give_up_after
        try:
            with (
                self._pool.connection(timeout=self._wait_left(deadline)) as conn,
                self._watchdog.watch(conn, self.query_timeout),
                conn.transaction(),
            ):
                yield conn
        except psycopg.OperationalError as exc:
            if not is_connection_fault(exc):
                raise refused(exc) from exc
            raise StoreUnavailableError(f"PostgreSQL connection lost in a transaction: {exc}") from exc
        except psycopg.Error as exc:
            raise refused(exc) from exc

    def _fresh_id(self, tenant: str, task_id: str) -> int:
        """The task's row id as the store has it now (another process may have rewound or deleted it)."""
        self._ids.pop((tenant, task_id), None)
        return self._id(tenant, task_id)

    def _id(self, tenant: str, task_id: str) -> int:
        """The task's row id, cached: only appends use the cache, and their statement checks it."""
        key = (tenant, task_id)
        found = self._ids.get(key)
        if found is None:
            row = self._run(
                lambda c: c.execute("SELECT id FROM tasks WHERE tenant = %s AND task_id = %s", key).fetchone()
            )
            if row is None:
                raise TaskNotFoundError(task_id, tenant=tenant)
            found = self._ids[key] = int(row[0])
        return found

    def _version_of(self, conn: psycopg.Connection[Any], internal: int) -> int:
        row = conn.execute(
            "SELECT COALESCE((SELECT max(seq) FROM events WHERE task = %(t)s), "
            "(SELECT parent_seq FROM tasks WHERE id = %(t)s), 0)",
            {"t": internal},
        ).fetchone()
        return int(row[0]) if row else 0

    # -- streams ------------------------------------------------------------------
    def create_task(self, tenant: str, row: TaskRow, first: EventRow) -> None:
        parent = self._fresh_id(tenant, row.parent_id) if row.parent_id is not None else None

        def create(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                try:
                    found = conn.execute(
                        "INSERT INTO tasks (tenant, task_id, type, status, user_id, session_id, created_at, "
                        "parent, parent_seq, wake_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                        (
                            tenant,
                            row.task_id,
                            row.type,
                            row.status,
                            row.user_id,
                            row.session_id,
                            row.created_at,
                            parent,
                            row.parent_seq,
                            row.wake_at,
                        ),
                    ).fetchone()
                except psycopg.errors.UniqueViolation:
                    raise ConflictError(row.task_id, expected=0, actual=None) from None
                assert found is not None
                conn.execute(
                    "INSERT INTO events (task, seq, type, schema, at, data) VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                    (found[0], first.seq, first.type, first.schema, first.at, to_jsonb(first.data)),
                )
                return int(found[0])

        self._ids[(tenant, row.task_id)] = self._run(create)

    def append(
        self,
        tenant: str,
        task_id: str,
        events: Sequence[EventRow],
        expected_version: int,
        *,
        fence: int | None = None,
        index: IndexUpdate | None = None,
    ) -> None:
        check_batch(task_id, events, expected_version)
        try:
            self._append_to(self._id(tenant, task_id), tenant, task_id, events, expected_version, fence, index)
        except _StaleIdError:
            # The cached row id names another stream now (a rewind or a delete elsewhere): once more
            # with the id the store has; the statement checks it again.
            internal = self._fresh_id(tenant, task_id)
            self._append_to(internal, tenant, task_id, events, expected_version, fence, index, retry=False)

    def _append_to(
        self,
        internal: int,
        tenant: str,
        task_id: str,
        events: Sequence[EventRow],
        expected_version: int,
        fence: int | None,
        index: IndexUpdate | None,
        *,
        retry: bool = True,
    ) -> None:
        first = events[0]
        params: tuple[Any, ...] | dict[str, Any]
        if len(events) == 1 and index is None:
            statement = _APPEND_ONE
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
            statement = _APPEND
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
                "reindex": index is not None,
                "status": index.status if index is not None else None,
                "wake": index.wake_at if index is not None else None,
            }
        inserted = 0
        deadline = time.monotonic() + self.give_up_after
        attempt = 0
        while True:
            try:
                cursor = self._appender(deadline)
                with self._watchdog.watch(cursor.connection, self.query_timeout):
                    cursor.execute(statement, params)
                inserted = cursor.rowcount if statement is _APPEND_ONE else cursor.fetchone()[0]  # type: ignore[index]
                break
            except psycopg.errors.UniqueViolation:
                raise ConflictError(
                    task_id, expected=expected_version, actual=self._run(lambda c: self._version_of(c, internal))
                ) from None
            except psycopg.Error as exc:
                if isinstance(exc, psycopg.OperationalError) and is_connection_fault(exc):
                    self._local.__dict__.pop("sticky", None)  # its connection goes back to the pool, which drops it
                    self._recover(attempt, exc, deadline)
                    attempt += 1
                    # The append may or may not have committed before the connection broke: look first.
                    if self._already_there(internal, events, fence):
                        return
                    continue
                raise refused(exc) from exc
        if inserted != len(events):
            self._refuse(tenant, task_id, internal, expected_version, fence, stale=_StaleIdError if retry else None)

    def _already_there(self, internal: int, events: Sequence[EventRow], fence: int | None) -> bool:
        last = events[-1]
        found = self._run(
            lambda c: c.execute(
                "SELECT type, fence FROM events WHERE task = %s AND seq = %s", (internal, last.seq)
            ).fetchone()
        )
        return found is not None and found[0] == last.type and found[1] == fence

    def _refuse(
        self,
        tenant: str,
        task_id: str,
        internal: int,
        expected: int,
        fence: int | None,
        *,
        stale: type[Exception] | None = None,
    ) -> None:
        row = self._run(
            lambda c: c.execute("SELECT lease_token, tenant, task_id FROM tasks WHERE id = %s", (internal,)).fetchone()
        )
        if row is None or (row[1], row[2]) != (tenant, task_id):
            self._ids.pop((tenant, task_id), None)
            if stale is not None:
                raise stale()
            row = None
        token = None if row is None else int(row[0])
        version = lambda: self._run(lambda c: self._version_of(c, internal))  # noqa: E731
        raise refusal(task_id, tenant, token, fence, expected, version)

    def rewind(
        self,
        tenant: str,
        task_id: str,
        expected_version: int,
        *,
        archive_id: str,
        archived: EventRow,
        fork: TaskRow,
        forked: EventRow,
    ) -> None:
        internal = self._fresh_id(tenant, task_id)
        with self._tx() as conn:
            conn.execute("SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", (internal,))
            actual = self._version_of(conn, internal)
            if actual != expected_version:
                raise ConflictError(task_id, expected=expected_version, actual=actual)
            if (
                conn.execute("SELECT 1 FROM tasks WHERE tenant = %s AND task_id = %s", (tenant, archive_id)).fetchone()
                is not None
            ):
                raise ConflictError(archive_id, expected=0, actual=None)
            conn.execute("UPDATE tasks SET task_id = %s WHERE id = %s", (archive_id, internal))
            conn.execute(
                "INSERT INTO events (task, seq, type, schema, at, data) VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                (internal, archived.seq, archived.type, archived.schema, archived.at, to_jsonb(archived.data)),
            )
            new = conn.execute(
                "INSERT INTO tasks (tenant, task_id, type, status, user_id, session_id, created_at, parent, "
                "parent_seq) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    tenant,
                    task_id,
                    fork.type,
                    fork.status,
                    fork.user_id,
                    fork.session_id,
                    fork.created_at,
                    internal,
                    fork.parent_seq,
                ),
            ).fetchone()
            assert new is not None
            conn.execute(
                "INSERT INTO events (task, seq, type, schema, at, data) VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                (new[0], forked.seq, forked.type, forked.schema, forked.at, to_jsonb(forked.data)),
            )
        self._ids[(tenant, archive_id)] = internal
        self._ids[(tenant, task_id)] = int(new[0])

    def read_events(self, tenant: str, task_id: str, *, after: int = 0, upto: int | None = None) -> list[EventRow]:
        internal = self._fresh_id(tenant, task_id)

        def read(conn: psycopg.Connection[Any]) -> list[EventRow]:
            def parent_of(task: int) -> tuple[int, int] | None:
                found = conn.execute("SELECT parent, parent_seq FROM tasks WHERE id = %s", (task,)).fetchone()
                return None if found is None or found[0] is None or found[1] is None else (found[0], found[1])

            def segment(task: int, low: int, last: int | None) -> list[EventRow]:
                cursor = conn.execute(
                    "SELECT seq, type, schema, at, data::text, fence FROM events "
                    "WHERE task = %s AND seq > %s AND (%s::integer IS NULL OR seq <= %s) ORDER BY seq",
                    (task, low, last, last),
                )
                return [EventRow(r[0], r[1], r[2], r[3], from_jsonb(r[4]), r[5]) for r in cursor]

            return read_across_forks(internal, after, upto, parent_of, segment)

        return self._run(read)

    def get_task(self, tenant: str, task_id: str) -> TaskRow | None:
        row = self._run(
            lambda c: c.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks t LEFT JOIN tasks p ON p.id = t.parent "
                "WHERE t.tenant = %s AND t.task_id = %s",
                (tenant, task_id),
            ).fetchone()
        )
        return None if row is None else TaskRow(*row)

    def delete_task(self, tenant: str, task_id: str) -> int:
        internal = self._fresh_id(tenant, task_id)
        with self._tx() as conn:
            if conn.execute("SELECT 1 FROM tasks WHERE parent = %s", (internal,)).fetchone() is not None:
                raise ConflictError(task_id, expected=0, actual=None)
            gone = conn.execute("DELETE FROM events WHERE task = %s", (internal,)).rowcount
            conn.execute("DELETE FROM snapshots WHERE task = %s", (internal,))
            conn.execute("DELETE FROM tasks WHERE id = %s", (internal,))
        self._ids.pop((tenant, task_id), None)
        return int(gone)

    def list_tasks(self, tenant: str, flt: TaskFilter, *, limit: int = 100, offset: int = 0) -> list[TaskRow]:
        where = ["t.tenant = %s"]
        params: list[Any] = [tenant]
        if flt.status is not None:
            where.append("t.status = ANY(%s)")
            params.append(list(flt.status))
        for column, value in (("type", flt.type), ("user_id", flt.user_id), ("session_id", flt.session_id)):
            if value is not None:
                where.append(f"t.{column} = %s")
                params.append(value)
        if flt.type is None and not flt.internal:
            where.append("t.type NOT LIKE 'tether.%%'")
        if flt.created_after is not None:
            where.append("t.created_at >= %s")
            params.append(flt.created_after)
        if flt.created_before is not None:
            where.append("t.created_at < %s")
            params.append(flt.created_before)
        params.extend([limit, offset])
        query = (
            f"SELECT {_TASK_COLUMNS} FROM tasks t LEFT JOIN tasks p ON p.id = t.parent "
            f"WHERE {' AND '.join(where)} ORDER BY t.created_at DESC, t.task_id DESC LIMIT %s OFFSET %s"
        )
        return [TaskRow(*r) for r in self._run(lambda c: c.execute(query, params).fetchall())]

    # -- snapshots ----------------------------------------------------------------
    def put_snapshot(self, tenant: str, task_id: str, snapshot: SnapshotRow, *, replaces: int | None = None) -> None:
        internal = self._fresh_id(tenant, task_id)

        def put(c: psycopg.Connection[Any]) -> None:
            with c.transaction():
                c.execute(
                    "INSERT INTO snapshots (task, seq, schema, checksum, data) VALUES (%s, %s, %s, %s, %s) "
                    "ON CONFLICT (task, seq) DO UPDATE SET schema = excluded.schema, checksum = excluded.checksum, "
                    "data = excluded.data",
                    (internal, snapshot.seq, snapshot.schema, snapshot.checksum, _text(snapshot.data)),
                )
                if replaces is not None and replaces != snapshot.seq:
                    c.execute("DELETE FROM snapshots WHERE task = %s AND seq = %s", (internal, replaces))

        self._run(put)

    def get_snapshot(self, tenant: str, task_id: str, *, at_most: int) -> SnapshotRow | None:
        internal = self._fresh_id(tenant, task_id)
        row = self._run(
            lambda c: c.execute(
                "SELECT seq, schema, checksum, data FROM snapshots WHERE task = %s AND seq <= %s "
                "ORDER BY seq DESC LIMIT 1",
                (internal, min(at_most, 2**31 - 1)),
            ).fetchone()
        )
        return None if row is None else SnapshotRow(*row)

    # One statement, one round trip: the stream's row, its newest snapshot, and its own events
    # after that snapshot. A fork whose events reach back past its fork point (into its parent's)
    # takes the general path instead.
    _LATEST = (
        "WITH t AS (SELECT id, parent, parent_seq FROM tasks WHERE tenant = %s AND task_id = %s), "
        "s AS (SELECT seq, schema, checksum, data FROM snapshots WHERE task = (SELECT id FROM t) "
        "ORDER BY seq DESC LIMIT 1) "
        "SELECT 0, t.parent_seq, NULL::integer, NULL::text, NULL::text, NULL::double precision, "
        "NULL::bigint, (t.parent IS NOT NULL) FROM t "
        "UNION ALL SELECT 1, seq, schema, checksum, data, NULL, NULL, NULL FROM s "
        "UNION ALL (SELECT 2, e.seq, e.schema, e.type, e.data::text, e.at, e.fence, NULL FROM events e "
        "WHERE e.task = (SELECT id FROM t) AND e.seq > COALESCE((SELECT seq FROM s), 0) ORDER BY e.seq)"
    )

    def read_latest(self, tenant: str, task_id: str) -> tuple[SnapshotRow | None, list[EventRow]]:
        rows = self._run(lambda c: c.execute(self._LATEST, (tenant, task_id)).fetchall())
        if not rows or rows[0][0] != 0:
            raise TaskNotFoundError(task_id, tenant=tenant)
        fork_point, is_fork = rows[0][1], rows[0][7]
        snap = next((SnapshotRow(r[1], r[2], r[3], r[4]) for r in rows if r[0] == 1), None)
        if is_fork and (snap is None or fork_point is None or snap.seq < fork_point):
            snap = self.get_snapshot(tenant, task_id, at_most=2**31 - 1)
            return snap, self.read_events(tenant, task_id, after=snap.seq if snap else 0)
        events = [EventRow(r[1], r[3], r[2], r[5], from_jsonb(r[4]), r[6]) for r in rows if r[0] == 2]
        return snap, events

    # -- idempotency ledger ---------------------------------------------------------
    _LEDGER = "SELECT key, status, result, started_at, finished_at, runs FROM ledger WHERE tenant = %s AND key = %s"

    def ledger_get(self, tenant: str, key: str) -> LedgerRow | None:
        row = self._run(lambda c: c.execute(self._LEDGER, (tenant, key)).fetchone())
        return None if row is None else LedgerRow(*row)

    def ledger_begin(self, tenant: str, key: str, now: float) -> LedgerRow:
        with self._tx() as conn:
            inserted = conn.execute(
                "INSERT INTO ledger (tenant, key, status, started_at, runs) VALUES (%s, %s, 'started', %s, 1) "
                "ON CONFLICT (tenant, key) DO NOTHING RETURNING key",
                (tenant, key, now),
            ).fetchone()
            if inserted is not None:
                return LedgerRow(key, "new", None, now, None, 0)
            row = conn.execute(self._LEDGER + " FOR UPDATE", (tenant, key)).fetchone()
            assert row is not None
            if row[1] == "started":
                conn.execute("UPDATE ledger SET runs = runs + 1 WHERE tenant = %s AND key = %s", (tenant, key))
            return LedgerRow(*row)

    def ledger_finish(self, tenant: str, key: str, result: str | bytes, now: float) -> LedgerRow:
        def finish(conn: psycopg.Connection[Any]) -> LedgerRow:
            conn.execute(
                "INSERT INTO ledger (tenant, key, status, result, started_at, finished_at, runs) "
                "VALUES (%(t)s, %(k)s, 'done', %(r)s, %(n)s, %(n)s, 1) "
                "ON CONFLICT (tenant, key) DO UPDATE SET status = 'done', result = %(r)s, finished_at = %(n)s "
                "WHERE ledger.status <> 'done'",
                {"t": tenant, "k": key, "r": _text(result), "n": now},
            )
            row = conn.execute(self._LEDGER, (tenant, key)).fetchone()
            assert row is not None
            return LedgerRow(*row)

        return self._run(finish)

    def ledger_forget(self, tenant: str, key: str) -> None:
        self._run(lambda c: c.execute("DELETE FROM ledger WHERE tenant = %s AND key = %s", (tenant, key)))

    # -- leases ---------------------------------------------------------------------
    def acquire_lease(
        self, tenant: str, task_id: str, owner: str, ttl: float, now: float, *, steal_from: str | None = None
    ) -> int | None:
        internal = self._fresh_id(tenant, task_id)
        row = self._run(
            lambda c: c.execute(
                "UPDATE tasks SET lease_owner = %s, lease_expires = %s, lease_token = lease_token + 1 "
                "WHERE id = %s AND (lease_owner IS NULL OR lease_expires <= %s OR lease_owner = %s) "
                "RETURNING lease_token",
                (owner, now + ttl, internal, now, steal_from),
            ).fetchone()
        )
        return None if row is None else int(row[0])

    def claim(self, tenant: str, owner: str, ttl: float, now: float) -> tuple[str, int] | None:
        row = self._run(
            lambda c: c.execute(_CLAIM, {"owner": owner, "expires": now + ttl, "tenant": tenant, "now": now}).fetchone()
        )
        return None if row is None else (row[0], int(row[1]))

    def renew_lease(self, tenant: str, task_id: str, token: int, ttl: float, now: float) -> bool:
        internal = self._fresh_id(tenant, task_id)
        cur = self._run(
            lambda c: c.execute(
                "UPDATE tasks SET lease_expires = %s WHERE id = %s AND lease_token = %s AND lease_owner IS NOT NULL",
                (now + ttl, internal, token),
            )
        )
        return cur.rowcount == 1

    def release_lease(self, tenant: str, task_id: str, token: int) -> None:
        internal = self._fresh_id(tenant, task_id)
        self._run(
            lambda c: c.execute(
                "UPDATE tasks SET lease_owner = NULL, lease_expires = NULL WHERE id = %s AND lease_token = %s",
                (internal, token),
            )
        )

    # -- wake-ups ---------------------------------------------------------------------
    def wait_for_change(self, timeout: float, *, interrupt: threading.Event | None = None) -> bool:
        if self._listener is None:
            self._start_listener()
        return self._changes.wait(timeout, interrupt)

    def _start_listener(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                return
            self._listener = threading.Thread(target=self._listen, name=f"tether-listen-{self.schema}", daemon=True)
            self._listener.start()

    def _listen(self) -> None:
        """LISTEN on this schema's channel; every notification wakes the waiting workers."""
        channel = sql.Identifier(f"tether_{self.schema}")
        while not self._closed:
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(channel))
                    self._bump()  # anything committed while we were not listening: look again
                    while not self._closed:
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self._bump()
            except psycopg.OperationalError:
                if not self._closed:
                    log.warning("PostgreSQL listener lost its connection; reconnecting")
                    time.sleep(0.2)

    def _bump(self) -> None:
        self._changes.bump()

    def close(self) -> None:
        self._closed = True
        self._watchdog.stop()
        self._local.__dict__.pop("sticky", None)
        self._pool.close()

    def drop_schema(self) -> None:
        """Remove tether's schema and everything in it (tests use this to clean up)."""
        with psycopg.connect(self._conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))


class _StaleIdError(Exception):
    """A cached row id that names another stream (or none) now; the append looks the id up again."""


class _Sticky:
    """A pooled connection lent to one thread; returned to the pool when the thread lets go of it."""

    __slots__ = ("conn", "cursor", "pool")

    def __init__(self, pool: ConnectionPool, conn: psycopg.Connection[Any]) -> None:
        self.pool = pool
        self.conn = conn
        self.cursor = conn.cursor()  # reused: one fewer object per append

    def __del__(self) -> None:
        try:
            self.cursor.close()
            self.pool.putconn(self.conn)
        except Exception:  # the pool is closed already: the connection goes with it
            pass


def _close_pool(pool: ConnectionPool) -> None:
    try:
        pool.close(timeout=1.0)
    except Exception:  # at interpreter exit or in a worker thread: nothing more to do
        pass


def _text(data: str | bytes) -> str:
    return data.decode() if isinstance(data, bytes) else data
