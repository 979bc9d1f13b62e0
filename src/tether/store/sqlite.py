"""``sqlite:///path.db`` — the embedded default: one machine, many processes.

Its schema (:data:`MIGRATIONS`) lives in ``_sqlite_schema.py``, its connection policy, checkpoints and
wake-ups in ``_sqlite_wal.py``, its own statements (``own``) in ``_sqlite_sql.py``, the SQL it shares with
PostgreSQL in ``_sql.py``. This module is the store: the write gate every writer queues on, and the reads
and writes those statements make."""

from __future__ import annotations

import fcntl
import mmap
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tether.errors import ConfigurationError, ConflictError, TaskNotFoundError
from tether.store import _sql
from tether.store import _sqlite_sql as own
from tether.store._sql import text
from tether.store._sqlite_files import connect_readonly, create_private, file_mode, rollback, translate_errors
from tether.store._sqlite_schema import MIGRATIONS, SCHEMA_VERSION, check_schema, migrate
from tether.store._sqlite_wal import Checkpointer, Durability, connect, wait_for_commit
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
    read_across_forks,
    refusal,
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteStore"]

# The lock file starts with two unsigned 8-byte counters in the machine's byte order, read and bumped through
# a memoryview (a struct call costs five times as much): [0] the write generation; [1] the mapping generation,
# bumped by every change of which row a task id names (a rewind renames a stream and forks in its place; a
# delete frees the id): cached ids of an older one are dropped before use.
_LOCK_SIZE = 16
_flock, _LOCK_EX, _LOCK_UN = fcntl.flock, fcntl.LOCK_EX, fcntl.LOCK_UN  # bound once: every append gates twice


@translate_errors  # no sqlite3 error crosses the store boundary
class SQLiteStore(Closing):
    """The SQLite backend.

    Args:
        path: the database file; created with tether's schema when missing.
        durability: ``"normal"`` (default) or ``"full"``, SQLite's ``synchronous``.
        busy_timeout: seconds to wait for another process's write lock.

    Example:
        >>> import tempfile, os
        >>> from tether.store import open_store
        >>> store = open_store("sqlite:///" + os.path.join(tempfile.mkdtemp(), "t.db"))
        >>> store.list_tasks("default", TaskFilter())
        []
    """

    def __init__(
        self,
        path: str,
        *,
        durability: Durability = "normal",
        busy_timeout: float = 30.0,
        mode: int | str = 0o600,
        readonly: bool = False,
    ) -> None:
        if durability not in ("normal", "full"):
            raise ConfigurationError(f"durability must be 'normal' or 'full', got {durability!r}")
        self.mode = file_mode(mode)
        self.path = path
        self.url = f"sqlite:///{path}"
        folder = os.path.dirname(os.path.abspath(path))
        if path != ":memory:" and not os.path.isdir(folder):
            raise ConfigurationError(
                f"cannot create the SQLite database {path!r}: its directory {folder!r} does not exist"
            )
        self.durability = durability
        self._lock = threading.RLock()
        self._gate: int | None = None
        self.readonly = readonly
        try:
            if readonly:
                # For reading only: change nothing, not the journal mode, not the schema.
                self._conn = connect_readonly(path, busy_timeout)
                check_schema(self._conn, path)
            else:
                if path != ":memory:":
                    create_private(path, self.mode)  # before SQLite does: -wal and -shm copy this file's mode
                self._conn = connect(path, durability, busy_timeout)
                migrate(self._conn, path)
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(
                f"{path!r} is not a tether database (SQLite says: {exc}); "
                "point tether at a new file or at a database tether created"
            ) from exc
        self._ids: dict[tuple[str, str], int] = {}  # not read when read-only: no generation tells of renames
        self._renamed = False
        self._mapped: mmap.mmap | None = None
        self._generations: memoryview | None = None  # the counters of ``_mapped``
        self._checkpointer: Checkpointer | None = None  # none at "full": SQLite's own, inline (see Checkpointer)
        # One lock file per database, beside it: every tether writer queues on it (see _gate_in).
        if path != ":memory:" and not readonly:
            self._gate = create_private(path + "-lock", self.mode, keep=True)
            if os.fstat(self._gate).st_size < _LOCK_SIZE:
                os.ftruncate(self._gate, _LOCK_SIZE)  # idempotent: every opener sizes it alike
            # Shared memory over the file's first bytes: the write generation is read and bumped without a
            # system call (a store is always used under the file's flock).
            self._mapped = mmap.mmap(self._gate, _LOCK_SIZE)
            self._generations = memoryview(self._mapped).cast("Q")
            self._checkpointer = Checkpointer(path, durability, busy_timeout) if durability == "normal" else None
        self._append_cursor = self._conn.cursor()  # reused: one fewer allocation per append
        # What this connection knows for sure while it is the only writer (see _gate_in and append).
        self._generation = -1
        self._mapping = self._mapping_now()
        self._known: dict[int, int] = {}  # stream → the version we last wrote
        self._tokens: dict[int, int] = {}  # stream → the lease token our last write was fenced with

    def _refuse_write(self) -> None:
        if self.readonly:
            raise ConfigurationError(f"{self.path!r} was opened read-only; open it without readonly to write")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._refuse_write()
        with self._lock:
            conn = self._conn
            self._gate_in()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    rollback(conn)
                    raise
            finally:
                self._gate_out()

    def _gate_in(self) -> bool:
        """Queue for the write lock in the kernel, not in SQLite's busy handler; return whether this
        connection was the last to write (so what it knows of versions and tokens still holds).

        SQLite's busy handler sleeps and retries (1, 2, 5 ... 100 ms): under contention a writer can
        lose every race for seconds while others commit. Waiting on ``flock`` wakes a writer the moment
        the lock is free: no writer starves, the longest wait stays near (writers × one transaction).
        Readers never take it (WAL). The lock file also holds a write generation, bumped by every
        writer *before* it writes (a writer killed mid-write has bumped it already). Finding our own
        last number there means no other writer has touched the database since we last did."""
        generations = self._generations
        if generations is None:
            return False
        _flock(self._gate, _LOCK_EX)  # type: ignore[arg-type]
        current: int = generations[0]
        alone = current == self._generation
        generations[0] = self._generation = current + 1
        if not alone:
            self._known.clear()
            self._tokens.clear()
            self._check_mapping()
        return alone

    def _mapping_now(self) -> int:
        return 0 if self._generations is None else int(self._generations[1])

    def _check_mapping(self) -> None:
        """Drop cached ids if any process renamed or deleted a stream since we cached them."""
        current = self._mapping_now()
        if current != self._mapping:
            self._ids.clear()
            self._known.clear()
            self._tokens.clear()
            self._mapping = current

    def _bump_mapping(self) -> None:
        """In a write: tell every process, once it commits, that ids may now name other rows (told before,
        a reader could read the old ids again and keep them under the new generation, for good)."""
        self._renamed = self._generations is not None

    def _gate_out(self) -> None:
        if self._gate is not None:
            if self._renamed:  # committed or rolled back: a bump for nothing only drops caches
                self._renamed, self._mapping = False, self._mapping_now() + 1
                self._generations[1] = self._mapping  # type: ignore[index]
            _flock(self._gate, _LOCK_UN)
            if self._checkpointer is not None:
                self._checkpointer.committed()

    def _id(self, tenant: str, task_id: str) -> int:
        key = (tenant, task_id)
        if self._generations is not None:
            self._check_mapping()
        found = None if self.readonly else self._ids.get(key)
        if found is None:
            row = self._conn.execute(own.SQL.task_id, key).fetchone()
            if row is None:
                raise TaskNotFoundError(task_id, tenant=tenant)
            found = _sql.keep_id(self._ids, key, row[0], self._known, self._tokens)
        return found

    def _version_of(self, internal: int) -> int:
        row = self._conn.execute(own.SQL.version_of, (internal, internal)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def create_task(self, tenant: str, row: TaskRow, first: EventRow) -> None:
        with self._write() as conn:
            parent = self._id(tenant, row.parent_id) if row.parent_id is not None else None
            try:
                cur = conn.execute(
                    own.SQL.insert_task, _sql.task_values(tenant, row, parent, wake_at=row.wake_at, first=first)
                )
            except sqlite3.IntegrityError:
                raise ConflictError(row.task_id, expected=0, actual=None) from None
            internal = cur.lastrowid
            assert internal is not None
            conn.execute(
                own.INSERT_NEXT, (internal, first.seq, first.type, first.schema, first.at, text(first.data), None)
            )
            _sql.keep_id(self._ids, (tenant, row.task_id), internal, self._known, self._tokens)

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
        one = index is None and len(events) == 1
        self._refuse_write()
        self._lock.acquire()  # (not ``with``: a call's two appends take it; two plain calls skip the context protocol)
        try:
            if one:
                self._append_one(tenant, task_id, events[0], expected_version, fence)
                return
            if index is None:
                if len(events) <= own.ROWS_PER_STATEMENT and self._append_known(
                    tenant, task_id, events, expected_version, fence
                ):
                    return
            # Several events, or an index change: the guarded first insert and the rest in one transaction.
            self.append_streams(tenant, [StreamAppend(task_id, events, expected_version, fence, index)])
        finally:
            self._lock.release()

    def _append_one(self, tenant: str, task_id: str, event: EventRow, expected_version: int, fence: int | None) -> None:
        """The common case: one guarded INSERT in autocommit mode, one statement. A single write
        statement takes the write lock at its start, so the busy handler applies."""
        seq, type_, schema, at, data, _ = event
        if type(data) is not str:
            data = text(data)
        cursor = self._append_cursor
        alone = self._gate_in()
        try:
            # Looked up under the gate: a rewind or delete elsewhere has dropped a stale id.
            internal = self._ids.get((tenant, task_id)) or self._id(tenant, task_id)
            if (
                alone
                and self._known.get(internal) == expected_version
                and (fence is None or self._tokens.get(internal) == fence)
            ):
                # No other writer since we wrote this stream at this version under this token: the guard's
                # two reads would only confirm what we know. The primary key still refuses a duplicate.
                sql = own.INSERT_NEXT
            else:
                sql = own.INSERT_FIRST if fence is None else own.INSERT_FIRST_FENCED
            cursor.execute(sql, (internal, seq, type_, schema, at, data, fence))
            inserted = cursor.rowcount
        except sqlite3.IntegrityError:
            inserted = 0
        finally:
            self._gate_out()
        if inserted != 1:
            self._forget_known(internal)
            self._refuse(tenant, task_id, internal, expected_version, fence)
        self._known[internal] = seq
        if fence is not None:
            self._tokens[internal] = fence

    def _append_known(
        self, tenant: str, task_id: str, events: Sequence[EventRow], expected_version: int, fence: int | None
    ) -> bool:
        """Several events (parallel calls' results written together) to a stream this connection last
        wrote at ``expected_version`` under ``fence``, no other writer since: one multi-row INSERT in
        autocommit mode (a statement is atomic; the primary key refuses a duplicate). ``False``, with
        nothing written, when that is not known: the guarded transaction does it."""
        alone = self._gate_in()
        try:
            internal = self._ids.get((tenant, task_id))
            if not (
                alone
                and internal is not None
                and self._known.get(internal) == expected_version
                and (fence is None or self._tokens.get(internal) == fence)
            ):
                return False
            params: list[object] = []
            for e in events:
                data = e.data if type(e.data) is str else text(e.data)
                params += (internal, e.seq, e.type, e.schema, e.at, data, fence)
            try:
                self._append_cursor.execute(own.insert_rows(len(events)), params)
                inserted = True
            except sqlite3.IntegrityError:
                inserted = False
        finally:
            self._gate_out()
        if not inserted:
            self._forget_known(internal)
            self._refuse(tenant, task_id, internal, expected_version, fence)
        self._known[internal] = events[-1].seq
        return True

    def append_streams(self, tenant: str, appends: Sequence[StreamAppend]) -> None:
        check_streams(appends)
        written: list[tuple[int, int]] = []  # (stream, its new version), remembered once committed
        try:
            with self._write():
                for part in appends:
                    internal = self._id(tenant, part.task_id)
                    written.append((internal, part.events[-1].seq))
                    self._insert_guarded(
                        tenant, part.task_id, internal, part.events, part.expected_version, part.fence, part.index
                    )
        except BaseException:
            for internal, _ in written:
                self._forget_known(internal)
            raise
        for internal, version in written:
            self._known[internal] = version

    def _insert_guarded(
        self,
        tenant: str,
        task_id: str,
        internal: int,
        events: Sequence[EventRow],
        expected_version: int,
        fence: int | None,
        index: IndexUpdate | None,
    ) -> None:
        """Inside an open transaction: the guarded insert of the first event (its predecessor there, the
        fence current), the rest after it, the index change. Refused (the caller rolls back) if it fails."""
        conn = self._conn
        first = events[0]
        params = (internal, first.seq, first.type, first.schema, first.at, text(first.data), fence)
        try:
            inserted = conn.execute(own.INSERT_FIRST if fence is None else own.INSERT_FIRST_FENCED, params).rowcount
        except sqlite3.IntegrityError:
            inserted = 0
        if inserted != 1:
            self._refuse(tenant, task_id, internal, expected_version, fence)
        if len(events) > 1:
            conn.executemany(
                own.INSERT_NEXT,
                [(internal, e.seq, e.type, e.schema, e.at, text(e.data), fence) for e in events[1:]],
            )
        if index is not None:
            # After the inserts: the row brought up to them, then what the index change says.
            conn.execute(own.SQL.settle_row, _sql.settle_values(internal, events[-1]))
            if index.moves:
                conn.execute(own.SQL.move_task, (index.status, index.wake_at, internal))
            if index.head is not None:
                head = index.head
                conn.execute(own.SQL.write_head, (head.calls_done, head.summary, head.output, internal))
            if index.session_id is not None:
                conn.execute(own.SQL.name_session, (index.session_id, internal))

    def compact(self, tenant: str, task_id: str, expected_version: int, events: Sequence[EventRow]) -> int:
        check_batch(task_id, events, expected_version)
        with self._write() as conn:
            internal = self._id(tenant, task_id)
            actual = self._version_of(internal)
            if actual != expected_version:
                raise ConflictError(task_id, expected=expected_version, actual=actual)
            gone = self._drop_history(task_id, internal)
            conn.execute(own.SQL.unfork, (internal,))
            rows = [(internal, e.seq, e.type, e.schema, e.at, text(e.data), None) for e in events]
            conn.executemany(own.INSERT_NEXT, rows)
            conn.execute(own.SQL.settle_row, _sql.settle_values(internal, events[-1]))
        return int(gone)

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
        with self._write() as conn:
            internal = self._id(tenant, task_id)
            actual = self._version_of(internal)
            if actual != expected_version:
                raise ConflictError(task_id, expected=expected_version, actual=actual)
            if conn.execute(own.SQL.task_taken, (tenant, archive_id)).fetchone() is not None:
                raise ConflictError(archive_id, expected=0, actual=None)
            self._forget_known(internal)
            self._bump_mapping()
            conn.execute(own.SQL.rename_task, (archive_id, internal))
            conn.execute(
                own.INSERT_NEXT,
                (internal, archived.seq, archived.type, archived.schema, archived.at, text(archived.data), None),
            )
            cur = conn.execute(
                own.SQL.insert_task, _sql.task_values(tenant, fork, internal, wake_at=None, first=forked)
            )
            new = cur.lastrowid
            conn.execute(
                own.INSERT_NEXT, (new, forked.seq, forked.type, forked.schema, forked.at, text(forked.data), None)
            )
        _sql.keep_id(self._ids, (tenant, archive_id), internal, self._known, self._tokens)
        _sql.keep_id(self._ids, (tenant, task_id), new, self._known, self._tokens)  # type: ignore[arg-type]

    def _drop_history(self, task_id: str, internal: int) -> int:
        """Inside a write: delete a stream's events and snapshots (refused while forks read them);
        return how many events went."""
        conn = self._conn
        if conn.execute(own.SQL.child_of, (internal,)).fetchone() is not None:
            raise ConflictError(task_id, expected=0, actual=None)
        self._forget_known(internal)
        gone = conn.execute(own.SQL.delete_events, (internal,)).rowcount
        conn.execute(own.SQL.delete_snapshots, (internal,))
        return int(gone)

    def _forget_known(self, internal: int) -> None:
        self._known.pop(internal, None)
        self._tokens.pop(internal, None)

    def _refuse(self, tenant: str, task_id: str, internal: int, expected: int, fence: int | None) -> None:
        """Say why a guarded insert wrote nothing: stale fence, missing task or wrong version."""
        row = self._conn.execute("SELECT lease_token FROM tasks WHERE id = ?", (internal,)).fetchone()
        if row is None:
            self._ids.pop((tenant, task_id), None)
        token = None if row is None else int(row[0])
        raise refusal(task_id, tenant, token, fence, expected, lambda: self._version_of(internal))

    def read_events(self, tenant: str, task_id: str, *, after: int = 0, upto: int | None = None) -> list[EventRow]:
        conn = self._conn

        def parent_of(task: int) -> tuple[int, int] | None:
            found = conn.execute(own.SQL.parent_of, (task,)).fetchone()
            if found is None:  # deleted under us: say so, as any read of a missing task does
                self._ids.pop((tenant, task_id), None)
                raise TaskNotFoundError(task_id, tenant=tenant)
            parent, parent_seq = found
            return None if parent is None or parent_seq is None else (parent, parent_seq)

        row = tuple.__new__  # not EventRow(*r): its Python-level __new__ would be a Python call per row read

        def segment(task: int, low: int, last: int | None) -> list[EventRow]:
            # Two statements, not "(? IS NULL OR seq <= ?)": that would keep SQLite from bounding the index
            # range, and reading the start of a long stream would scan to its end.
            if last is None:
                cursor = conn.execute(own.READ_FROM, (task, low))
            else:
                cursor = conn.execute(own.READ_RANGE, (task, low, last))
            return [row(EventRow, r) for r in cursor]  # the SELECT's columns are EventRow's, in order

        with self._lock:
            return read_across_forks(self._id(tenant, task_id), after, upto, parent_of, segment)

    def get_task(self, tenant: str, task_id: str) -> TaskRow | None:
        with self._lock:
            row = self._conn.execute(own.SQL.select_task, (tenant, task_id)).fetchone()
            return None if row is None else TaskRow(*row)

    def delete_task(self, tenant: str, task_id: str) -> int:
        with self._write() as conn:
            internal = self._id(tenant, task_id)
            gone = self._drop_history(task_id, internal)
            self._bump_mapping()
            conn.execute(own.SQL.delete_task, (internal,))
        self._ids.pop((tenant, task_id), None)
        return int(gone)

    def list_tasks(self, tenant: str, flt: TaskFilter, *, limit: int = 100, offset: int = 0) -> list[TaskRow]:
        return [TaskRow(*r) for r in self._read(*_sql.list_tasks_query(tenant, flt, limit=limit, offset=offset))]

    def count_tasks(self, tenant: str, flt: TaskFilter, *, cap: int) -> int:
        return int(self._read(*_sql.count_tasks_query(tenant, flt, cap=cap))[0][0])

    def stream_positions(self, tenant: str, type: str, prefix: str, *, user_id: str | None = None) -> list[Position]:
        return [Position(*r) for r in self._read(*_sql.positions_query(tenant, type, prefix, user_id))]

    def _read(self, query: str, params: Sequence[Any]) -> list[Any]:
        with self._lock:
            return self._conn.execute(query, params).fetchall()

    def put_snapshot(self, tenant: str, task_id: str, snapshot: SnapshotRow, *, replaces: int | None = None) -> None:
        with self._write() as conn:
            internal = self._id(tenant, task_id)
            # Bytes are stored as a BLOB in the TEXT column (SQLite keeps a value's own type) and read
            # back as bytes; text as text.
            conn.execute(
                "INSERT OR REPLACE INTO snapshots (task, seq, schema, checksum, data) VALUES (?, ?, ?, ?, ?)",
                (internal, snapshot.seq, snapshot.schema, snapshot.checksum, snapshot.data),
            )
            if replaces is not None and replaces != snapshot.seq:
                conn.execute(own.SQL.delete_snapshot, (internal, replaces))

    def get_snapshot(self, tenant: str, task_id: str, *, at_most: int) -> SnapshotRow | None:
        with self._lock:
            row = self._conn.execute(own.SQL.latest_snapshot, (self._id(tenant, task_id), at_most)).fetchone()
            return None if row is None else SnapshotRow(*row)

    def read_latest(self, tenant: str, task_id: str) -> tuple[SnapshotRow | None, list[EventRow]]:
        with self._lock:  # one snapshot and the events after it, as of one moment
            snap = self.get_snapshot(tenant, task_id, at_most=2**62)
            return snap, self.read_events(tenant, task_id, after=snap.seq if snap else 0)

    def ledger_get(self, tenant: str, key: str) -> LedgerRow | None:
        with self._lock:
            row = self._conn.execute(own.SQL.ledger, (tenant, key)).fetchone()
            return None if row is None else LedgerRow(*row)

    def ledger_begin(self, tenant: str, key: str, now: float) -> LedgerRow:
        with self._write() as conn:
            row = conn.execute(own.SQL.ledger, (tenant, key)).fetchone()
            if row is None:
                conn.execute(own.SQL.ledger_begin, (tenant, key, now))
                return LedgerRow(key, "new", None, now, None, 0)
            if row[1] == "started":
                conn.execute(own.SQL.ledger_run_again, (tenant, key))
            return LedgerRow(*row)

    def ledger_finish(self, tenant: str, key: str, result: str | bytes, now: float) -> LedgerRow:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO ledger (tenant, key, status, result, started_at, finished_at, runs) "
                "VALUES (?1, ?2, 'done', ?3, ?4, ?4, 1) "
                "ON CONFLICT (tenant, key) DO UPDATE SET status = 'done', result = ?3, finished_at = ?4 "
                "WHERE status != 'done'",
                (tenant, key, text(result), now),
            )
            return LedgerRow(*conn.execute(own.SQL.ledger, (tenant, key)).fetchone())

    def ledger_forget(self, tenant: str, key: str) -> None:
        with self._write() as conn:
            conn.execute(own.SQL.forget_ledger, (tenant, key))

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
        with self._write() as conn:
            values = (owner, now + ttl, self._id(tenant, task_id), now, steal_from, at_version, at_version)
            row = conn.execute(own.SQL.acquire_lease, values).fetchone()
            self._tokens.pop(self._id(tenant, task_id), None)
            return None if row is None else int(row[0])

    def claim(self, tenant: str, owner: str, ttl: float, now: float) -> tuple[str, int] | None:
        with self._write() as conn:
            row = conn.execute(own.SQL.claim, _sql.claim_values(tenant, owner, ttl, now)).fetchone()
            self._tokens.clear()  # a lease moved: the next fenced append checks its token
            return None if row is None else (row[0], int(row[1]))

    def lease_holders(self, tenant: str, prefix: str, now: float) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self._read(*_sql.lease_holders_query(tenant, prefix, now))]

    def record_worker(self, tenant: str, worker: WorkerRow) -> None:
        with self._write() as conn:
            conn.execute(own.SQL.record_worker, _sql.worker_values(tenant, worker))
            conn.execute(own.SQL.forget_workers, (tenant, worker.seen_at - WORKERS_KEPT))

    def workers(self, tenant: str, *, seen_after: float = 0.0, limit: int = 20) -> list[WorkerRow]:
        return [_sql.worker_row(r) for r in self._read(own.SQL.workers, (tenant, seen_after, limit))]

    def park(self, tenant: str, task_id: str, version: int, reason: str) -> bool:
        with self._write() as conn:
            return conn.execute(own.SQL.park, (reason, tenant, task_id, version)).rowcount == 1

    def renew_lease(self, tenant: str, task_id: str, token: int, ttl: float, now: float) -> bool:
        with self._write() as conn:
            return conn.execute(own.SQL.renew_lease, (now + ttl, self._id(tenant, task_id), token)).rowcount == 1

    def release_lease(self, tenant: str, task_id: str, token: int) -> None:
        with self._write() as conn:
            conn.execute(own.SQL.release_lease, (self._id(tenant, task_id), token))
            self._tokens.pop(self._id(tenant, task_id), None)

    def wait_for_change(
        self, timeout: float, *, interrupt: threading.Event | None = None, claimable: bool = False
    ) -> bool:
        return wait_for_commit(self._conn, self._lock, timeout, interrupt)

    def close(self) -> None:
        with self._lock:
            if self._checkpointer is not None:
                self._checkpointer.stop()
            self._conn.close()  # the last connection to close checkpoints and removes the WAL
            if self._generations is not None and self._mapped is not None:
                self._generations.release()  # the map cannot close while a view of it is held
                self._mapped.close()
                self._generations = self._mapped = None
            if self._gate is not None:
                os.close(self._gate)
                self._gate = None
