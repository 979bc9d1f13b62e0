from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests import _redis_server as redis_server
from tests._forkserver import ForkServer, ForkServers

if TYPE_CHECKING:
    from tether.testing import Target

# The conformance kit (tether.testing) proves memory, SQLite and PostgreSQL on every run: its checks
# are collected with tests/conformance, and its fixtures (store_url: a fresh namespace per test)
# serve every test here. (Imported by pytest, as a plugin, so that its asserts are rewritten: this
# file imports it only inside functions.)
pytest_plugins = ["tether.testing"]
KIT = Path(str(find_spec("tether.testing").origin)).parent  # type: ignore[union-attr]

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
# Redis runs on a redis-server each test process starts for itself (tests/_redis_server.py), on first
# use; without the binary or redis-py its tests skip with the reason, except when CI=true.
REDIS_PROBLEM = redis_server.problem()


def pytest_sessionstart(session: pytest.Session) -> None:
    if PG_PROBLEM and os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI=true but {PG_PROBLEM}; the PostgreSQL tests must run in CI")
    if REDIS_PROBLEM and os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI=true but {REDIS_PROBLEM}; the Redis tests must run in CI")


def pytest_unconfigure(config: pytest.Config) -> None:
    redis_server.stop_session()  # this process's redis-server, if a test started it


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"postgres: {'skipped — ' + PG_PROBLEM if PG_PROBLEM else PG_URL}",
        "redis: "
        + (f"skipped — {REDIS_PROBLEM}" if REDIS_PROBLEM else "a redis-server per test process (AOF, fsync always)"),
    ]


def pytest_tether_targets(config: pytest.Config) -> list[Target]:
    """The kit's backends when no --tether-url is given: all four, PostgreSQL skipped (with the
    reason) when its server does not answer, Redis when no redis-server can be started."""
    from tether.testing import Target

    return [
        Target("memory://"),
        Target("sqlite:///tether.db"),
        Target(PG_URL, skip=PG_PROBLEM),
        Target(redis_server.SESSION_URL, skip=REDIS_PROBLEM),
    ]


def pytest_tether_backend(url: str) -> object | None:
    """The session's own Redis target lives on the redis-server this process starts."""
    return redis_server.session_backend(url) if url == redis_server.SESSION_URL else None


class _Conformance(pytest.Package):
    """tests/conformance, and the kit's checks beside its own files (collected from the package,
    so there is one copy of them: the one a backend author runs)."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        yield from super().collect()
        yield pytest.Package.from_parent(self, path=KIT)


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if path == Path(__file__).parent / "conformance":
        return _Conformance.from_parent(parent, path=path)
    return None


def pg_url(prefix: str = "t") -> Iterator[str]:
    """A PostgreSQL URL with a schema of its own holding tether's tables and no rows (the kit's: put
    away afterwards, see :class:`tether.testing.PostgresBackend`)."""
    if PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    from tether.testing import PostgresBackend

    with PostgresBackend(PG_URL).namespace(Path("."), prefix) as url:
        yield url


def sql_url(backend: str, tmp_path: os.PathLike[str], prefix: str = "t") -> Iterator[str]:
    """A database other processes can open too: a SQLite file (``backend`` "sqlite"), or a
    PostgreSQL schema of its own (see :func:`pg_url`)."""
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


def dump_database(url: str, store: object | None = None) -> object:
    """Everything a store holds, to compare before and after an operation that must write nothing
    (the kit's :func:`tether.testing.dump_database`)."""
    from tether.testing import dump_database as dump

    return dump(url, store)  # type: ignore[arg-type]


@pytest.fixture
def in_new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local zone five hours behind UTC, as a server abroad has it."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    assert time.timezone != 0  # the zone took (a test can tell UTC from local time)
    yield
    monkeypatch.undo()
    time.tzset()
