"""``Store.lease_holders``: the owners of live leases on due tasks, by a prefix of their names (a
host's), each with a task it holds — what a worker reads to take over at once what a dead process on
its host held."""

from __future__ import annotations

import time
from dataclasses import replace

from tether.store import EventRow, Store, TaskRow

TENANT = "default"
_EVENT = EventRow(1, "DecisionMade", 1, time.time(), "{}")


def _task(
    store: Store,
    task_id: str,
    owner: str | None,
    *,
    status: str = "running",
    expires: float | None = 30.0,
    wake: float | None = None,
    type: str = "job",
    tenant: str = TENANT,
) -> None:
    now = time.time()
    row = TaskRow(task_id, tenant, type, status, None, None, now - 60, now, 1, wake_at=wake)
    if owner is not None:
        row = replace(row, lease_owner=owner, lease_expires=None if expires is None else now + expires, lease_token=1)
    store.create_task(tenant, row, _EVENT)


def test_each_owner_on_the_host_with_a_task_it_holds(store: Store) -> None:
    now = time.time()
    _task(store, "a1", "here:1:a")
    _task(store, "a2", "here:1:a")  # a second task of the same owner: one row for the owner
    _task(store, "b", "here:2:b", status="pending")
    _task(store, "forever", "here:3:c", expires=None)  # an owner and no expiry: held
    _task(store, "woken", "here:4:d", status="sleeping", wake=now - 1)
    _task(store, "answered", "here:5:e", status="awaiting_input", wake=now - 1)
    _task(store, "there", "there:1:a")  # another host's
    _task(store, "hereafter", "hereafter:1:a")  # a host whose name starts with this one's
    _task(store, "expired", "here:6:f", expires=-3600)  # a claim takes it anyway (expired before `now`)
    _task(store, "done", "here:7:g", status="completed")  # finished: nothing to take over
    _task(store, "later", "here:8:h", status="sleeping", wake=now + 3600)  # not due: a claim would not take it
    _task(store, "waiting", "here:9:i", status="awaiting_input")  # waits for an answer, no timeout
    _task(store, "session", "here:10:j", type="tether.session")  # tether's own stream, never run
    _task(store, "free", None)
    _task(store, "theirs", "here:11:k", tenant="another")
    holders = sorted(store.lease_holders(TENANT, "here:", now))
    assert [owner for owner, _ in holders] == ["here:1:a", "here:2:b", "here:3:c", "here:4:d", "here:5:e"]
    assert dict(holders) == {
        "here:1:a": "a1",
        "here:2:b": "b",
        "here:3:c": "forever",
        "here:4:d": "woken",
        "here:5:e": "answered",
    }
    assert store.lease_holders(TENANT, "nowhere:", now) == []
    assert sorted(store.lease_holders("another", "here:", now)) == [("here:11:k", "theirs")]


def test_a_stolen_lease_leaves_its_dead_owner(store: Store) -> None:
    now = time.time()
    _task(store, "a", "here:1:dead")
    _task(store, "b", "here:1:dead")
    [(owner, first)] = store.lease_holders(TENANT, "here:", now)
    token = store.acquire_lease(TENANT, first, "here:2:alive", 30, now, steal_from=owner)
    assert token == 2
    holders = dict(store.lease_holders(TENANT, "here:", now))
    assert holders == {"here:1:dead": "b" if first == "a" else "a", "here:2:alive": first}
    assert store.acquire_lease(TENANT, first, "here:3:late", 30, now, steal_from=owner) is None  # taken once
