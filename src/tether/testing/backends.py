"""How the kit runs on one kind of store URL: a fresh namespace for each test, the optional
capabilities the backend has, and a dump of what it holds.

tether knows its own three backends. A new one (say ``redis://``) tells the kit about itself with a
:class:`Backend` subclass, returned from the ``pytest_tether_backend`` hook of a plugin::

    # tether_redis_kit.py, loaded with `pytest -p tether_redis_kit ...`
    from contextlib import contextmanager
    from tether.testing import Backend

    class RedisBackend(Backend):
        name = "redis"
        capabilities = frozenset({"cross_process", "durable", "push"})

        @contextmanager
        def namespace(self, tmp_path, label=""):
            prefix = f"{label or 'tether'}-{uuid.uuid4().hex[:12]}"
            yield f"{self.url}?prefix={prefix}"
            drop_keys(self.url, prefix)

    def pytest_tether_backend(url):
        return RedisBackend(url) if url.startswith("redis://") else None

A backend that leaves ``capabilities`` as ``None`` has them probed (see :meth:`Backend.probe`).
"""

from __future__ import annotations

import atexit
import copy
import os
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote, urlencode

from tether.store import EventRow, Store, TaskRow, open_store

__all__ = [
    "Backend",
    "MemoryBackend",
    "PostgresBackend",
    "RedisBackend",
    "SQLiteBackend",
    "Target",
    "builtin_backend",
]


class Backend:
    """One kind of store URL, as the kit uses it. Subclass it for a new backend.

    Attributes:
        url: the URL the kit was given (``--tether-url``).
        name: how the backend is named in test ids and in the report.
        capabilities: the optional capabilities it has (names from
            :data:`tether.testing.CAPABILITIES`), or ``None`` to have them probed.
    """

    name = "backend"
    capabilities: frozenset[str] | None = None

    def __init__(self, url: str) -> None:
        self.url = url
        self._probed: frozenset[str] | None = None

    def problem(self) -> str | None:
        """Why the URL cannot be used (a server that does not answer), or ``None``."""
        return None

    @contextmanager
    def namespace(self, tmp_path: Path, label: str = "") -> Iterator[str]:
        """A URL to an empty database of the test's own, removed afterwards. ``tmp_path`` is the
        test's temporary directory; ``label``, when given, a short prefix for the names it makes
        in a shared server."""
        raise NotImplementedError(
            f"{type(self).__name__} does not say how to make a fresh namespace for {self.url!r}: "
            "implement Backend.namespace"
        )
        yield self.url  # pragma: no cover

    def dump(self, url: str, store: Store | None = None) -> object:
        """Everything the database at ``url`` holds, to compare before and after an operation that
        must write nothing. ``store`` is the open store (an in-process backend is dumped from it).
        A backend that cannot be dumped lacks the ``dump`` capability.

        The workers' liveness records (``Store.record_worker``) are left out: a worker writes its
        own as it starts and stops, whatever it finds to run, and they hold nothing of any task."""
        raise NotImplementedError

    def has(self, capability: str) -> bool:
        """Whether the backend has an optional capability: declared, or probed once."""
        if self.capabilities is not None:
            return capability in self.capabilities
        if self._probed is None:
            self._probed = self.probe()
        return capability in self._probed

    def probe(self) -> frozenset[str]:
        """The capabilities the kit can see for itself, each tried on a namespace of its own:
        ``cross_process`` (a second open of the URL sees a task the first made), ``push`` (a reader
        waiting on the store wakes within a second of the store's own commit) and ``dump`` (the
        backend overrides :meth:`dump`). ``durable`` is never probed: a backend declares it."""
        found = set()
        with tempfile.TemporaryDirectory(prefix="tether-probe-") as tmp, self.namespace(Path(tmp), "probe") as url:
            first, second = open_store(url), open_store(url)
            try:
                now = time.time()
                first.create_task("probe", TaskRow("p", "probe", "t", "pending", None, None, now, now, 1), _event(1))
                if second.get_task("probe", "p") is not None:
                    found.add("cross_process")
                if _wakes_on_own_commit(first):
                    found.add("push")
            finally:
                first.close()
                second.close()
        if type(self).dump is not Backend.dump:
            found.add("dump")
        return frozenset(found)


@dataclass
class Target:
    """A store URL the kit runs on, and why it cannot run there, if it cannot (the reason every
    test on it is skipped with). The plugin fills in its backend and its id in test names.

    Example:
        >>> Target("memory://").url
        'memory://'
    """

    url: str
    skip: str | None = None
    backend: Backend = field(init=False, repr=False)
    id: str = field(init=False, default="")


def _event(seq: int) -> EventRow:
    return EventRow(seq, "DecisionMade", 1, time.time(), "{}")


def _wakes_on_own_commit(store: Store) -> bool:
    woke: list[bool] = []
    reader = threading.Thread(target=lambda: woke.append(store.wait_for_change(1.0)))
    reader.start()
    time.sleep(0.05)
    store.append("probe", "p", [_event(2)], 1)
    started = time.monotonic()
    reader.join(2)
    return woke == [True] and time.monotonic() - started < 0.9


class MemoryBackend(Backend):
    """``memory://``: a new, empty store for each open."""

    name = "memory"
    capabilities = frozenset({"push", "dump"})

    @contextmanager
    def namespace(self, tmp_path: Path, label: str = "") -> Iterator[str]:
        yield "memory://"

    def dump(self, url: str, store: Store | None = None) -> object:
        assert store is not None, "a memory store is dumped from the open store object"
        return copy.deepcopy({k: v for k, v in vars(store).items() if k in ("_tasks", "_ledger")})


_WORKERS = "workers"
"""The table of the workers' liveness records, which a dump leaves out (see :meth:`Backend.dump`)."""
_WORKER_ROWS = f'INSERT INTO "{_WORKERS}"'


class SQLiteBackend(Backend):
    """``sqlite:///path.db``: a file of the same name (and the URL's options) in each test's
    temporary directory."""

    name = "sqlite"
    capabilities = frozenset({"cross_process", "durable", "dump"})

    @contextmanager
    def namespace(self, tmp_path: Path, label: str = "") -> Iterator[str]:
        path, _, query = self.url.removeprefix("sqlite:///").partition("?")
        yield f"sqlite:///{os.path.join(tmp_path, os.path.basename(path) or 'tether.db')}" + (
            f"?{query}" if query else ""
        )

    def dump(self, url: str, store: Store | None = None) -> object:
        conn = sqlite3.connect(url.removeprefix("sqlite:///").partition("?")[0])
        try:
            return "\n".join(line for line in conn.iterdump() if not line.startswith(_WORKER_ROWS))
        finally:
            conn.close()


class PostgresBackend(Backend):
    """``postgresql://…``: a schema of its own for each test, holding tether's tables and no rows,
    named by a prefix (the URL's ``?schema=``, or ``t``) and random digits; the URL's other options
    are kept.

    A test's schema is put away afterwards: renamed to a new random name, emptied, and handed to the
    next test of this process that asks for the same prefix, if it still is exactly what tether's
    migrations make (else it is dropped). Creating and dropping a schema for each test writes a few
    hundred rows of the server's catalog and deletes them again, which costs the server more than
    most tests do, and a server that does not vacuum its catalog (autovacuum off) grows slower at
    every later catalog read. A renamed schema is out of reach of whatever of the test still holds
    its old name (its connections are ended, and one that reconnects finds no such schema), as a
    dropped one is. The spare schemas go when the process ends.
    """

    name = "postgres"
    capabilities = frozenset({"cross_process", "durable", "push", "dump"})
    _spares: ClassVar[dict[tuple[str, str], list[str]]] = {}
    """Emptied schemas at this code's version, by (server, prefix), for this process's next tests."""
    _shape: ClassVar[dict[str, str]] = {}
    """The catalog of a freshly migrated schema, by server (schema names left out): what a schema
    put away must still be to be used again."""
    _spares_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, url: str) -> None:
        super().__init__(url)
        base, _, query = url.partition("?")
        options = dict(parse_qsl(query))
        self.prefix = options.pop("schema", "t")
        self.server = base + (f"?{urlencode(options)}" if options else "")
        """The URL without its schema: what an administrative connection opens."""

    def problem(self) -> str | None:
        try:
            import psycopg
        except ImportError:
            return "psycopg is not installed (pip install 'tether[postgres]')"
        try:
            with psycopg.connect(_connection_url(self.server), connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:
            return f"PostgreSQL at {self.server} is unreachable: {exc}"
        return None

    def _url(self, schema: str) -> str:
        return f"{self.server}{'&' if '?' in self.server else '?'}schema={schema}"

    @contextmanager
    def namespace(self, tmp_path: Path, label: str = "") -> Iterator[str]:
        import psycopg

        from tether.store.postgres import PostgresStore

        prefix = label or self.prefix
        with self._spares_lock:
            spares = self._spares.get((self.server, prefix))
            schema = spares.pop() if spares else None
        if schema is None:
            schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
            PostgresStore(self._url(schema), pool_min=0).close()  # tether's tables, as every spare holds
            if self.server not in self._shape:
                with psycopg.connect(_connection_url(self.server), autocommit=True) as conn:
                    self._shape[self.server] = _catalog(conn, schema)
        try:
            yield self._url(schema)
        finally:
            self._put_away(schema, prefix)

    def _put_away(self, schema: str, prefix: str) -> None:
        import psycopg
        from psycopg import sql

        # A bound on every statement: a connection of the test that outlived its end could hold a lock.
        options = "-c statement_timeout=30000"
        with psycopg.connect(_connection_url(self.server), autocommit=True, options=options) as conn:
            spare = f"{prefix}_{uuid.uuid4().hex[:12]}"
            try:
                kept = self._emptied(conn, schema, spare)
            except Exception:
                kept = False
            if not kept:
                for name in (schema, spare):
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
                return
        with self._spares_lock:
            if not self._spares:  # the first spare of this process: they go when it ends
                atexit.register(_drop_spares, self._spares, os.getpid())
            self._spares.setdefault((self.server, prefix), []).append(spare)

    def _emptied(self, conn: Any, schema: str, spare: str) -> bool:
        """End every connection still open on ``schema``, rename it to ``spare`` and delete its rows; True
        if it is then exactly a freshly migrated schema (else the caller drops it)."""
        from psycopg import errors, sql

        from tether.store.postgres import SCHEMA_VERSION

        # A store the test left open holds its connections until the garbage collector finds it;
        # they are this namespace's own (tether names each connection by its schema), so they go
        # with it, and a long run does not exhaust the server's slots. Each is waited for (up to 5 s),
        # and one that is still there makes the schema dropped, not used again. One a pool opens
        # again after the rename names a schema that no longer exists.
        if not _ended(conn, f"tether:{schema}"):
            return False
        try:
            conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(schema), sql.Identifier(spare)))
        except errors.InvalidSchemaName:
            return False  # the test dropped it itself
        if not _ended(conn, f"tether:{schema}"):  # opened again between the two
            return False
        shape = self._shape.get(self.server)
        if shape is None or _catalog(conn, spare) != shape:
            return False
        # Its tables and sequences are the fresh schema's: the "rel <name> <kind> ..." lines of its catalog.
        rows = [line.split()[1:3] for line in shape.splitlines() if line.startswith("rel ")]
        with conn.transaction():
            for relname, kind in [(name, kind) for name, kind in rows if kind in ("r", "S")]:
                target = sql.Identifier(spare, relname)
                if kind == "S":
                    qualified = sql.Literal(target.as_string(conn))
                    conn.execute(sql.SQL("SELECT setval({}, 1, false)").format(qualified))
                elif relname == "tether_meta":
                    conn.execute(sql.SQL("DELETE FROM {} WHERE key <> 'schema_version'").format(target))
                else:
                    conn.execute(sql.SQL("DELETE FROM {}").format(target))
            meta = sql.Identifier(spare, "tether_meta")
            asked = sql.SQL("SELECT value FROM {} WHERE key = 'schema_version'").format(meta)
            version = conn.execute(asked).fetchone()
        return version is not None and version[0] == str(SCHEMA_VERSION)

    def dump(self, url: str, store: Store | None = None) -> object:
        """Every table of the schema, each as a sorted list of its rows (reprs of their values)."""
        import psycopg
        from psycopg import sql

        schema = url.rpartition("schema=")[2].partition("&")[0]
        tables: dict[str, list[tuple[object, ...]]] = {}
        with psycopg.connect(_connection_url(self.server), autocommit=True) as conn:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1",
                    (schema,),
                )
            ]
            for name in names:
                if name == _WORKERS:
                    continue
                query = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(name))
                tables[name] = sorted(tuple(map(repr, row)) for row in conn.execute(query))
        return tables


def _catalog(conn: Any, schema: str) -> str:
    """What ``schema`` holds, as one text with the schema's own name left out: its relations (their kind,
    persistence, row security, owner and grants), their columns (type, nullability, default,
    collation, grants), constraints, indexes (and whether each is valid), sequences' settings, rules,
    policies, triggers and functions (whole definitions). A test that changes any of these leaves a
    schema that is not used again."""
    row = conn.execute(
        """
        WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = %(s)s),
        member AS (
            SELECT classid, objid FROM pg_depend
            WHERE refclassid = 'pg_namespace'::regclass AND refobjid = (SELECT oid FROM ns)
        ),
        rel AS (
            SELECT c.oid, c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.relforcerowsecurity,
                   c.relowner, c.relacl
            FROM member m JOIN pg_class c ON c.oid = m.objid
            WHERE m.classid = 'pg_class'::regclass
        )
        SELECT string_agg(line, E'\n' ORDER BY line) FROM (
            SELECT 'rel ' || relname || ' ' || relkind::text || ' ' || concat_ws(' ', relpersistence::text,
                   relrowsecurity, relforcerowsecurity, relowner::regrole::text, relacl::text) AS line FROM rel
            UNION ALL
            SELECT 'col ' || r.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                   || ' ' || a.attnotnull || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
                   || ' ' || a.attcollation::regcollation::text || ' ' || coalesce(a.attacl::text, '')
            FROM rel r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
            LEFT JOIN pg_attrdef d ON d.adrelid = r.oid AND d.adnum = a.attnum
            UNION ALL
            SELECT 'index ' || pg_get_indexdef(i.indexrelid) || ' ' || i.indisvalid
            FROM pg_index i JOIN rel r ON r.oid = i.indrelid
            UNION ALL
            SELECT 'sequence ' || r.relname || ' ' || concat_ws(' ', q.seqtypid::regtype::text, q.seqstart,
                   q.seqincrement, q.seqmax, q.seqmin, q.seqcache, q.seqcycle)
            FROM pg_sequence q JOIN rel r ON r.oid = q.seqrelid
            UNION ALL
            SELECT 'rule ' || pg_get_ruledef(w.oid) FROM pg_rewrite w JOIN rel r ON r.oid = w.ev_class
            WHERE w.rulename <> '_RETURN'
            UNION ALL
            SELECT 'policy ' || r.relname || ' ' || y.polname FROM pg_policy y JOIN rel r ON r.oid = y.polrelid
            UNION ALL
            SELECT 'constraint ' || r.relname || ' ' || pg_get_constraintdef(k.oid)
            FROM pg_constraint k JOIN rel r ON r.oid = k.conrelid
            UNION ALL
            SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text
            FROM pg_trigger t JOIN rel r ON r.oid = t.tgrelid WHERE NOT t.tgisinternal
            UNION ALL
            SELECT 'function ' || md5(replace(pg_get_functiondef(p.oid), %(s)s, '')) || ' ' || p.proowner::regrole::text
                   || ' ' || coalesce(p.proacl::text, '')
            FROM member m JOIN pg_proc p ON p.oid = m.objid WHERE m.classid = 'pg_proc'::regclass
        ) AS lines
        """,
        {"s": schema},
    ).fetchone()
    text = row[0] if row and row[0] else ""
    return text.replace(f'"{schema}"', "{schema}").replace(schema, "{schema}")


def _ended(conn: Any, application_name: str, within: float = 5.0) -> bool:
    """End the server's connections named ``application_name``; True once none of them is left."""
    pids = [
        r[0]
        for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        )
    ]
    if not pids:
        return True
    conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
    deadline = time.monotonic() + within
    while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone() is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _drop_spares(spares: dict[tuple[str, str], list[str]], pid: int) -> None:
    """At the process's end: drop the spare schemas it kept (a process killed first leaves them). Not in
    a child forked from it, whose spares are its parent's."""
    import psycopg
    from psycopg import sql

    if os.getpid() != pid:
        return
    for (server, _), names in spares.items():
        if not names:
            continue
        try:
            with psycopg.connect(_connection_url(server), autocommit=True, connect_timeout=3) as conn:
                for name in names:
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        except Exception:
            pass  # the server is gone: nothing to tidy


def _connection_url(url: str) -> str:
    """The URL psycopg opens: tether's own options (pool sizes, timeouts) left out."""
    base, _, query = url.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query) if k not in _TETHER_PG_OPTIONS]
    return base + (f"?{urlencode(kept)}" if kept else "")


_TETHER_PG_OPTIONS = {"schema", "pool_min", "pool_max", "query_timeout", "give_up_after", "readonly"}


class RedisBackend(Backend):
    """``redis://host:port/db``: a key prefix of its own for each test (the URL's ``?prefix=``, or
    ``t``, and random digits) on the URL's server, its keys deleted afterwards; the URL's other
    options are kept."""

    name = "redis"
    capabilities = frozenset({"cross_process", "durable", "push", "dump"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        base, _, query = url.partition("?")
        options = dict(parse_qsl(query))
        self.prefix = options.pop("prefix", "t")
        self.server = base + (f"?{urlencode(options)}" if options else "")
        """The URL without its prefix."""

    def problem(self) -> str | None:
        try:
            import redis
        except ImportError:
            return "redis-py is not installed (pip install 'tether[redis]')"
        try:
            client = redis.Redis.from_url(self.server.partition("?")[0], socket_connect_timeout=3)
            client.ping()
            client.close()
        except Exception as exc:
            return f"Redis at {self.server} is unreachable: {exc}"
        return None

    @contextmanager
    def namespace(self, tmp_path: Path, label: str = "") -> Iterator[str]:
        prefix = f"{label or self.prefix}-{uuid.uuid4().hex[:12]}"
        yield f"{self.server}{'&' if '?' in self.server else '?'}prefix={prefix}"
        with self._client() as client:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            for start in range(0, len(keys), 500):
                client.delete(*keys[start : start + 500])

    @contextmanager
    def _client(self) -> Iterator[Any]:
        import redis

        client = redis.Redis.from_url(self.server.partition("?")[0])
        try:
            yield client
        finally:
            client.close()

    def dump(self, url: str, store: Store | None = None) -> object:
        """Every key of the URL's prefix, as tables of rows (each a tuple of reprs), sorted: ``tasks``
        (one row per task: its index row and where the tenant's indexes and its forks' set have it),
        ``events`` (one per event), ``snapshots`` and ``ledger`` (one per entry)."""
        prefix = url.rpartition("prefix=")[2].partition("&")[0]
        tables: dict[str, list[tuple[str, ...]]] = {"tasks": [], "events": [], "snapshots": [], "ledger": []}
        with self._client() as client:
            keys = sorted(client.scan_iter(match=f"{prefix}:*", count=1000))
            indexes = {k: _redis_index(client, k) for k in keys if k.rsplit(b":", 1)[-1] in _REDIS_INDEXES}
            for key in keys:
                tag, _, part = key.removeprefix(f"{prefix}:".encode()).partition(b"}:")
                tenant, _, task = tag.removeprefix(b"{").partition(b":")
                if part == b"r":
                    task_id = unquote(task.decode()).encode()
                    seen = tuple(
                        f"{k.rsplit(b':', 1)[-1]!r}={v[task_id]!r}"
                        for k, v in indexes.items()
                        if task_id in v and k.startswith(f"{prefix}:{{".encode() + tenant + b"}")
                    )
                    kids = tuple(sorted(map(repr, client.smembers(key[:-1] + b"k"))))
                    fields = tuple(map(repr, sorted(client.hgetall(key).items())))
                    tables["tasks"].append((repr(key), *fields, *seen, *kids))
                elif part == b"e":
                    for n, value in enumerate(client.lrange(key, 0, -1)):
                        tables["events"].append((repr(key), str(n), repr(value)))
                elif part == b"s":
                    for field_, value in sorted(client.hgetall(key).items()):
                        tables["snapshots"].append((repr(key), repr(field_), repr(value)))
                elif part.startswith(b"L:"):
                    tables["ledger"].append((repr(key), *map(repr, sorted(client.hgetall(key).items()))))
        return {name: sorted(rows) for name, rows in tables.items()}


_REDIS_INDEXES = (b"tasks", b"due", b"held", b"exp")


def _redis_index(client: Any, key: bytes) -> dict[bytes, object]:
    """One of a tenant's index keys of the Redis backend, as member -> score (``True`` in a set)."""
    if key.endswith(b":held"):
        return dict.fromkeys(client.smembers(key), True)
    return dict(client.zrange(key, 0, -1, withscores=True))


def builtin_backend(url: str) -> Backend | None:
    """The kit's own description of one of tether's backends, by the URL's scheme."""
    scheme = url.partition("://")[0]
    if scheme == "memory":
        return MemoryBackend(url)
    if scheme == "sqlite":
        return SQLiteBackend(url)
    if scheme in ("postgresql", "postgres"):
        return PostgresBackend(url)
    if scheme in ("redis", "rediss"):
        return RedisBackend(url)
    return None
