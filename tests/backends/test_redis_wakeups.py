"""Whom a Redis commit wakes. A store waiting for any change wakes on every commit (a reader following
a task: the kit's ``push`` check); one waiting for a claimable task (an idle worker) wakes on the
commits that may make one so, and not on a run's appends under its lease, so that N idle workers
are not each sent, and do not each claim after, every append of every run."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tether
from tests._redis_server import RedisServer
from tether.runtime.worker import Worker
from tether.store import EventRow, IndexUpdate, Store, TaskRow, open_store

TENANT = "default"


@pytest.fixture
def url(server: RedisServer) -> str:
    return f"{server.url}?prefix=wake{uuid.uuid4().hex[:8]}"


@pytest.fixture
def writer(url: str) -> Iterator[Store]:
    store = open_store(url)
    yield store
    store.close()


def _create(store: Store, task_id: str) -> None:
    now = time.time()
    store.create_task(TENANT, TaskRow(task_id, TENANT, "t", "pending", None, None, now, now, 1), _event(1))


def _event(seq: int) -> EventRow:
    return EventRow(seq, "DecisionMade", 1, time.time(), "{}")


def _woken(url: str, commit: Callable[[], object], *, claimable: bool, timeout: float) -> bool:
    """Whether a store of its own, waiting (for a claimable task, or for any change), is woken by
    ``commit``, made from another thread once the wait has begun. The store subscribes after the
    setup's commits, so none of them can wake it."""
    waiter = open_store(url)
    try:
        waiter.wait_for_change(0.001, claimable=claimable)  # subscribed before the wait below begins

        def later() -> None:
            time.sleep(0.2)  # the wait below has begun by then
            commit()

        thread = threading.Thread(target=later)
        thread.start()
        try:
            return waiter.wait_for_change(timeout, claimable=claimable)
        finally:
            thread.join()
    finally:
        waiter.close()


def _created(writer: Store) -> Callable[[], object]:
    return lambda: _create(writer, "a")


def _given_back(writer: Store) -> Callable[[], object]:
    _create(writer, "a")
    claimed = writer.claim(TENANT, "w", 30.0, time.time())
    assert claimed is not None
    return lambda: writer.release_lease(TENANT, "a", claimed[1])


def _answered(writer: Store) -> Callable[[], object]:
    _create(writer, "a")
    claimed = writer.claim(TENANT, "w", 30.0, time.time())
    assert claimed is not None
    writer.append(TENANT, "a", [_event(2)], 1, fence=claimed[1], index=IndexUpdate("awaiting_input"))
    writer.release_lease(TENANT, "a", claimed[1])  # waiting for a person: not due, nothing to claim
    return lambda: writer.append(TENANT, "a", [_event(3)], 2, index=IndexUpdate(None, wake_at=time.time()))


def _unparked(writer: Store) -> Callable[[], object]:
    _create(writer, "a")
    assert writer.park(TENANT, "a", 1, "NonDeterminismError: changed code")
    return lambda: writer.append(TENANT, "a", [_event(2)], 1, index=IndexUpdate("pending"))


@pytest.mark.parametrize("setup", [_created, _given_back, _answered, _unparked])
def test_an_idle_worker_is_woken_by_each_commit_that_makes_a_task_claimable(
    url: str, writer: Store, setup: Callable[[Store], Callable[[], object]]
) -> None:
    commit = setup(writer)
    assert _woken(url, commit, claimable=True, timeout=30.0)  # as soon as it lands: it returns then


def test_a_runs_appends_under_its_lease_wake_followers_and_no_idle_worker(url: str, writer: Store) -> None:
    _create(writer, "a")
    claimed = writer.claim(TENANT, "w", 30.0, time.time())
    assert claimed is not None
    version = 1

    def run_on() -> None:
        nonlocal version
        for status in ("running", None, None):  # as a run begins, then calls recorded
            writer.append(TENANT, "a", [_event(version + 1)], version, fence=claimed[1], index=IndexUpdate(status))
            version += 1

    assert not _woken(url, run_on, claimable=True, timeout=1.5)
    assert _woken(url, run_on, claimable=False, timeout=30.0)  # a reader following the task is told


def test_idle_workers_claim_once_per_task_however_many_appends_it_makes(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three workers, each on a store of its own (its own pub/sub connection, as a worker process
    has), and a task of 30 recorded calls that one of them runs: the others are woken by its
    creation alone, not by its ~30 appends, so the claims all three make for it stay within two
    per worker (one when it was created, one after the run)."""
    apps = [tether.App(url) for _ in range(4)]  # three workers and the app that starts the task
    claims: list[tuple[Any, ...]] = []  # every claim made (list.append: safe from any thread)
    for app in apps:

        @app.tool(readonly=True)
        def look(i: int) -> int:
            return i

        @app.task
        def turn(ctx: tether.TaskContext, calls: int) -> int:
            return sum(ctx.call(look, i) for i in range(calls))

        claim = app.store.claim

        def counted(*args: Any, claim: Callable[..., Any] = claim) -> Any:
            claims.append(args)
            return claim(*args)

        monkeypatch.setattr(app.store, "claim", counted)
    # The poll is longer than the test: a worker runs the task only if its creation woke one.
    workers = [Worker(app.engine, poll=600.0) for app in apps[:3]]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    try:
        for thread in threads:
            thread.start()
        for app in apps[:3]:
            app.store.wait_for_change(0.001, claimable=True)  # each worker's store is subscribed
        while len(claims) < 3:  # each worker's first claim (nothing to take) is made: it waits next
            time.sleep(0.01)
        time.sleep(0.2)
        claims.clear()
        run = apps[3].start(turn, 30)
        deadline = time.monotonic() + 60
        while apps[3].get(run.task_id).status is not tether.Status.COMPLETED:
            assert time.monotonic() < deadline, "no worker was woken to run the task"
            time.sleep(0.01)
        time.sleep(0.5)  # wake-ups the run sent, had it sent any, have reached the idle workers
        assert apps[3].get(run.task_id).output == sum(range(30))
        assert len(claims) <= 2 * len(workers)
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(30)
        for app in apps:
            app.close()
