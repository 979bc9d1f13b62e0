"""A worker's liveness records: one when it starts, one per heartbeat from its main thread (never one
per poll), one when it stops (a signal, ``idle_exit``); and how readers word them
(:mod:`tether.runtime.liveness`). The real-process side (SIGKILL, SIGTERM) is tests/crash/test_worker_liveness.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tether
from tether.errors import ConfigurationError
from tether.runtime.liveness import ALIVE_WITHIN, Liveness, liveness, needs_worker
from tether.runtime.worker import Worker
from tether.store import WorkerRow


class _Recorded:
    """The store's liveness records as the worker wrote them, and how often it waited for work."""

    def __init__(self, app: tether.App, monkeypatch: pytest.MonkeyPatch) -> None:
        self.records: list[WorkerRow] = []
        self.polls = 0
        store = app.store
        record, wait = store.record_worker, store.wait_for_change

        def recording(tenant: str, worker: WorkerRow) -> None:
            self.records.append(worker)
            record(tenant, worker)

        def waiting(*args: Any, **kw: Any) -> Any:
            self.polls += 1
            return wait(*args, **kw)

        monkeypatch.setattr(store, "record_worker", recording)
        monkeypatch.setattr(store, "wait_for_change", waiting)


@pytest.fixture
def app() -> Iterator[tether.App]:
    with tether.App("memory://") as app:

        @app.task
        def echo(ctx: tether.TaskContext, n: int) -> int:
            return n

        yield app


def _running(worker: Worker, until: Callable[[], bool]) -> None:
    """Run ``worker`` in a thread until ``until()`` holds, then stop it and wait for its end."""
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    try:
        while not until():
            assert time.monotonic() < deadline, "the worker never got there"
            time.sleep(0.005)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_an_idle_workers_polls_write_no_record(app: tether.App, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _Recorded(app, monkeypatch)
    worker = Worker(app.engine, poll=0.001, target="agents:app")
    _running(worker, until=lambda: seen.polls >= 50)
    assert [r.stopped_at is not None for r in seen.records] == [False, True]  # its start and its stop
    start, stop = seen.records
    assert (start.worker_id, start.app, stop.app) == (app.worker_id, "agents:app", "agents:app")
    assert stop.started_at == start.started_at and stop.seen_at == stop.stopped_at


def test_a_running_worker_says_it_is_alive_every_heartbeat(app: tether.App, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _Recorded(app, monkeypatch)
    worker = Worker(app.engine, poll=10.0, heartbeat=0.001)  # its polls are rare: the beats are the main thread's
    _running(worker, until=lambda: len(seen.records) >= 5)
    beats = seen.records[:-1]
    assert all(r.stopped_at is None for r in beats) and seen.records[-1].stopped_at is not None
    assert [r.seen_at for r in seen.records] == sorted(r.seen_at for r in seen.records)
    assert seen.polls <= 2  # the beats did not come from the poll loop
    [row] = app.store.workers(app.tenant)
    assert row == seen.records[-1]  # one record per worker, its newest


def test_idle_exit_writes_the_stop_record(app: tether.App, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _Recorded(app, monkeypatch)
    app.start("echo", 1)
    assert app.run_worker(idle_exit=True, target="agents:app") == 1
    [row] = app.store.workers(app.tenant)
    assert row.stopped_at is not None and row.app == "agents:app"
    assert len(seen.records) == 2
    words = liveness(app.store, app.tenant, row.seen_at + 5)
    assert (words.alive, words.note()) == (
        0,
        "no worker is running: the last one stopped 5 s ago: run `tether worker agents:app`",
    )


def test_a_heartbeat_longer_than_readers_wait_is_refused(app: tether.App) -> None:
    with pytest.raises(ConfigurationError, match=r"heartbeat must be more than 0 and at most 30 seconds.*got 31"):
        app.run_worker(heartbeat=31)
    with pytest.raises(ConfigurationError, match="got 0"):
        app.run_worker(heartbeat=0)


def test_a_worker_whose_store_refuses_its_record_still_runs_tasks(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(tenant: str, worker: WorkerRow) -> None:
        raise tether.TetherError("the store is read-only")

    monkeypatch.setattr(app.store, "record_worker", refuse)
    task = app.start("echo", 7).task_id
    assert app.run_worker(idle_exit=True) == 1 and app.get(task).output == 7


def test_readers_count_alive_within_the_window_and_say_how_to_start_one(app: tether.App) -> None:
    store, tenant, now = app.store, app.tenant, time.time()
    assert liveness(store, tenant, now).note() == "no worker has run on this store yet: run `tether worker module:app`"
    store.record_worker(tenant, WorkerRow("h:1:a", now - 100, now - 10, app="support:app"))
    assert liveness(store, tenant, now).alive == 1
    assert liveness(store, tenant, now, within=5).alive == 0  # the window is the reader's to choose
    gone = liveness(store, tenant, now + ALIVE_WITHIN)
    assert gone.note() == "no worker has been seen for 2 min: run `tether worker support:app`"
    store.record_worker("another", WorkerRow("h:2:b", now, now))
    assert liveness(store, "another", now).alive == 1 and liveness(store, tenant, now + ALIVE_WITHIN).alive == 0
    assert Liveness(2, None, now).note() is None


def test_a_task_needs_a_worker_when_a_claim_may_take_it(app: tether.App) -> None:
    @app.task
    def ask(ctx: tether.TaskContext) -> str:
        return str(ctx.wait_for_input("go"))

    now = time.time()
    pending = app.start("echo", 1).task_id
    asked = app.run("ask").task_id
    assert needs_worker(app.log.get(pending), now + 1)
    assert not needs_worker(app.log.get(asked), now + 1)  # it waits for a person, not a worker
    app.send_input(asked, "go", True)
    assert needs_worker(app.log.get(asked), time.time() + 1)  # answered: a worker continues it
    app.run_worker(idle_exit=True)
    assert not needs_worker(app.log.get(pending), time.time() + 1)  # finished
    held = app.start("echo", 2).task_id
    assert app.store.acquire_lease(app.tenant, held, "h:3:c", 60.0, time.time()) is not None
    assert not needs_worker(app.log.get(held), time.time())  # a run holds it
