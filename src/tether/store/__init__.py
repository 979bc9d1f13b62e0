"""Backends behind one protocol, chosen by URL.

==========================  ==============================================
``memory://``               in-process, for tests and notebooks
``sqlite:///tether.db``     a file relative to the working directory
``sqlite:////abs/t.db``     an absolute path
``postgresql://…/db``       PostgreSQL (``pip install 'tether[postgres]'``);
                            ``?schema=name`` picks tether's schema
``redis://host:6379/0``     Redis (``pip install 'tether[redis]'``), or
                            ``rediss://`` for TLS; ``?prefix=name`` picks
                            the key prefix (docs/redis.md)
==========================  ==============================================

Options ride on the query string: ``sqlite:///t.db?durability=full``.
Each backend is imported inside its branch, so ``import tether`` loads none
it does not use.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl

from tether.checks import option_float
from tether.errors import ConfigurationError
from tether.store.base import (
    Closing,
    EventRow,
    IndexUpdate,
    LedgerRow,
    Position,
    SnapshotRow,
    Store,
    StreamAppend,
    TaskFilter,
    TaskHead,
    TaskRow,
    WorkerRow,
)

__all__ = [
    "DEFAULT_URL",
    "Closing",
    "EventRow",
    "IndexUpdate",
    "LedgerRow",
    "Position",
    "SnapshotRow",
    "Store",
    "StreamAppend",
    "TaskFilter",
    "TaskHead",
    "TaskRow",
    "WorkerRow",
    "open_store",
    "resolve_url",
]

DEFAULT_URL = "sqlite:///tether.db"
URL_VARIABLE = "TETHER_URL"


def resolve_url(url: str | None = None) -> str:
    """The store a program means, in the one order of precedence the API and the CLI share: ``url``
    when given (``App(url)``, ``--db``), else the ``TETHER_URL`` environment variable when set and not
    empty, else :data:`DEFAULT_URL` (``./tether.db``). A bare path is a SQLite file.

    Example:
        >>> resolve_url("runs.db")
        'sqlite:///runs.db'
    """
    chosen = url or os.environ.get(URL_VARIABLE) or DEFAULT_URL
    return chosen if "://" in chosen else f"sqlite:///{chosen}"


_SCHEMES = "memory://, sqlite:///relative/path.db, sqlite:////absolute/path.db, postgresql://user@host/db"


def open_store(url: str | None = None, **options: Any) -> Store:
    """Open the backend a URL names; without one, ``$TETHER_URL``, then :data:`DEFAULT_URL` (:func:`resolve_url`).

    Keyword options (and query-string options) go to the backend, e.g. ``durability="full"`` for SQLite.

    Example:
        >>> store = open_store("memory://")
        >>> store.url
        'memory://'
    """
    if url is not None and not isinstance(url, str):
        raise ConfigurationError(f"the store URL must be a string, got {type(url).__name__} {url!r}; {_SCHEMES}")
    url = resolve_url(url)
    scheme, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    merged: dict[str, Any] = {**dict(parse_qsl(query)), **options}
    if scheme == "memory":
        if merged:
            raise ConfigurationError(f"memory:// takes no options, got {sorted(merged)}")
        from tether.store.memory import MemoryStore

        return MemoryStore(url)
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise ConfigurationError(f"SQLite URL {url!r} needs a path after 'sqlite:///' (e.g. sqlite:///tether.db)")
        path = rest[1:]
        from tether.store.sqlite import SQLiteStore

        option_float(merged, "busy_timeout", zero=True)
        unknown = set(merged) - {"durability", "busy_timeout", "mode", "readonly"}
        if unknown:
            raise ConfigurationError(
                f"unknown SQLite option(s) {sorted(unknown)}; known: durability, busy_timeout, mode, readonly"
            )
        if isinstance(merged.get("readonly"), str):
            merged["readonly"] = merged["readonly"].lower() in ("1", "true", "yes")
        return SQLiteStore(path, **merged)
    if scheme in ("postgresql", "postgres"):
        try:
            from tether.store.postgres import PostgresStore
        except ImportError as exc:
            raise ConfigurationError(str(exc)) from None
        known = {"schema", "pool_min", "pool_max", "query_timeout", "give_up_after", "readonly"}
        unknown = set(options) - known
        if unknown:
            raise ConfigurationError(
                f"unknown PostgreSQL option(s) {sorted(unknown)}; known: {', '.join(sorted(known))}"
            )
        return PostgresStore(url, **options)
    if scheme in ("redis", "rediss"):
        try:
            from tether.store.redis import OPTIONS, RedisStore
        except ImportError as exc:
            raise ConfigurationError(str(exc)) from None
        unknown = set(options) - OPTIONS
        if unknown:
            raise ConfigurationError(f"unknown Redis option(s) {sorted(unknown)}; known: {', '.join(sorted(OPTIONS))}")
        return RedisStore(url, **options)
    raise ConfigurationError(f"no tether backend for scheme {scheme!r} in {url!r}; expected one of: {_SCHEMES}")
