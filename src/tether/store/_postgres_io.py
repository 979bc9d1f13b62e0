"""What the PostgreSQL backend needs around its queries: its URL and its connection policy (every
wait bounded), the watchdog that cuts a statement the server never answers, which errors are
connection faults, the connection a thread keeps for its appends, NUL characters in ``jsonb``, and
the schema name's rules.
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import orjson
import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from tether.errors import ConfigurationError, InvalidInputError, TetherError
from tether.store.base import ChangeSignal

log = logging.getLogger("tether")

# Every wait is bounded (each is a URL option; docs/postgres.md states them):
CONNECT_TIMEOUT = 5.0  # seconds to open a connection (libpq connect_timeout), or to get one from the pool
QUERY_TIMEOUT = 30.0  # seconds one statement (or transaction) may wait for the server before its socket is cut
GIVE_UP_AFTER = 5.0  # seconds of retrying a statement whose connection broke, then StoreUnavailableError
# TCP keepalives and tcp_user_timeout: a peer that vanished without a RST is noticed by the kernel
# (about 5 + 2 × 3 s idle, or 15 s of unacknowledged data) even where no statement is running.
TCP_OPTIONS = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "15000",
}


_OPTIONS = {"schema", "pool_min", "pool_max", "query_timeout", "give_up_after"}


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The libpq URL, and tether's own options taken out of its query string."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    ours = {k: query.pop(k) for k in list(query) if k in _OPTIONS}
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote))), ours


class Watchdog:
    """Cuts the socket of a connection whose statement outlived its deadline.

    libpq has no read timeout: a server that stops answering without closing the connection (a
    blackholed network, a stopped proxy whose kernel still acknowledges) leaves a statement waiting
    forever, and TCP keepalives do not help while the peer's kernel answers them. One thread per
    store watches the statements in flight; past its deadline it shuts the connection's socket
    down, the waiting call fails with ``OperationalError`` at once, and the usual retry (or
    ``StoreUnavailableError``) follows.
    """

    def __init__(self) -> None:
        self._watched: dict[int, tuple[float, psycopg.Connection[Any]]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @contextmanager
    def watch(self, conn: psycopg.Connection[Any], timeout: float) -> Iterator[None]:
        key = id(conn)
        self._watched[key] = (time.monotonic() + timeout, conn)
        if self._thread is None:
            self._start()
        try:
            yield
        finally:
            self._watched.pop(key, None)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tether-pg-watchdog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(0.1):
            now = time.monotonic()
            for key, (deadline, conn) in list(self._watched.items()):
                if deadline <= now and self._watched.get(key, (0.0, None))[1] is conn:
                    self._watched.pop(key, None)
                    log.warning("PostgreSQL statement got no answer in time; cutting its connection")
                    _cut(conn)

    def stop(self) -> None:
        self._stopping.set()


# SQLSTATEs that mean the connection (not the statement) failed: class 08, and the server shutting
# down or restarting. A client-side failure (lost socket, pool timeout) has no SQLSTATE at all.
_CONNECTION_STATES = frozenset({"57P01", "57P02", "57P03"})


def is_connection_fault(exc: Exception) -> bool:
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith("08") or state in _CONNECTION_STATES


def refused(exc: psycopg.Error) -> Exception:
    """What the server said about a statement or its data, as a tether error (never a retry, never
    "the server is down"): a value it cannot hold is an InvalidInputError."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError | psycopg.errors.ProgramLimitExceeded):
        return InvalidInputError(f"PostgreSQL cannot store this value ({exc.sqlstate}): {first}")
    return TetherError(f"PostgreSQL refused the statement ({exc.sqlstate}): {first}")


def _cut(conn: psycopg.Connection[Any]) -> None:
    """Shut a connection's socket down under it: its blocked read returns, the connection is broken."""
    try:
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, psycopg.Error):  # closed meanwhile: nothing to cut
        pass


class Sticky:
    """A pooled connection lent to one thread; returned to the pool when the thread lets go of it."""

    __slots__ = ("conn", "cursor", "pool", "released")

    def __init__(self, pool: ConnectionPool, conn: psycopg.Connection[Any], released: Callable[[], None]) -> None:
        self.pool = pool
        self.conn = conn
        self.cursor = conn.cursor()  # reused: one fewer object per append
        self.released = released  # told once the connection is back (a place for another thread)

    def __del__(self) -> None:
        try:
            self.cursor.close()
            self.pool.putconn(self.conn)
        except Exception:  # the pool is closed already: the connection goes with it
            pass
        finally:
            self.released()


def close_pool(pool: ConnectionPool, listener: Listener | None = None) -> None:
    if listener is not None:
        listener.close()
    try:
        pool.close(timeout=1.0)
    except Exception:  # at interpreter exit or in a worker thread: nothing more to do
        pass


# jsonb cannot hold a NUL character (``\u0000`` in a string). An event whose JSON has one is kept
# whole, base64-encoded, under this key, and decoded on read: it round-trips exactly, and only
# such events lose being queryable with PostgreSQL's JSON operators. An event's own JSON is an
# object of its fields, never one with this key alone.
_NUL_KEY = "$tether.nul"
_NUL_PREFIX = '{"$tether.nul"'


def to_jsonb(data: str | bytes) -> str:
    text = data.decode() if isinstance(data, bytes) else data
    if "\\u0000" not in text:
        return text
    return orjson.dumps({_NUL_KEY: base64.b64encode(text.encode()).decode()}).decode()


def from_jsonb(text: str) -> str:
    if text.startswith(_NUL_PREFIX):
        return base64.b64decode(orjson.loads(text)[_NUL_KEY]).decode()
    return text


MAX_SCHEMA_LENGTH = 63 - len("tether_")
"""PostgreSQL names are at most 63 bytes; the wake-up channel is ``tether_<schema>``."""


def check_schema_name(schema: str) -> None:
    """Refuse, at open, a schema name PostgreSQL would take and then fail on at the first write."""
    if not isinstance(schema, str) or not schema or not schema.isascii() or not schema.replace("_", "").isalnum():
        raise ConfigurationError(f"schema must be ASCII letters, digits and _, got {schema!r}")
    if len(schema) > MAX_SCHEMA_LENGTH:
        raise ConfigurationError(
            f"schema {schema!r} is {len(schema)} characters; at most {MAX_SCHEMA_LENGTH} "
            "(PostgreSQL names are at most 63 bytes, and tether's notification channel is 'tether_' + schema)"
        )
    if schema.lower().startswith("pg_") or schema.lower() == "information_schema":
        raise ConfigurationError(
            f"schema {schema!r} is reserved by PostgreSQL (pg_*, information_schema); choose another"
        )
    if schema[0].isdigit():
        raise ConfigurationError(f"schema {schema!r} starts with a digit; start it with a letter or _")


def with_default_params(conninfo: str, **params: str) -> str:
    """``conninfo`` (a URL) with ``params`` added to its query string where it does not set them."""
    parts = urlsplit(conninfo)
    query = dict(parse_qsl(parts.query))
    for key, value in params.items():
        query.setdefault(key, value)
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


class Listener:
    """LISTEN on a schema's channel on a thread of its own (started by the first :meth:`wait`);
    every notification — a commit of any writer to that schema — wakes the waiting workers."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._changes = ChangeSignal()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def wait(self, timeout: float, interrupt: threading.Event | None) -> bool:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    name = f"tether-listen-{self._schema}"
                    self._thread = threading.Thread(target=self._listen, name=name, daemon=True)
                    self._thread.start()
        return self._changes.wait(timeout, interrupt)

    def _listen(self) -> None:
        channel = sql.Identifier(f"tether_{self._schema}")
        while not self._closed:
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(channel))
                    self._changes.bump()  # anything committed while we were not listening: look again
                    while not self._closed:
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self._changes.bump()
            except psycopg.OperationalError:
                if not self._closed:
                    log.warning("PostgreSQL listener lost its connection; reconnecting")
                    time.sleep(0.2)

    def close(self) -> None:
        self._closed = True
