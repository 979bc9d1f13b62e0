"""``postgresql://`` — many workers on many machines.

psycopg 3 with a ``psycopg_pool`` pool. tether creates and migrates its own
schema (``?schema=`` in the URL, default ``tether``), under an advisory lock so
that many processes may start at once. Event payloads are JSONB. The common
append is one statement, one round trip: the version check and the fencing
token are conditions of the insert itself. Workers claim with ``FOR UPDATE SKIP
LOCKED`` and wake on ``LISTEN/NOTIFY``.

Its schema lives in ``_postgres_schema.py``, its statements in ``_postgres_sql.py`` (with the ones
it shares with SQLite from ``_sql.py``), its connection policy in ``_postgres_io.py``.
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

from tether.checks import option_float, option_int
from tether.errors import ConfigurationError, ConflictError, StoreUnavailableError, TaskNotFoundError
from tether.store import _postgres_sql as own
from tether.store import _sql
from tether.store._postgres_io import (
    CONNECT_TIMEOUT,
    GIVE_UP_AFTER,
    QUERY_TIMEOUT,
    TCP_OPTIONS,
    Listener,
    Sticky,
    Watchdog,
    check_schema_name,
    close_pool,
    from_jsonb,
    is_connection_fault,
    refused,
    split_url,
    to_jsonb,
    with_default_params,
)
from tether.store._postgres_schema import MIGRATIONS, SCHEMA_VERSION, check_schema, migrate
from tether.store._postgres_sql import LATEST, SQL
from tether.store.base import (
    WORKERS_KEPT,
    Closing,
    EventRow,
    IndexUpdate,
    LedgerRow,
    Position,
    SnapshotRow,
    StreamAppend,
    TaskFilter,
    TaskRow,
    WorkerRow,
    check_batch,
    check_streams,
    redact_url,
    refusal,
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresStore"]

log = logging.getLogger("tether")
T = TypeVar("T")


class PostgresStore(Closing):
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
        self._prepare_schema(conninfo)
        self._pool = self._open_pool(conninfo, pool_min, pool_max)
        self._listener = Listener(self._conninfo, self.schema)  # started by the first wait_for_change
        # A store dropped without close() still closes its pool and stops its listener (whose thread
        # would otherwise hold a connection for the life of the process), quietly, when collected.
        weakref.finalize(self, close_pool, self._pool, self._listener)
        self._ids: dict[tuple[str, str], int] = {}
        self._local = threading.local()
        # Threads that keep a connection for their appends: at most all but two of the pool's, so that
        # reads, transactions and threads past that many (a worker at a high concurrency) still get one.
        self._sticky = threading.BoundedSemaphore(max(1, pool_max - 2))

    # -- connections --------------------------------------------------------------
    def _prepare_schema(self, conninfo: str) -> None:
        """Migrate the schema (or, read-only, check it) on a connection of its own, before the pool."""
        try:
            with psycopg.connect(conninfo, autocommit=True) as conn, self._watchdog.watch(conn, self.query_timeout):
                if self.readonly:
                    check_schema(conn, self.schema)
                else:
                    migrate(conn, self.schema)
        except psycopg.OperationalError as exc:
            raise ConfigurationError(f"cannot reach PostgreSQL at {redact_url(conninfo)}: {exc}") from exc
        except psycopg.Error as exc:  # e.g. no right to create the schema: said as a tether error
            raise refused(exc) from exc

    def _open_pool(self, conninfo: str, pool_min: int, pool_max: int) -> ConnectionPool:
        search_path = sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema))

        def configure(conn: psycopg.Connection[Any]) -> None:
            conn.execute(search_path)

        return ConnectionPool(
            conninfo,
            min_size=pool_min,
            max_size=pool_max,
            open=True,
            kwargs={"autocommit": True},
            configure=configure,
            name=f"tether-{self.schema}",
            timeout=self.connect_timeout,
            reconnect_timeout=max(self.give_up_after, 1.0),
            # Connections past pool_min that a burst opened (threads, a worker's concurrency) go back to the
            # server after 30 s idle, not psycopg_pool's 10 minutes: many processes share a server's slots.
            max_idle=30.0,
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

    def _appender(self, deadline: float) -> psycopg.Cursor[Any] | None:
        """This thread's cursor for appends, on a connection kept while the thread lives: the hot path
        skips the pool. The connection goes back to the pool when the thread ends (or when it breaks).
        ``None`` when as many threads keep one as the pool can spare: this append borrows one."""
        sticky: Sticky | None = getattr(self._local, "sticky", None)
        if sticky is None or sticky.conn.closed:
            self._local.__dict__.pop("sticky", None)
            if not self._sticky.acquire(blocking=False):
                return None
            try:
                conn = self._pool.getconn(timeout=self._wait_left(deadline))
            except BaseException:
                self._sticky.release()
                raise
            sticky = self._local.sticky = Sticky(self._pool, conn, self._sticky.release)
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
            row = self._run(lambda c: c.execute(SQL.task_id, key).fetchone())
            if row is None:
                raise TaskNotFoundError(task_id, tenant=tenant)
            found = _sql.keep_id(self._ids, key, int(row[0]))
        return found

    def _version_of(self, conn: psycopg.Connection[Any], internal: int) -> int:
        row = conn.execute(SQL.version_of, (internal, internal)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    # -- streams ------------------------------------------------------------------
    def create_task(self, tenant: str, row: TaskRow, first: EventRow) -> None:
        parent = self._fresh_id(tenant, row.parent_id) if row.parent_id is not None else None

        def create(conn: psycopg.Connection[Any]) -> int:
            # The row and its first event in one statement: one round trip, its own transaction.
            values = _sql.task_values(tenant, row, parent, wake_at=row.wake_at, first=first)
            event = (first.seq, first.type, first.schema, first.at, to_jsonb(first.data))
            try:
                found = conn.execute(own.CREATE, (*values, *event)).fetchone()
            except psycopg.errors.UniqueViolation:
                raise ConflictError(row.task_id, expected=0, actual=None) from None
            assert found is not None
            return int(found[0])

        _sql.keep_id(self._ids, (tenant, row.task_id), self._run(create))

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
        statement, params = own.append_statement(internal, tenant, task_id, events, fence, index)
        inserted = 0
        deadline = time.monotonic() + self.give_up_after
        attempt = 0
        while True:
            try:
                cursor = self._appender(deadline)
                if cursor is None:
                    with (
                        self._pool.connection(timeout=self._wait_left(deadline)) as conn,
                        self._watchdog.watch(conn, self.query_timeout),
                    ):
                        inserted = conn.execute(statement, params).fetchone()[0]  # type: ignore[index]
                    break
                with self._watchdog.watch(cursor.connection, self.query_timeout):
                    cursor.execute(statement, params)
                inserted = cursor.fetchone()[0]  # type: ignore[index]
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
                    if self._run(lambda c: own.landed(c, internal, events, fence)):
                        return
                    continue
                raise refused(exc) from exc
        if inserted != len(events):
            self._refuse(tenant, task_id, internal, expected_version, fence, stale=_StaleIdError if retry else None)

    def append_streams(self, tenant: str, appends: Sequence[StreamAppend]) -> None:
        check_streams(appends)
        try:
            self._append_streams(tenant, appends, [self._id(tenant, a.task_id) for a in appends], retry=True)
        except _StaleIdError:  # a cached row id names another stream now: once more with the store's ids
            fresh = [self._fresh_id(tenant, a.task_id) for a in appends]
            self._append_streams(tenant, appends, fresh, retry=False)

    def _append_streams(self, tenant: str, appends: Sequence[StreamAppend], ids: list[int], *, retry: bool) -> None:
        """Every part's guarded append in one transaction; a part whose guard fails fails it all and
        is refused as a single append is.

        The parts go as one statement (``_postgres_sql.APPEND_GROUP``): one round trip, its own
        transaction. A refusal that does not say which part it was (the primary key's) is written
        again one statement a part in row-id order, in a transaction, to name it."""
        tries = 0

        def write(conn: psycopg.Connection[Any], grouped: bool) -> None:
            nonlocal tries
            tries += 1
            # A try after a lost connection (``_run`` tries again only then): did the one before
            # commit before its connection broke?
            if tries > 1 and all(own.landed(conn, ids[i], a.events, a.fence) for i, a in enumerate(appends)):
                return
            if grouped:
                own.write_group(conn, own.group_statement(ids, tenant, appends))
                return
            own.write_parts(conn, ids, tenant, appends)

        try:
            try:
                self._run(lambda conn: write(conn, True))
            except own.AmbiguousRefusalError:
                tries = 0  # the first try was refused, not lost: nothing of it can have landed
                self._run(lambda conn: write(conn, False))
        except own.PartRefusedError as refused_part:
            i: int = refused_part.args[0]
            part = appends[i]
            stale = _StaleIdError if retry else None
            self._refuse(tenant, part.task_id, ids[i], part.expected_version, part.fence, stale=stale)

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

    def compact(self, tenant: str, task_id: str, expected_version: int, events: Sequence[EventRow]) -> int:
        check_batch(task_id, events, expected_version)
        internal = self._fresh_id(tenant, task_id)
        with self._tx() as conn:
            return own.replace_history(conn, task_id, internal, expected_version, events)

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
            if conn.execute(SQL.task_taken, (tenant, archive_id)).fetchone() is not None:
                raise ConflictError(archive_id, expected=0, actual=None)
            conn.execute(SQL.rename_task, (archive_id, internal))
            conn.execute(
                "INSERT INTO events (task, seq, type, schema, at, data) VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                (internal, archived.seq, archived.type, archived.schema, archived.at, to_jsonb(archived.data)),
            )
            conn.execute(SQL.settle_row, _sql.settle_values(internal, archived))
            values = _sql.task_values(tenant, fork, internal, wake_at=None, first=forked)
            new = conn.execute(SQL.insert_task + " RETURNING id", values).fetchone()
            assert new is not None
            conn.execute(
                "INSERT INTO events (task, seq, type, schema, at, data) VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                (new[0], forked.seq, forked.type, forked.schema, forked.at, to_jsonb(forked.data)),
            )
        _sql.keep_id(self._ids, (tenant, archive_id), internal)
        _sql.keep_id(self._ids, (tenant, task_id), int(new[0]))

    def read_events(self, tenant: str, task_id: str, *, after: int = 0, upto: int | None = None) -> list[EventRow]:
        rows = self._run(lambda conn: own.read_stream(conn, tenant, task_id, after, upto))
        if rows is None:
            raise TaskNotFoundError(task_id, tenant=tenant)
        return rows

    def get_task(self, tenant: str, task_id: str) -> TaskRow | None:
        row = self._run(lambda c: c.execute(SQL.select_task, (tenant, task_id)).fetchone())
        return None if row is None else TaskRow(*row)

    def delete_task(self, tenant: str, task_id: str) -> int:
        internal = self._fresh_id(tenant, task_id)
        with self._tx() as conn:
            gone = own.drop_history(conn, task_id, internal)
            conn.execute(SQL.delete_task, (internal,))
        self._ids.pop((tenant, task_id), None)
        return int(gone)

    def list_tasks(self, tenant: str, flt: TaskFilter, *, limit: int = 100, offset: int = 0) -> list[TaskRow]:
        query = _sql.list_tasks_query(tenant, flt, limit=limit, offset=offset, collate=_sql.ID_ORDER)
        return [TaskRow(*r) for r in self._read(*query)]

    def count_tasks(self, tenant: str, flt: TaskFilter, *, cap: int) -> int:
        return int(self._read(*_sql.count_tasks_query(tenant, flt, cap=cap, collate=_sql.ID_ORDER))[0][0])

    def stream_positions(self, tenant: str, type: str, prefix: str, *, user_id: str | None = None) -> list[Position]:
        query = _sql.positions_query(tenant, type, prefix, user_id, collate=_sql.ID_ORDER)
        return [Position(*r) for r in self._read(*query)]

    def _read(self, query: str, params: Sequence[Any]) -> list[Any]:
        """The rows of a shared statement (written with ``?``) and its parameters."""
        statement = _sql.pyformat(query)
        return self._run(lambda c: c.execute(statement, params).fetchall())

    # -- snapshots ----------------------------------------------------------------

    def put_snapshot(self, tenant: str, task_id: str, snapshot: SnapshotRow, *, replaces: int | None = None) -> None:
        internal = self._fresh_id(tenant, task_id)

        def put(c: psycopg.Connection[Any]) -> None:
            with c.transaction():
                c.execute(
                    "INSERT INTO snapshots (task, seq, schema, checksum, data, raw) VALUES (%s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (task, seq) DO UPDATE SET schema = excluded.schema, checksum = excluded.checksum, "
                    "data = excluded.data, raw = excluded.raw",
                    (internal, snapshot.seq, snapshot.schema, snapshot.checksum, *_snapshot_columns(snapshot.data)),
                )
                if replaces is not None and replaces != snapshot.seq:
                    c.execute(SQL.delete_snapshot, (internal, replaces))

        self._run(put)

    def get_snapshot(self, tenant: str, task_id: str, *, at_most: int) -> SnapshotRow | None:
        internal = self._fresh_id(tenant, task_id)
        row = self._run(lambda c: c.execute(SQL.latest_snapshot, (internal, min(at_most, 2**31 - 1))).fetchone())
        return None if row is None else _snapshot(*row)

    def read_latest(self, tenant: str, task_id: str) -> tuple[SnapshotRow | None, list[EventRow]]:
        rows = self._run(lambda c: c.execute(LATEST, (tenant, task_id)).fetchall())
        if not rows or rows[0][0] != 0:
            raise TaskNotFoundError(task_id, tenant=tenant)
        fork_point, is_fork = rows[0][1], rows[0][7]
        snap = next((_snapshot(r[1], r[2], r[3], r[4], r[8]) for r in rows if r[0] == 1), None)
        if is_fork and (snap is None or fork_point is None or snap.seq < fork_point):
            snap = self.get_snapshot(tenant, task_id, at_most=2**31 - 1)
            return snap, self.read_events(tenant, task_id, after=snap.seq if snap else 0)
        events = [EventRow(r[1], r[3], r[2], r[5], from_jsonb(r[4]), r[6]) for r in rows if r[0] == 2]
        return snap, events

    # -- idempotency ledger ---------------------------------------------------------
    def ledger_get(self, tenant: str, key: str) -> LedgerRow | None:
        row = self._run(lambda c: c.execute(SQL.ledger, (tenant, key)).fetchone())
        return None if row is None else LedgerRow(*row)

    def ledger_begin(self, tenant: str, key: str, now: float) -> LedgerRow:
        with self._tx() as conn:
            inserted = conn.execute(
                SQL.ledger_begin + " ON CONFLICT (tenant, key) DO NOTHING RETURNING key",
                (tenant, key, now),
            ).fetchone()
            if inserted is not None:
                return LedgerRow(key, "new", None, now, None, 0)
            row = conn.execute(SQL.ledger + " FOR UPDATE", (tenant, key)).fetchone()
            assert row is not None
            if row[1] == "started":
                conn.execute(SQL.ledger_run_again, (tenant, key))
            return LedgerRow(*row)

    def ledger_finish(self, tenant: str, key: str, result: str | bytes, now: float) -> LedgerRow:
        def finish(conn: psycopg.Connection[Any]) -> LedgerRow:
            conn.execute(
                "INSERT INTO ledger (tenant, key, status, result, started_at, finished_at, runs) "
                "VALUES (%(t)s, %(k)s, 'done', %(r)s, %(n)s, %(n)s, 1) "
                "ON CONFLICT (tenant, key) DO UPDATE SET status = 'done', result = %(r)s, finished_at = %(n)s "
                "WHERE ledger.status <> 'done'",
                {"t": tenant, "k": key, "r": _sql.text(result), "n": now},
            )
            row = conn.execute(SQL.ledger, (tenant, key)).fetchone()
            assert row is not None
            return LedgerRow(*row)

        return self._run(finish)

    def ledger_forget(self, tenant: str, key: str) -> None:
        self._run(lambda c: c.execute(SQL.forget_ledger, (tenant, key)))

    # -- leases ---------------------------------------------------------------------
    def acquire_lease(
        self,
        tenant: str,
        task_id: str,
        owner: str,
        ttl: float,
        now: float,
        *,
        steal_from: str | None = None,
        at_version: int | None = None,
    ) -> int | None:
        values = (owner, now + ttl, tenant, task_id, now, steal_from, at_version, at_version)
        row = self._run(lambda c: c.execute(SQL.acquire_lease, values).fetchone())
        if row is None:
            self._fresh_id(tenant, task_id)  # held by another, or no such task: TaskNotFoundError
            return None
        return int(row[0])

    def claim(self, tenant: str, owner: str, ttl: float, now: float) -> tuple[str, int] | None:
        values = _sql.claim_values(tenant, owner, ttl, now)
        row = self._run(lambda c: c.execute(SQL.claim, values).fetchone())
        return None if row is None else (row[0], int(row[1]))

    def lease_holders(self, tenant: str, prefix: str, now: float) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self._read(*_sql.lease_holders_query(tenant, prefix, now))]

    def record_worker(self, tenant: str, worker: WorkerRow) -> None:
        def record(c: psycopg.Connection[Any]) -> None:
            with c.transaction():
                c.execute(SQL.record_worker, _sql.worker_values(tenant, worker))
                c.execute(SQL.forget_workers, (tenant, worker.seen_at - WORKERS_KEPT))

        self._run(record)

    def workers(self, tenant: str, *, seen_after: float = 0.0, limit: int = 20) -> list[WorkerRow]:
        rows = self._run(lambda c: c.execute(SQL.workers, (tenant, seen_after, limit)).fetchall())
        return [_sql.worker_row(r) for r in rows]

    def park(self, tenant: str, task_id: str, version: int, reason: str) -> bool:
        cur = self._run(lambda c: c.execute(SQL.park, (reason, tenant, task_id, version)))
        return cur.rowcount == 1

    def renew_lease(self, tenant: str, task_id: str, token: int, ttl: float, now: float) -> bool:
        cur = self._run(lambda c: c.execute(SQL.renew_lease, (now + ttl, tenant, task_id, token)))
        if cur.rowcount != 1:
            self._fresh_id(tenant, task_id)  # lost, or no such task: TaskNotFoundError
            return False
        return True

    def release_lease(self, tenant: str, task_id: str, token: int) -> None:
        cur = self._run(lambda c: c.execute(SQL.release_lease, (tenant, task_id, token)))
        if cur.rowcount != 1:
            self._fresh_id(tenant, task_id)  # not held under that token, or no such task: TaskNotFoundError

    # -- wake-ups ---------------------------------------------------------------------
    def wait_for_change(
        self, timeout: float, *, interrupt: threading.Event | None = None, claimable: bool = False
    ) -> bool:
        return self._listener.wait(timeout, interrupt)

    def close(self) -> None:
        self._listener.close()
        self._watchdog.stop()
        self._local.__dict__.pop("sticky", None)
        self._pool.close()

    def drop_schema(self) -> None:
        """Remove tether's schema and everything in it (tests use this to clean up)."""
        with psycopg.connect(self._conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))


class _StaleIdError(Exception):
    """A cached row id that names another stream (or none) now; the append looks the id up again."""


def _snapshot_columns(data: str | bytes) -> tuple[str, bytes | None]:
    """A snapshot's data as its two columns: text in ``data``; bytes in ``raw``, ``data`` empty."""
    return ("", data) if isinstance(data, bytes) else (data, None)


def _snapshot(seq: int, schema: int, checksum: str, data: str, raw: bytes | None) -> SnapshotRow:
    """A snapshot row read back with its data in the type it was stored in."""
    return SnapshotRow(seq, schema, checksum, bytes(raw) if raw is not None else data)
