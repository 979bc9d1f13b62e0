"""The idempotency ledger and task leases, at the store level."""

from __future__ import annotations

import pytest

import tether
from tether.events import OutputSet


def test_ledger_lifecycle(store_url: str) -> None:
    store = tether.open_store(store_url)
    assert store.ledger_get("t", "k1") is None
    first = store.ledger_begin("t", "k1", 1.0)
    assert first.status == "new"
    again = store.ledger_begin("t", "k1", 2.0)
    assert (again.status, again.runs) == ("started", 1)
    done = store.ledger_finish("t", "k1", '{"id": 7}', 3.0)
    assert (done.status, done.result, done.runs) == ("done", '{"id": 7}', 2)
    # A second result never overwrites the first: the first recorded outcome stands.
    assert store.ledger_finish("t", "k1", '{"id": 8}', 4.0).result == '{"id": 7}'
    assert store.ledger_begin("t", "k1", 5.0).status == "done"
    assert store.ledger_get("other-tenant", "k1") is None
    store.ledger_forget("t", "k1")
    assert store.ledger_get("t", "k1") is None


def test_leases_and_fencing(store_url: str) -> None:
    log = tether.TaskLog(store_url)
    store = log.store
    state = log.create(type="trip")
    token = store.acquire_lease(log.tenant, state.task_id, "w1", 10.0, 100.0)
    assert token == 1
    assert store.acquire_lease(log.tenant, state.task_id, "w2", 10.0, 105.0) is None  # still held
    assert store.renew_lease(log.tenant, state.task_id, token, 10.0, 108.0)
    row = log.get(state.task_id)
    assert (row.lease_owner, row.lease_expires, row.lease_token) == ("w1", 118.0, 1)
    log.append(state.task_id, [OutputSet(output="by w1")], 1, fence=token)
    stolen = store.acquire_lease(log.tenant, state.task_id, "w2", 10.0, 119.0)  # expired: taken over
    assert stolen == 2
    assert not store.renew_lease(log.tenant, state.task_id, token, 10.0, 120.0)
    with pytest.raises(tether.LeaseLostError) as info:
        log.append(state.task_id, [OutputSet(output="late w1")], 2, fence=token)
    assert (info.value.token, info.value.current_token) == (1, 2)
    assert (info.value.expected, info.value.actual) == (None, None)  # no version was compared
    assert isinstance(info.value, tether.ConflictError)
    log.append(state.task_id, [OutputSet(output="by w2")], 2, fence=stolen)
    assert log.load(state.task_id).output == "by w2"
    store.release_lease(log.tenant, state.task_id, token)  # stale release does nothing
    assert log.get(state.task_id).lease_owner == "w2"
    store.release_lease(log.tenant, state.task_id, stolen)
    assert log.get(state.task_id).lease_owner is None
    assert store.acquire_lease(log.tenant, state.task_id, "w3", 10.0, 121.0) == 3


def test_a_lease_on_a_task_that_is_not_there_is_refused_by_name(store_url: str) -> None:
    """Taking, renewing or releasing the lease of a task nobody created says so (TaskNotFoundError), as
    it does for a task of another tenant, on every backend; a held lease still just says no."""
    log = tether.TaskLog(store_url)
    store = log.store
    other = log.create(type="trip").task_id
    for tenant, task_id in [(log.tenant, "nobody"), ("another-tenant", other)]:
        with pytest.raises(tether.TaskNotFoundError):
            store.acquire_lease(tenant, task_id, "w1", 10.0, 100.0)
        with pytest.raises(tether.TaskNotFoundError):
            store.renew_lease(tenant, task_id, 1, 10.0, 100.0)
        with pytest.raises(tether.TaskNotFoundError):
            store.release_lease(tenant, task_id, 1)
    token = store.acquire_lease(log.tenant, other, "w1", 10.0, 100.0)
    assert token is not None and store.acquire_lease(log.tenant, other, "w2", 10.0, 100.0) is None
    assert log.get(other).lease_owner == "w1"
