"""Workers' liveness records: ``Store.record_worker`` keeps each worker's newest word that it is
alive (replacing its last), ``Store.workers`` reads them most recently seen first, and records not
seen for :data:`~tether.store.base.WORKERS_KEPT` seconds are dropped."""

from __future__ import annotations

import time

from tether.store import Store, WorkerRow
from tether.store.base import WORKERS_KEPT

TENANT = "default"


def test_a_workers_newest_record_replaces_its_last(store: Store) -> None:
    now = time.time()
    store.record_worker(TENANT, WorkerRow("w1", started_at=now - 100, seen_at=now - 100, app="support:app"))
    store.record_worker(TENANT, WorkerRow("w2", started_at=now - 50, seen_at=now - 40))
    store.record_worker(TENANT, WorkerRow("w1", started_at=now - 100, seen_at=now - 10, app="support:app"))
    store.record_worker("another-tenant", WorkerRow("w3", started_at=now, seen_at=now))
    found = store.workers(TENANT)
    assert found == [
        WorkerRow("w1", started_at=now - 100, seen_at=now - 10, app="support:app"),
        WorkerRow("w2", started_at=now - 50, seen_at=now - 40),
    ]
    assert store.workers(TENANT, seen_after=now - 20) == found[:1]
    assert store.workers(TENANT, limit=1) == found[:1]
    assert [w.worker_id for w in store.workers("another-tenant")] == ["w3"]
    assert store.workers("nobody") == []


def test_a_stopped_worker_says_when_and_old_records_go(store: Store) -> None:
    now = time.time()
    store.record_worker(TENANT, WorkerRow("gone", started_at=now - WORKERS_KEPT - 99, seen_at=now - WORKERS_KEPT - 9))
    store.record_worker(TENANT, WorkerRow("kept", started_at=now - 500, seen_at=now - 60, stopped_at=now - 60))
    assert {w.worker_id for w in store.workers(TENANT)} == {"gone", "kept"}  # nothing newer dropped it yet
    store.record_worker(TENANT, WorkerRow("new", started_at=now, seen_at=now))
    found = store.workers(TENANT)
    assert [w.worker_id for w in found] == ["new", "kept"]
    assert found[1].stopped_at == now - 60 and not found[1].alive(now, within=90)
    assert found[0].alive(now, within=90)
