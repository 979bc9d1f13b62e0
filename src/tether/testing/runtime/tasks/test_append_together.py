"""Appends across tasks (``TaskLog.append_together``): one transaction, every task's events checked and
staged as a single append's are, before anything is written."""

from __future__ import annotations

import threading

import pytest

import tether
from tether.events import ObservationRecorded, PlanSet, StatusChanged
from tether.store import EventRow, StreamAppend, TaskRow, open_store
from tether.testing import dump_database, opens_share


@pytest.fixture
def log(store_url: str) -> tether.TaskLog:
    return tether.TaskLog(store_url)


def test_every_task_moves_on(log: tether.TaskLog, store_url: str) -> None:
    a, b = log.create(type="trip"), log.create(type="trip")
    versions = log.append_together(
        [
            (a.task_id, [PlanSet(steps=["x"]), StatusChanged(status="running")], 1),
            (b.task_id, [ObservationRecorded(key="k", value=1, source="s")], 1),
        ]
    )
    assert versions == [3, 2]
    assert log.load(a.task_id).status == tether.Status.RUNNING  # folded from what was remembered
    assert log.get(a.task_id).status == "running"  # the index row moved with it
    assert log.load(b.task_id).observations["k"].value == 1
    fresh = tether.TaskLog(log.store)  # and from the store
    assert (fresh.load(a.task_id).version, fresh.load(b.task_id).version) == (3, 2)


@pytest.mark.tether_requires("dump")
@pytest.mark.parametrize(
    "second",
    [
        [StatusChanged(status="completed")],  # pending -> completed: an illegal move, refused by the fold
        [object()],  # not an event
    ],
    ids=["illegal-transition", "not-an-event"],
)
def test_a_refused_event_on_one_task_writes_nothing_on_any(
    log: tether.TaskLog, store_url: str, second: list[object]
) -> None:
    a, b = log.create(type="trip"), log.create(type="trip")
    before = dump_database(store_url, log.store)
    with pytest.raises((tether.InvalidTransition, tether.InvalidInputError)):
        log.append_together([(a.task_id, [PlanSet(steps=["x"])], 1), (b.task_id, second, 1)])  # type: ignore[list-item]
    assert dump_database(store_url, log.store) == before
    assert (log.load(a.task_id).version, log.load(b.task_id).version) == (1, 1)


@pytest.mark.tether_requires("dump")
def test_a_stale_version_on_one_task_writes_nothing_on_any(log: tether.TaskLog, store_url: str) -> None:
    a, b = log.create(type="trip"), log.create(type="trip")
    log.append(b.task_id, [PlanSet(steps=["y"])], 1)
    before = dump_database(store_url, log.store)
    other = tether.TaskLog(log.store)  # a writer that still thinks b is at 1 and reads it fresh
    with pytest.raises(tether.ConflictError):
        other.append_together([(a.task_id, [PlanSet(steps=["x"])], 1), (b.task_id, [PlanSet(steps=["z"])], 1)])
    assert dump_database(store_url, log.store) == before
    assert [s.name for s in log.load(a.task_id).plan] == []
    # A second writer that got in first: the log's memory said version 1, the store says otherwise.
    log.append(a.task_id, [PlanSet(steps=["x"])], 1)
    with pytest.raises(tether.ConflictError):
        other.append_together([(b.task_id, [PlanSet(steps=["z"])], 2), (a.task_id, [PlanSet(steps=["w"])], 1)])
    assert [s.name for s in log.load(b.task_id).plan] == ["y"]


@pytest.mark.tether_requires("dump")
def test_a_stale_fence_on_one_task_writes_nothing_on_any(log: tether.TaskLog, store_url: str) -> None:
    a, b = log.create(type="trip"), log.create(type="trip")
    token = log.store.acquire_lease(log.tenant, a.task_id, "w1", 30, 0.0)
    assert token is not None
    before = dump_database(store_url, log.store)
    with pytest.raises(tether.LeaseLostError):
        log.append_together(
            [(b.task_id, [PlanSet(steps=["y"])], 1), (a.task_id, [PlanSet(steps=["x"])], 1)],
            fences={a.task_id: token + 1},
        )
    assert dump_database(store_url, log.store) == before
    log.append_together([(a.task_id, [PlanSet(steps=["x"])], 1)], fences={a.task_id: token})
    assert log.load(a.task_id).version == 2


def test_a_task_named_twice_is_refused(log: tether.TaskLog) -> None:
    a = log.create(type="trip")
    with pytest.raises(tether.InvalidInputError):
        log.append_together([(a.task_id, [PlanSet(steps=["x"])], 1), (a.task_id, [PlanSet(steps=["y"])], 2)])
    assert log.load(a.task_id).version == 1


def test_racing_appends_across_the_same_streams_land_whole_or_not_at_all(store_url: str) -> None:
    """Two threads append to the same two streams together, in opposite orders: each append lands on
    both or on neither (ConflictError), and none fails any other way (no deadlock on PostgreSQL)."""
    store = open_store(store_url)
    now = 0.0
    for name in ("a", "b"):
        store.create_task("t", TaskRow(name, "t", "x", "open", None, None, now, now, 1), EventRow(1, "E", 1, now, "{}"))
    failures: list[BaseException] = []
    landed = [0, 0]

    def writer(k: int, order: tuple[str, str]) -> None:
        other = open_store(store_url) if opens_share(store_url) else store
        for _ in range(40):
            versions = {n: other.get_task("t", n).version for n in order}  # type: ignore[union-attr]
            parts = [StreamAppend(n, [EventRow(versions[n] + 1, "E", 1, now, "{}")], versions[n]) for n in order]
            try:
                other.append_streams("t", parts)
                landed[k] += 1
            except tether.ConflictError:
                pass
            except BaseException as exc:  # any other failure is the test's finding
                failures.append(exc)
        if other is not store:
            other.close()

    threads = [threading.Thread(target=writer, args=(k, order)) for k, order in enumerate([("a", "b"), ("b", "a")])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    versions = [store.get_task("t", n).version for n in ("a", "b")]  # type: ignore[union-attr]
    assert versions[0] == versions[1] == 1 + sum(landed), (versions, landed)
    store.close()
