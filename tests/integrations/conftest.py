from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import sql_url
from tests.crash.conftest import make_url  # noqa: F401 - a fixture: a fresh SQLite file or PostgreSQL schema

HERE = Path(__file__).parent
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE.parent.parent)])}
"""What a child process needs to import tether (this checkout) and the tests' helper modules."""


@pytest.fixture(params=["sqlite", "postgres"])
def durable_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """A database other processes can open too: a SQLite file, or a PostgreSQL schema of its own."""
    yield from sql_url(request.param, tmp_path, "lg")
