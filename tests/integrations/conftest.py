from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.conftest import pg_url


@pytest.fixture(params=["sqlite", "postgres"])
def durable_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """A database other processes can open too: a SQLite file, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{os.path.join(tmp_path, 'tether.db')}"
    else:
        yield from pg_url("lg")
