"""Listings by id prefix on PostgreSQL with ids in a collation that does not order text by code point
(an ICU one), as a database may: exact all the same."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.conftest import PG_URL, pg_url
from tether.store import open_store
from tether.testing.runtime.tasks.test_listing_pages import _check, _fill


@pytest.fixture
def icu_url() -> Iterator[str]:
    """A PostgreSQL schema whose task ids are in an ICU collation, which orders ``a-b`` and ``ab``
    not by code point (and ignores spaces and punctuation at first)."""
    for url in pg_url("icu"):
        import psycopg

        schema = url.rpartition("schema=")[2]
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu'").fetchone() is None:
                pytest.skip("this PostgreSQL server has no ICU collations (built without ICU)")
        open_store(url).close()  # tether's tables, then their ids in that collation
        with psycopg.connect(PG_URL, autocommit=True, options=f"-c search_path={schema}") as conn:
            conn.execute('ALTER TABLE tasks ALTER COLUMN task_id TYPE text COLLATE "und-x-icu"')
        yield url


def test_a_prefix_is_exact_whatever_the_collation_of_ids(icu_url: str) -> None:
    store = open_store(icu_url)
    rng = random.Random(1726)
    try:
        _check(store, _fill(store, rng), rng)
    finally:
        store.close()
