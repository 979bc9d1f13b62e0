"""Leases and fencing: one live holder per task, a token that grows at each taking, and writes under a
stale token refused."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from tether.errors import LeaseLostError
from tether.store import Store, StreamAppend
from tether.testing.contract._records import TENANT, _create, _event, _expect, _row, _seqs, _versions


def test_a_live_lease_is_exclusive_and_fences_writes(store: Store) -> None:
    _create(store, "a")
    now = time.time()
    token = store.acquire_lease(TENANT, "a", "w1", 30, now)
    assert token is not None
    assert store.acquire_lease(TENANT, "a", "w2", 30, now) is None  # held and alive
    store.append(TENANT, "a", [_event(2)], 1, fence=token)
    _expect(LeaseLostError, lambda: store.append(TENANT, "a", [_event(3)], 2, fence=token - 1))
    assert store.renew_lease(TENANT, "a", token, 30, now)
    stolen = store.acquire_lease(TENANT, "a", "w2", 30, now, steal_from="w1")  # w1 known dead
    assert stolen is not None and stolen > token
    assert not store.renew_lease(TENANT, "a", token, 30, now)
    _expect(LeaseLostError, lambda: store.append(TENANT, "a", [_event(3)], 2, fence=token))
    store.release_lease(TENANT, "a", stolen)
    row = store.get_task(TENANT, "a")
    assert row is not None and row.lease_owner is None


def test_an_expired_lease_can_be_taken(store: Store) -> None:
    _create(store, "a")
    now = time.time()
    first = store.acquire_lease(TENANT, "a", "w1", 0.01, now)
    second = store.acquire_lease(TENANT, "a", "w2", 30, now + 1)
    assert first is not None and second is not None and second > first


def test_a_task_created_leased_is_held_from_its_first_moment(store: Store) -> None:
    _create(store, "b")
    now = time.time()  # b is due: it was made before now
    held = replace(_row("a"), lease_owner="w1", lease_expires=now + 30, lease_token=1, created_at=now)
    store.create_task(TENANT, held, _event(1))
    row = store.get_task(TENANT, "a")
    assert row is not None and (row.lease_owner, row.lease_expires, row.lease_token) == ("w1", now + 30, 1)
    assert store.acquire_lease(TENANT, "a", "w2", 30, now) is None  # held and alive
    claimed = store.claim(TENANT, "w2", 30, now)
    assert claimed is not None and claimed[0] == "b"  # the held one is not runnable for others
    assert store.claim(TENANT, "w2", 30, now) is None
    store.append(TENANT, "a", [_event(2)], 1, fence=1)
    _expect(LeaseLostError, lambda: store.append(TENANT, "a", [_event(3)], 2, fence=0))
    assert store.renew_lease(TENANT, "a", 1, 30, now)
    store.release_lease(TENANT, "a", 1)
    again = store.claim(TENANT, "w2", 30, now)
    assert again is not None and again[0] == "a" and again[1] > 1


def test_append_streams_honours_the_fence(store: Store) -> None:
    _create(store, "a")
    _create(store, "b")
    token = store.acquire_lease(TENANT, "a", "w1", 30, time.time())
    assert token is not None
    stale = [StreamAppend("b", [_event(2)], 1), StreamAppend("a", [_event(2)], 1, fence=token - 1)]
    _expect(LeaseLostError, partial(store.append_streams, TENANT, stale))
    assert _seqs(store, "a") == [1] and _seqs(store, "b") == [1]
    store.append_streams(TENANT, [StreamAppend("a", [_event(2)], 1, fence=token), StreamAppend("b", [_event(2)], 1)])
    assert [e.fence for e in store.read_events(TENANT, "a")][1:] == [token]
    assert _versions(store, "a", "b") == [2, 2]
