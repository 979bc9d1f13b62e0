"""A PostgreSQL store gives its connections back: closed, or dropped and collected without close(),
it leaves none of its own (pool, per-thread appenders, listener) open on the server."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.conftest import PG_URL, pg_url
from tether.store import open_store
from tether.store.postgres import PostgresStore


@pytest.fixture
def url() -> Iterator[str]:
    yield from pg_url("conns")


def _open_connections(store: PostgresStore | str) -> int:
    name = store.application_name if isinstance(store, PostgresStore) else store
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()
    assert row is not None
    return int(row[0])


def _used(url: str) -> PostgresStore:
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    store.wait_for_change(0.05)  # starts the listener, which holds a connection of its own
    store.get_task("default", "nothing")
    return store


def _settles_to_zero(name: str) -> bool:
    deadline = time.monotonic() + 10
    while _open_connections(name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("how", ["closed", "dropped"])
def test_a_store_leaves_no_connection_behind(url: str, how: str) -> None:
    store = _used(url)
    name = store.application_name
    assert _open_connections(name) >= 2  # the pool's and the listener's
    if how == "closed":
        store.close()
    del store
    gc.collect()
    assert _settles_to_zero(name), f"connections of {name} stayed open after the store was {how}"
