from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping, Sequence

import pytest

from tests._forkserver import ForkServer, ForkServers

# Backends every conformance test runs against. PostgreSQL joins when its server answers at
# TETHER_TEST_PG_URL; without one, its tests skip with the reason — except when CI=true, where
# an unreachable server fails the run.
PG_URL = os.environ.get("TETHER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_problem() -> str | None:
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install 'tether[postgres]')"
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {PG_URL} is unreachable: {exc}"
    return None


PG_PROBLEM = _pg_problem()


def pytest_sessionstart(session: pytest.Session) -> None:
    if PG_PROBLEM and os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI=true but {PG_PROBLEM}; the PostgreSQL tests must run in CI")


def pytest_report_header(config: pytest.Config) -> str:
    return f"postgres: {'skipped — ' + PG_PROBLEM if PG_PROBLEM else PG_URL}"


def pg_url(prefix: str = "t") -> Iterator[str]:
    """A PostgreSQL URL with a schema of its own, dropped afterwards."""
    if PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    import psycopg
    from psycopg import sql

    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{separator}schema={schema}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def sql_url(backend: str, tmp_path: os.PathLike[str], prefix: str = "t") -> Iterator[str]:
    """A database other processes can open too: a SQLite file (``backend`` "sqlite"), or a
    PostgreSQL schema of its own, dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{os.path.join(tmp_path, 'tether.db')}"
    else:
        yield from pg_url(prefix)


@pytest.fixture(scope="session")
def fork_servers() -> Iterator[ForkServers]:
    """Two fork servers per set of modules to preload (and child environment), started on first use and
    kept for the session. A crash test forks the run it kills from the first and the runs that resume it
    from the second, so the resuming process hashes with a seed of its own (see tests/_forkserver.py)."""
    started: dict[tuple[object, ...], tuple[ForkServer, ForkServer]] = {}

    def servers(preload: Sequence[str], env: Mapping[str, str]) -> tuple[ForkServer, ForkServer]:
        key = (tuple(preload), tuple(sorted(env.items())))
        if key not in started:
            started[key] = (ForkServer(preload, env), ForkServer(preload, env))
        return started[key]

    yield servers
    for pair in started.values():
        for server in pair:
            server.close()


BACKENDS = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{os.path.join(tmp_path, 'tether.db')}"
    else:
        yield from pg_url()


def dump_database(url: str, store: object | None = None) -> object:
    """Everything a store holds, to compare byte for byte before and after an operation that must
    write nothing: SQLite's full SQL dump, every table of a PostgreSQL schema, the memory store's
    dictionaries (``store`` is the open memory store)."""
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return "\n".join(conn.iterdump())
        finally:
            conn.close()
    if url.startswith("memory://"):
        import copy

        assert store is not None, "a memory store is dumped from the open store object"
        return copy.deepcopy({k: v for k, v in vars(store).items() if k in ("_tasks", "_ledger")})
    import psycopg
    from psycopg import sql

    schema = url.rpartition("schema=")[2].partition("&")[0]
    tables: dict[str, list[tuple[object, ...]]] = {}
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,)
            )
        ]
        for name in names:
            query = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(name))
            tables[name] = sorted(tuple(map(repr, row)) for row in conn.execute(query))
    return tables
