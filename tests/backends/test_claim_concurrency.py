"""PostgreSQL claimers beside each other: a claim locks only the task it takes, so a claim running at
the same time finds every other task that is due."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest

from tests.conftest import PG_URL, pg_url
from tether.store import EventRow, TaskRow, _postgres_sql, _sql, open_store

TENANT = "default"


@pytest.fixture
def url() -> Iterator[str]:
    yield from pg_url("claims")


def _task(task_id: str, status: str, created: float, wake: float | None = None) -> TaskRow:
    return TaskRow(task_id, TENANT, "t", status, None, None, created, created, 1, wake_at=wake)


def test_a_claim_in_flight_leaves_the_other_due_task_to_a_second_claimer(url: str) -> None:
    store = open_store(url)
    now = time.time()
    store.create_task(TENANT, _task("pending", "pending", now - 100), EventRow(1, "X", 1, now, "{}"))
    store.create_task(TENANT, _task("woken", "sleeping", now - 50, wake=now - 10), EventRow(1, "X", 1, now, "{}"))
    schema = url.rpartition("schema=")[2]
    with psycopg.connect(PG_URL, options=f"-c search_path={schema}") as first:
        # Another worker's claim, caught between its statement and its commit.
        taken = first.execute(_postgres_sql.SQL.claim, _sql.claim_values(TENANT, "w1", 30, now)).fetchone()
        assert taken is not None and taken[0] == "pending"
        assert store.claim(TENANT, "w2", 30, now) == ("woken", 1)  # the pending one is skipped, not lost
        first.rollback()
    store.close()


def test_eight_claimers_take_each_task_exactly_once(url: str) -> None:
    setup = open_store(url)
    now = time.time()
    for i in range(300):
        created = now - 1000 + i
        if i % 3 == 0:
            row = _task(f"s{i}", "sleeping", created, wake=created + 0.5)
        else:
            row = _task(f"p{i}", "pending", created)
        setup.create_task(TENANT, row, EventRow(1, "X", 1, created, "{}"))
    taken: Counter[str] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def claimer(k: int) -> None:
        store = open_store(url)
        try:
            start.wait()
            misses = 0
            while misses < 50:
                got = store.claim(TENANT, f"w{k}", 3600, time.time())
                if got is None:
                    misses += 1
                    continue
                with lock:
                    taken[got[0]] += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    setup.close()
    assert not errors
    assert len(taken) == 300 and set(taken.values()) == {1}
