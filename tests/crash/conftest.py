from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import PG_PROBLEM, PG_URL

UrlFactory = Callable[[Path], str]

SCENARIOS = int(os.environ.get("TETHER_CRASH_SCENARIOS", "0"))
"""How many random SIGKILL scenarios each random crash test runs (``TETHER_CRASH_SCENARIOS``, for a deep
run: 200). Unset, each runs one per kind of place its kills land (after a commit, inside a tool before
and after its effect, in a backoff, ...), each kind at a random occurrence: every path a kill can cut,
on every backend and in every mode, once per run."""


def scenarios(kinds: int) -> int:
    """The scenarios a crash test with ``kinds`` kinds of kill point runs: :data:`SCENARIOS`, or one per kind."""
    return SCENARIOS or kinds


@pytest.fixture(params=["sqlite", "postgres"])
def make_url(request: pytest.FixtureRequest) -> Iterator[UrlFactory]:
    """Gives a fresh database URL for a folder: a SQLite file in it, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield lambda folder: f"sqlite:///{folder / 't.db'}"
        return
    if PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    import psycopg
    from psycopg import sql

    schemas: list[str] = []

    def make(folder: Path) -> str:
        schema = f"c_{uuid.uuid4().hex[:12]}"
        schemas.append(schema)
        return f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"

    yield make
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
