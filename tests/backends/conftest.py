"""What is true of one backend only — its files, its SQL, its migrations, its faults — checked on the
backends that have it. The conformance kit (tether.testing) proves what every backend must do."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests._redis_server import RedisServer, problem
from tests.conftest import sql_url


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """A SQLite file or a PostgreSQL schema of the test's own (see tests/conftest.py's ``pg_url``)."""
    yield from sql_url(request.param, tmp_path)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the module's own (its settings can be changed, it can be killed)."""
    found = problem()
    if found:
        pytest.skip(found)
    started = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield started
    started.kill()
