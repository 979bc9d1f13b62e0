"""Listing: filters, paging, newest first, and never another tenant's task."""

from __future__ import annotations

import time

import pytest

import tether
from tether.events import StatusChanged


def test_filters_and_paging(store_url: str) -> None:
    log = tether.TaskLog(store_url)
    made = []
    for i in range(7):
        state = log.create(type="trip" if i % 2 else "chat", user_id=f"u{i % 3}", session_id=f"s{i % 2}")
        made.append(state.task_id)
        time.sleep(0.002)
    log.append(made[0], [StatusChanged(status="running")], 1)
    assert [r.task_id for r in log.list()] == made[::-1]
    assert [r.task_id for r in log.list(limit=3, offset=2)] == made[::-1][2:5]
    assert {r.task_id for r in log.list(type="trip")} == set(made[1::2])
    assert {r.task_id for r in log.list(user_id="u0")} == {made[0], made[3], made[6]}
    assert {r.task_id for r in log.list(session_id="s1")} == set(made[1::2])
    assert [r.task_id for r in log.list(status="running")] == [made[0]]
    assert len(log.list(status=["pending", tether.Status.RUNNING])) == 7
    middle = log.get(made[3]).created_at
    assert {r.task_id for r in log.list(created_after=middle)} == set(made[3:])
    assert {r.task_id for r in log.list(created_before=middle)} == set(made[:3])
    row = log.get(made[0])
    assert (row.status, row.version, row.type) == ("running", 2, "chat")


def test_bad_filters(store_url: str) -> None:
    log = tether.TaskLog(store_url)
    with pytest.raises(tether.InvalidInputError, match="unknown status"):
        log.list(status="done")
    with pytest.raises(tether.InvalidInputError):
        log.list(limit=0)


def test_tenants_never_see_each_other(store_url: str) -> None:
    store = tether.open_store(store_url)
    acme = tether.TaskLog(store, tenant="acme")
    globex = tether.TaskLog(store, tenant="globex")
    a = acme.create(type="trip", task_id="shared-id", user_id="u1")
    g = globex.create(type="trip", task_id="shared-id", user_id="u1")
    acme.append("shared-id", [StatusChanged(status="running")], 1)
    assert a.tenant == "acme" and g.tenant == "globex"
    assert [r.tenant for r in acme.list()] == ["acme"]
    assert [r.tenant for r in globex.list(user_id="u1")] == ["globex"]
    assert globex.load("shared-id").status is tether.Status.PENDING
    only_acme = acme.create(type="trip")
    with pytest.raises(tether.TaskNotFoundError):
        globex.load(only_acme.task_id)
    with pytest.raises(tether.TaskNotFoundError):
        globex.append(only_acme.task_id, [StatusChanged(status="running")], 1)
    assert store.ledger_get("globex", "k") is None
