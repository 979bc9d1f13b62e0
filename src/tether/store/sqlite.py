"""``sqlite:///path.db`` — the embedded default: one machine, many processes.

The schema is created and migrated by tether itself (:data:`MIGRATIONS`, whose
index is the version, recorded in ``PRAGMA user_version``). A file that is not
a tether database, or one written by a newer tether, is refused with a message
saying so.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from tether.errors import (
    ConfigurationError,
    ConflictError,
    SchemaVersionError,
    TaskNotFoundError,
)
from tether.store._sqlite_files import connect_readonly, create_private, file_mode, rollback, translate_errors
from tether.store.base import (
    EventRow,
    IndexUpdate,
    LedgerRow,
    SnapshotRow,
    TaskFilter,
    TaskRow,
    check_batch,
    read_across_forks,
    refusal,
)

__all__ = ["MIGRATIONS", "SQLiteStore"]

log = logging.getLogger("tether")

Durability = Literal["normal", "full"]

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
]
SCHEMA_VERSION = len(MIGRATIONS)

# A stream's first event is written by create_task (a fork's too, at its fork point + 1), so the
# predecessor of an appended event is always in the stream's own rows.
_INSERT_FIRST = (
    "INSERT INTO events (task, seq, type, schema, at, data, fence) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 "
    "WHERE EXISTS (SELECT 1 FROM events WHERE task = ?1 AND seq = ?2 - 1)"
)
_INSERT_FIRST_FENCED = (
    "INSERT INTO events (task, seq, type, schema, at, data, fence) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 "
    "WHERE (SELECT lease_token FROM tasks WHERE id = ?1) = ?7 "
    "AND EXISTS (SELECT 1 FROM events WHERE task = ?1 AND seq = ?2 - 1)"
)
_GENERATION = struct.Struct("<Q")  # the write generation at the start of the lock file
# After it, the mapping generation: bumped by every change of which row a task id names (a rewind
# renames a stream and puts a fork in its place; a delete frees the id for a new stream). A process
# whose cached ids are from an older mapping generation drops them before it trusts one.
_MAPPING = struct.Struct("<Q")
_LOCK_SIZE = _GENERATION.size + _MAPPING.size
_CLAIM = """
UPDATE tasks SET lease_owner = :owner, lease_expires = :expires, lease_token = lease_token + 1
WHERE id = (
    SELECT id FROM tasks
    WHERE tenant = :tenant
      AND (lease_owner IS NULL OR lease_expires <= :now)
      AND (status IN ('pending', 'running')
           OR (status IN ('sleeping', 'awaiting_input') AND wake_at <= :now))
    ORDER BY COALESCE(wake_at, created_at)
    LIMIT 1
)
RETURNING task_id, lease_token
"""
_READ_FROM = "SELECT seq, type, schema, at, data, fence FROM events WHERE task = ? AND seq > ? ORDER BY seq"
_READ_RANGE = (
    "SELECT seq, type, schema, at, data, fence FROM events WHERE task = ? AND seq > ? AND seq <= ? ORDER BY seq"
)
_INSERT_NEXT = "INSERT INTO events (task, seq, type, schema, at, data, fence) VALUES (?, ?, ?, ?, ?, ?, ?)"
_TASK_COLUMNS = """
    t.task_id, t.tenant, t.type, t.status, t.user_id, t.session_id, t.created_at,
    COALESCE((SELECT at FROM events e WHERE e.task = t.id ORDER BY seq DESC LIMIT 1), t.created_at),
    COALESCE((SELECT max(seq) FROM events e WHERE e.task = t.id), t.parent_seq, 0),
    p.task_id, t.parent_seq, t.lease_owner, t.lease_expires, t.lease_token, t.wake_at
"""


def _connect(path: str, durability: Durability, busy_timeout: float) -> sqlite3.Connection:
    """Open a connection with tether's policy. Each line says why.

    * ``isolation_level=None``: we issue ``BEGIN IMMEDIATE`` ourselves. A deferred
      transaction that reads and then writes can fail with SQLITE_BUSY_SNAPSHOT
      without waiting when another process committed in between; taking the write
      lock up front makes the busy handler apply.
    * ``check_same_thread=False``: a worker's heartbeat thread shares the store; every
      use is serialised by the store's own lock.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout)
    # WAL: readers never block the writer and the writer never blocks readers, across processes.
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode.lower() != "wal" and path != ":memory:":
        conn.close()
        raise ConfigurationError(f"could not put {path!r} in WAL mode (got {mode!r}); is it on a network file system?")
    # NORMAL: a commit survives a process crash; only an OS crash or power loss can lose the last
    # commits. FULL: fsync on every commit, survives power loss, at ~10x the cost per commit.
    conn.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
    # Wait for the write lock instead of failing at once when another process holds it.
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
    if path != ":memory:":
        # Commits do not copy the WAL back into the database themselves: _Checkpointer does, on
        # its own thread and connection, so no append pays for a checkpoint. SQLite's own
        # checkpoint stays as a net, far above where ours runs: a process that writes too little
        # to poke its checkpointer still keeps the WAL bounded when others leave it growing.
        conn.execute(f"PRAGMA wal_autocheckpoint={_Checkpointer.NET_FRAMES}")
    return conn


class _Checkpointer:
    """Copies the WAL back into the database on a thread of its own, off every commit's path.

    With SQLite's automatic checkpoints, the commit that crosses 1,000 WAL pages copies them
    back (and fsyncs twice) before it returns: about a fifth of the cost of every commit,
    paid in lumps. Here the writer only counts its commits and pokes this thread, which runs
    ``wal_checkpoint(PASSIVE)`` on its own connection while writers go on writing (SQLite
    lets a checkpoint run beside a writer).

    A checkpoint that runs beside a busy writer never quite catches up, and the WAL restarts
    from its beginning only once it is wholly copied. So when the WAL has grown past
    :attr:`GATED_FRAMES`, the thread checkpoints once more holding the writers' lock file:
    with no writer in the way that pass copies the few frames left, and the next commit
    starts the WAL over. The WAL stays bounded however long writers write without a pause.

    Every connection keeps SQLite's automatic checkpoint at :attr:`NET_FRAMES`, well above
    where this thread acts: it only fires when nobody's checkpointer was poked in time (many
    processes that each write a little while the WAL grows).
    """

    EVERY = 1000  # commits between pokes: each writes a page or more, as SQLite's own threshold counts
    GATED_FRAMES = 2000  # about 8 MB of 4 KB pages: twice SQLite's automatic threshold
    NET_FRAMES = 10000  # SQLite's automatic checkpoint, as a net (about 40 MB)

    def __init__(self, path: str, durability: Durability, busy_timeout: float) -> None:
        self._path = path
        self._durability: Durability = durability
        self._busy_timeout = busy_timeout
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.passes = 0  # checkpoints run, for tests and curious users
        self.gated = 0

    def poke(self) -> None:
        thread = self._thread
        # None yet, one that died (it logged why), or we are a forked child that has none.
        if thread is None or self._pid != os.getpid() or not thread.is_alive():
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="tether-sqlite-checkpoint", daemon=True)
            self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        gate: int | None = None
        try:
            gate = os.open(self._path + "-lock", os.O_RDWR | os.O_CREAT, 0o600)
            conn = _connect(self._path, self._durability, self._busy_timeout)  # the store's own policy
        except (sqlite3.Error, OSError, ConfigurationError) as exc:  # the next poke starts a thread that tries again
            log.warning("checkpoints of %s cannot start: %s", self._path, exc)
            if gate is not None:
                os.close(gate)
            return
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.passes += 1
                    if frames >= self.GATED_FRAMES:
                        fcntl.flock(gate, fcntl.LOCK_EX)
                        try:
                            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                        finally:
                            fcntl.flock(gate, fcntl.LOCK_UN)
                        self.gated += 1
                except (sqlite3.Error, OSError) as exc:  # a checkpoint that fails is tried again at the next poke
                    log.warning("checkpoint of %s failed: %s", self._path, exc)
        finally:
            conn.close()
            os.close(gate)

    def stop(self) -> None:
        thread = self._thread
        if thread is not None and self._pid == os.getpid():
            self._stopping = True
            self._wake.set()
            thread.join()
        self._thread = None


@translate_errors  # no sqlite3 error about the file crosses the store boundary
class SQLiteStore:
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
                self._check_schema()
            else:
                if path != ":memory:":
                    create_private(path, self.mode)  # before SQLite does: -wal and -shm copy this file's mode
                self._conn = _connect(path, durability, busy_timeout)
                self._migrate()
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(
                f"{path!r} is not a tether database (SQLite says: {exc}); "
                "point tether at a new file or at a database tether created"
            ) from exc
        self._ids: dict[tuple[str, str], int] = {}
        self._generations: mmap.mmap | None = None
        self._checkpointer: _Checkpointer | None = None
        self._commits = 0
        # One lock file per database, beside it: every tether writer queues on it (see _gate_in).
        if path != ":memory:" and not readonly:
            self._gate = create_private(path + "-lock", self.mode, keep=True)
            if os.fstat(self._gate).st_size < _LOCK_SIZE:
                os.ftruncate(self._gate, _LOCK_SIZE)  # idempotent: every opener sizes it alike
            # Shared memory over the file's first bytes: the write generation is read and bumped
            # without a system call (a store is always used under the file's flock).
            self._generations = mmap.mmap(self._gate, _LOCK_SIZE)
            self._checkpointer = _Checkpointer(path, durability, busy_timeout)
        self._append_cursor = self._conn.cursor()  # reused: one fewer allocation per append
        # What this connection knows for sure while it is the only writer (see _gate_in and append).
        self._generation = -1
        self._mapping = self._mapping_now()
        self._known: dict[int, int] = {}  # stream → the version we last wrote
        self._tokens: dict[int, int] = {}  # stream → the lease token our last write was fenced with

    # -- schema -----------------------------------------------------------------
    def _check_schema(self) -> None:
        """For a read-only open: the file must already be a tether database of a version we read."""
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "tether_meta" not in tables or version == 0:
            what = f"it has tables {', '.join(sorted(tables))}" if tables else "it is empty"
            raise ConfigurationError(
                f"{self.path!r} is not a tether database ({what}); nothing to read, and nothing was changed"
            )
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path!r} has tether schema version {version}, but this tether knows "
                f"versions up to {SCHEMA_VERSION}; upgrade tether (pip install -U tether)",
                found=version,
                supported=SCHEMA_VERSION,
            )
        if version < SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path!r} has tether schema version {version} and needs migrating to {SCHEMA_VERSION}; "
                "open it once with a command that writes (or your app) to migrate it",
                found=version,
                supported=SCHEMA_VERSION,
            )

    def _refuse_write(self) -> None:
        if self.readonly:
            raise ConfigurationError(f"{self.path!r} was opened read-only; open it without readonly to write")

    def _migrate(self) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then see it done
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if version == 0 and tables - {"sqlite_sequence"}:
                raise ConfigurationError(
                    f"{self.path!r} is a SQLite database but not a tether database "
                    f"(it has tables {', '.join(sorted(tables))}); use another file"
                )
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{self.path!r} has tether schema version {version}, but this tether knows "
                    f"versions up to {SCHEMA_VERSION}; upgrade tether (pip install -U tether)",
                    found=version,
                    supported=SCHEMA_VERSION,
                )
            if version > 0 and "tether_meta" not in tables:
                raise ConfigurationError(f"{self.path!r} is not a tether database (no tether_meta table)")
            for index in range(version, SCHEMA_VERSION):
                for statement in _statements(MIGRATIONS[index]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {index + 1}")
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise

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
        """Queue for the write lock in the kernel, not in SQLite's busy handler; return whether
        this connection was the last to write (so what it knows of versions and tokens still holds).

        SQLite's busy handler sleeps and retries (1, 2, 5 ... 100 ms): under contention a
        writer can lose every race for seconds while others commit. Waiting on ``flock``
        instead wakes a writer the moment the lock is free, so no writer starves and the
        longest wait stays near (writers × one transaction). Readers never take it (WAL).

        The lock file also holds a write generation, bumped by every writer *before* it writes
        (a writer killed mid-write has bumped it already). Finding our own last number there
        means no other writer has touched the database since we last did.
        """
        generations = self._generations
        if generations is None:
            return False
        fcntl.flock(self._gate, fcntl.LOCK_EX)  # type: ignore[arg-type]
        current: int = _GENERATION.unpack_from(generations)[0]
        alone = current == self._generation
        self._generation = current + 1
        _GENERATION.pack_into(generations, 0, self._generation)
        if not alone:
            self._known.clear()
            self._tokens.clear()
            self._check_mapping()
        return alone

    def _mapping_now(self) -> int:
        return 0 if self._generations is None else int(_MAPPING.unpack_from(self._generations, _GENERATION.size)[0])

    def _check_mapping(self) -> None:
        """Drop cached ids if any process renamed or deleted a stream since we cached them."""
        current = self._mapping_now()
        if current != self._mapping:
            self._ids.clear()
            self._known.clear()
            self._tokens.clear()
            self._mapping = current

    def _bump_mapping(self) -> None:
        """Under the write gate: tell every process that ids may now name other rows."""
        if self._generations is not None:
            self._mapping = self._mapping_now() + 1
            _MAPPING.pack_into(self._generations, _GENERATION.size, self._mapping)

    def _gate_out(self) -> None:
        if self._gate is not None:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
            self._commits += 1
            if self._commits >= _Checkpointer.EVERY:
                self._commits = 0
                self._checkpointer.poke()  # type: ignore[union-attr]

    def _id(self, tenant: str, task_id: str) -> int:
        key = (tenant, task_id)
        if self._generations is not None:
            self._check_mapping()
        found = self._ids.get(key)
        if found is None:
            row = self._conn.execute("SELECT id FROM tasks WHERE tenant = ? AND task_id = ?", key).fetchone()
            if row is None:
                raise TaskNotFoundError(task_id, tenant=tenant)
            found = self._ids[key] = row[0]
        return found

    def _version_of(self, internal: int) -> int:
        row = self._conn.execute(
            "SELECT COALESCE((SELECT max(seq) FROM events WHERE task = ?1), "
            "(SELECT parent_seq FROM tasks WHERE id = ?1), 0)",
            (internal,),
        ).fetchone()
        return int(row[0])

    # -- streams ----------------------------------------------------------------
    def create_task(self, tenant: str, row: TaskRow, first: EventRow) -> None:
        with self._write() as conn:
            parent = self._id(tenant, row.parent_id) if row.parent_id is not None else None
            try:
                cur = conn.execute(
                    "INSERT INTO tasks (tenant, task_id, type, status, user_id, session_id, created_at, "
                    "parent, parent_seq, wake_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                )
            except sqlite3.IntegrityError:
                raise ConflictError(row.task_id, expected=0, actual=None) from None
            internal = cur.lastrowid
            assert internal is not None
            conn.execute(
                _INSERT_NEXT, (internal, first.seq, first.type, first.schema, first.at, _text(first.data), None)
            )
            self._ids[(tenant, row.task_id)] = internal

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
        first = events[0]
        self._refuse_write()
        key = (tenant, task_id)
        with self._lock:
            conn = self._conn
            data = first.data if type(first.data) is str else _text(first.data)
            sql = _INSERT_FIRST if fence is None else _INSERT_FIRST_FENCED
            if len(events) == 1 and index is None:
                # The common case: one guarded INSERT in autocommit mode, one statement. A single
                # write statement takes the write lock at its start, so the busy handler applies.
                cursor = self._append_cursor
                alone = self._gate_in()
                try:
                    # Looked up under the gate: a rewind or delete elsewhere has dropped a stale id.
                    internal = self._ids.get(key) or self._id(tenant, task_id)
                    params = (internal, first.seq, first.type, first.schema, first.at, data, fence)
                    if (
                        alone
                        and self._known.get(internal) == expected_version
                        and (fence is None or self._tokens.get(internal) == fence)
                    ):
                        # No other writer since we wrote this stream at this version under this
                        # token: the guard's two reads would only confirm what we know. The primary
                        # key still refuses a duplicate.
                        sql = _INSERT_NEXT
                    cursor.execute(sql, params)
                    inserted = cursor.rowcount
                except sqlite3.IntegrityError:
                    inserted = 0
                finally:
                    self._gate_out()
                if inserted != 1:
                    self._forget_known(internal)
                    self._refuse(tenant, task_id, internal, expected_version, fence)
                self._known[internal] = first.seq
                if fence is not None:
                    self._tokens[internal] = fence
                return
            self._gate_in()
            try:
                internal = self._id(tenant, task_id)
            except BaseException:
                self._gate_out()
                raise
            params = (internal, first.seq, first.type, first.schema, first.at, data, fence)
            conn.execute("BEGIN IMMEDIATE")
            try:
                try:
                    inserted = conn.execute(sql, params).rowcount
                except sqlite3.IntegrityError:
                    inserted = 0
                if inserted != 1:
                    self._refuse(tenant, task_id, internal, expected_version, fence)
                if len(events) > 1:
                    conn.executemany(
                        _INSERT_NEXT,
                        [(internal, e.seq, e.type, e.schema, e.at, _text(e.data), fence) for e in events[1:]],
                    )
                if index is not None:
                    conn.execute(
                        "UPDATE tasks SET status = COALESCE(?, status), wake_at = ? WHERE id = ?",
                        (index.status, index.wake_at, internal),
                    )
                conn.execute("COMMIT")
            except BaseException:
                rollback(conn)
                self._gate_out()
                self._forget_known(internal)
                raise
            self._gate_out()
            self._known[internal] = events[-1].seq

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
            taken = conn.execute("SELECT 1 FROM tasks WHERE tenant = ? AND task_id = ?", (tenant, archive_id))
            if taken.fetchone() is not None:
                raise ConflictError(archive_id, expected=0, actual=None)
            self._forget_known(internal)
            self._bump_mapping()
            conn.execute("UPDATE tasks SET task_id = ? WHERE id = ?", (archive_id, internal))
            conn.execute(
                _INSERT_NEXT,
                (internal, archived.seq, archived.type, archived.schema, archived.at, _text(archived.data), None),
            )
            cur = conn.execute(
                "INSERT INTO tasks (tenant, task_id, type, status, user_id, session_id, created_at, "
                "parent, parent_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            )
            new = cur.lastrowid
            conn.execute(
                _INSERT_NEXT, (new, forked.seq, forked.type, forked.schema, forked.at, _text(forked.data), None)
            )
        self._ids[(tenant, archive_id)] = internal
        self._ids[(tenant, task_id)] = new  # type: ignore[assignment]

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
            found = conn.execute("SELECT parent, parent_seq FROM tasks WHERE id = ?", (task,)).fetchone()
            if found is None:  # deleted under us: say so, as any read of a missing task does
                self._ids.pop((tenant, task_id), None)
                raise TaskNotFoundError(task_id, tenant=tenant)
            parent, parent_seq = found
            return None if parent is None or parent_seq is None else (parent, parent_seq)

        def segment(task: int, low: int, last: int | None) -> list[EventRow]:
            # Two statements, not "(? IS NULL OR seq <= ?)": that would keep SQLite from bounding the
            # index range, and reading the start of a long stream would scan to its end.
            if last is None:
                cursor = conn.execute(_READ_FROM, (task, low))
            else:
                cursor = conn.execute(_READ_RANGE, (task, low, last))
            return [EventRow(*r) for r in cursor]

        with self._lock:
            return read_across_forks(self._id(tenant, task_id), after, upto, parent_of, segment)

    def get_task(self, tenant: str, task_id: str) -> TaskRow | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks t LEFT JOIN tasks p ON p.id = t.parent "
                "WHERE t.tenant = ? AND t.task_id = ?",
                (tenant, task_id),
            ).fetchone()
            return None if row is None else TaskRow(*row)

    def delete_task(self, tenant: str, task_id: str) -> int:
        with self._write() as conn:
            internal = self._id(tenant, task_id)
            if conn.execute("SELECT 1 FROM tasks WHERE parent = ?", (internal,)).fetchone() is not None:
                raise ConflictError(task_id, expected=0, actual=None)
            self._forget_known(internal)
            self._bump_mapping()
            gone = conn.execute("DELETE FROM events WHERE task = ?", (internal,)).rowcount
            conn.execute("DELETE FROM snapshots WHERE task = ?", (internal,))
            conn.execute("DELETE FROM tasks WHERE id = ?", (internal,))
        self._ids.pop((tenant, task_id), None)
        return int(gone)

    def list_tasks(self, tenant: str, flt: TaskFilter, *, limit: int = 100, offset: int = 0) -> list[TaskRow]:
        where = ["t.tenant = ?"]
        params: list[Any] = [tenant]
        if flt.status is not None:
            where.append(f"t.status IN ({', '.join('?' * len(flt.status))})")
            params.extend(flt.status)
        for column, value in (("type", flt.type), ("user_id", flt.user_id), ("session_id", flt.session_id)):
            if value is not None:
                where.append(f"t.{column} = ?")
                params.append(value)
        if flt.type is None and not flt.internal:
            where.append("t.type NOT LIKE 'tether.%'")
        if flt.created_after is not None:
            where.append("t.created_at >= ?")
            params.append(flt.created_after)
        if flt.created_before is not None:
            where.append("t.created_at < ?")
            params.append(flt.created_before)
        params.extend([limit, offset])
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks t LEFT JOIN tasks p ON p.id = t.parent "
                f"WHERE {' AND '.join(where)} ORDER BY t.created_at DESC, t.task_id DESC LIMIT ? OFFSET ?",
                params,
            ).fetchall()
        return [TaskRow(*r) for r in rows]

    # -- snapshots --------------------------------------------------------------
    def put_snapshot(self, tenant: str, task_id: str, snapshot: SnapshotRow, *, replaces: int | None = None) -> None:
        with self._write() as conn:
            internal = self._id(tenant, task_id)
            conn.execute(
                "INSERT OR REPLACE INTO snapshots (task, seq, schema, checksum, data) VALUES (?, ?, ?, ?, ?)",
                (internal, snapshot.seq, snapshot.schema, snapshot.checksum, _text(snapshot.data)),
            )
            if replaces is not None and replaces != snapshot.seq:
                conn.execute("DELETE FROM snapshots WHERE task = ? AND seq = ?", (internal, replaces))

    def get_snapshot(self, tenant: str, task_id: str, *, at_most: int) -> SnapshotRow | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT seq, schema, checksum, data FROM snapshots WHERE task = ? AND seq <= ? "
                "ORDER BY seq DESC LIMIT 1",
                (self._id(tenant, task_id), at_most),
            ).fetchone()
            return None if row is None else SnapshotRow(*row)

    def read_latest(self, tenant: str, task_id: str) -> tuple[SnapshotRow | None, list[EventRow]]:
        with self._lock:  # one snapshot and the events after it, as of one moment
            snap = self.get_snapshot(tenant, task_id, at_most=2**62)
            return snap, self.read_events(tenant, task_id, after=snap.seq if snap else 0)

    # -- idempotency ledger -----------------------------------------------------
    _LEDGER = "SELECT key, status, result, started_at, finished_at, runs FROM ledger WHERE tenant = ? AND key = ?"

    def ledger_get(self, tenant: str, key: str) -> LedgerRow | None:
        with self._lock:
            row = self._conn.execute(self._LEDGER, (tenant, key)).fetchone()
            return None if row is None else LedgerRow(*row)

    def ledger_begin(self, tenant: str, key: str, now: float) -> LedgerRow:
        with self._write() as conn:
            row = conn.execute(self._LEDGER, (tenant, key)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO ledger (tenant, key, status, started_at, runs) VALUES (?, ?, 'started', ?, 1)",
                    (tenant, key, now),
                )
                return LedgerRow(key, "new", None, now, None, 0)
            if row[1] == "started":
                conn.execute("UPDATE ledger SET runs = runs + 1 WHERE tenant = ? AND key = ?", (tenant, key))
            return LedgerRow(*row)

    def ledger_finish(self, tenant: str, key: str, result: str | bytes, now: float) -> LedgerRow:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO ledger (tenant, key, status, result, started_at, finished_at, runs) "
                "VALUES (?1, ?2, 'done', ?3, ?4, ?4, 1) "
                "ON CONFLICT (tenant, key) DO UPDATE SET status = 'done', result = ?3, finished_at = ?4 "
                "WHERE status != 'done'",
                (tenant, key, _text(result), now),
            )
            return LedgerRow(*conn.execute(self._LEDGER, (tenant, key)).fetchone())

    def ledger_forget(self, tenant: str, key: str) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM ledger WHERE tenant = ? AND key = ?", (tenant, key))

    # -- leases -----------------------------------------------------------------
    def acquire_lease(
        self, tenant: str, task_id: str, owner: str, ttl: float, now: float, *, steal_from: str | None = None
    ) -> int | None:
        with self._write() as conn:
            row = conn.execute(
                "UPDATE tasks SET lease_owner = ?, lease_expires = ?, lease_token = lease_token + 1 "
                "WHERE id = ? AND (lease_owner IS NULL OR lease_expires <= ? OR lease_owner = ?) "
                "RETURNING lease_token",
                (owner, now + ttl, self._id(tenant, task_id), now, steal_from),
            ).fetchone()
            self._tokens.pop(self._id(tenant, task_id), None)
            return None if row is None else int(row[0])

    def claim(self, tenant: str, owner: str, ttl: float, now: float) -> tuple[str, int] | None:
        with self._write() as conn:
            row = conn.execute(_CLAIM, {"owner": owner, "now": now, "expires": now + ttl, "tenant": tenant}).fetchone()
            self._tokens.clear()  # a lease moved: the next fenced append checks its token
            return None if row is None else (row[0], int(row[1]))

    def renew_lease(self, tenant: str, task_id: str, token: int, ttl: float, now: float) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE tasks SET lease_expires = ? WHERE id = ? AND lease_token = ? AND lease_owner IS NOT NULL",
                (now + ttl, self._id(tenant, task_id), token),
            )
            return cur.rowcount == 1

    def release_lease(self, tenant: str, task_id: str, token: int) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE tasks SET lease_owner = NULL, lease_expires = NULL WHERE id = ? AND lease_token = ?",
                (self._id(tenant, task_id), token),
            )
            self._tokens.pop(self._id(tenant, task_id), None)

    def wait_for_change(self, timeout: float, *, interrupt: threading.Event | None = None) -> bool:
        # PRAGMA data_version changes when another connection commits; it reads only the WAL
        # index header, so looking every few milliseconds costs next to nothing.
        deadline = time.monotonic() + timeout
        with self._lock:
            start = self._conn.execute("PRAGMA data_version").fetchone()[0]
        while True:
            if interrupt is not None and interrupt.is_set():
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(0.005, remaining))
            with self._lock:
                if self._conn.execute("PRAGMA data_version").fetchone()[0] != start:
                    return True

    def close(self) -> None:
        with self._lock:
            if self._checkpointer is not None:
                self._checkpointer.stop()
            self._conn.close()  # the last connection to close checkpoints and removes the WAL
            if self._generations is not None:
                self._generations.close()
                self._generations = None
            if self._gate is not None:
                os.close(self._gate)
                self._gate = None


def _text(data: str | bytes) -> str:
    # Stored as TEXT so SQLite's JSON functions (json_extract, ->>) work on it.
    return data.decode() if isinstance(data, bytes) else data


def _statements(script: str) -> list[str]:
    code = "\n".join(line for line in script.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in code.split(";") if s.strip()]


def default_path() -> str:
    return os.path.join(os.getcwd(), "tether.db")
