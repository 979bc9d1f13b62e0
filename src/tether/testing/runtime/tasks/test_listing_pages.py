"""Listings by several statuses and by id prefix against a reference worked out in Python, on many
ids (characters around the edges of code point order: the surrogates, U+FFFF, U+10FFFF; ``_`` and
``%``), many ties on the creation time, and pages anywhere: on every backend, and on PostgreSQL with
ids in a collation that does not order text by code point (an ICU one), as a database may."""

from __future__ import annotations

import itertools
import random
import time

from tether.store import EventRow, Store, TaskFilter, TaskRow, open_store

TENANT = "default"
CHARACTERS = ["a", "b", "-", " ", "_", "%", "é", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0010ffff"]
STATUSES = ("pending", "running", "failed", "completed")


def _ids(rng: random.Random, n: int) -> list[str]:
    ids: set[str] = set()
    while len(ids) < n:
        ids.add("".join(rng.choice(CHARACTERS) for _ in range(rng.randint(1, 4))))
    return sorted(ids)


def _fill(store: Store, rng: random.Random) -> list[TaskRow]:
    """120 tasks of random ids and statuses, created at one of five times (ties everywhere)."""
    now = time.time()
    rows = []
    for task_id in _ids(rng, 120):
        row = TaskRow(task_id, TENANT, "t", rng.choice(STATUSES), None, None, now - rng.randint(0, 4), now, 1)
        store.create_task(TENANT, row, EventRow(1, "DecisionMade", 1, now, "{}"))
        rows.append(row)
    return rows


def _check(store: Store, rows: list[TaskRow], rng: random.Random) -> None:
    newest_first = sorted(rows, key=lambda r: (r.created_at, r.task_id), reverse=True)  # ids by code point
    listed = [r.task_id for r in store.list_tasks(TENANT, TaskFilter(), limit=1000)]
    assert listed == [r.task_id for r in newest_first]
    for statuses in [*itertools.combinations(STATUSES, 2), ("failed", "pending", "failed"), STATUSES]:
        expected = [r.task_id for r in newest_first if r.status in statuses]
        for limit, offset in [(1000, 0), (7, 0), (7, 11), (3, 40), (5, len(expected) - 2), (4, 500)]:
            page = store.list_tasks(TENANT, TaskFilter(status=statuses), limit=limit, offset=offset)
            assert [r.task_id for r in page] == expected[offset : offset + limit], (statuses, limit, offset)
    prefixes = {r.task_id[:n] for r in rows for n in range(len(r.task_id) + 1)}
    prefixes |= {"a\U0010ffff", "\U0010ffff\U0010ffff", "\ud7ff", "zz"}
    for prefix in sorted(prefixes, key=lambda _: rng.random())[:150]:
        expected = [r.task_id for r in newest_first if r.task_id.startswith(prefix)]
        found = [r.task_id for r in store.list_tasks(TENANT, TaskFilter(id_prefix=prefix), limit=1000)]
        assert found == expected, prefix
        assert store.count_tasks(TENANT, TaskFilter(id_prefix=prefix), cap=1000) == len(expected), prefix
        assert sorted(p[0] for p in store.stream_positions(TENANT, "t", prefix)) == sorted(expected), prefix


def test_pages_of_several_statuses_and_ids_by_prefix_are_exact(store_url: str) -> None:
    rng = random.Random(1726)
    store = open_store(store_url)
    try:
        _check(store, _fill(store, rng), rng)
    finally:
        store.close()
