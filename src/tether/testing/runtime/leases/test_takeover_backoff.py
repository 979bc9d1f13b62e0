"""A worker never spins on a task it cannot run: a task whose run stops with an error is held aside
(its lease runs out when its backoff does, doubling per run in a row), and the worker goes on with
the tasks due after it; ``idle_exit`` counts a task held aside as nothing left to run."""
# mypy: disable-error-code="arg-type"

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

import tether
from tether.runtime.worker import Worker
from tether.store import Store, open_store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()


class _Stops(logging.Handler):
    """Counts the worker's "task X stopped" lines, per task."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def of(self, task_id: str) -> list[str]:
        return [line for line in self.lines if f"task {task_id} stopped" in line]


@pytest.fixture
def stops() -> Iterator[_Stops]:
    handler = _Stops()
    logger = logging.getLogger("tether.worker")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _apps(store: Store) -> tuple[tether.App, tether.App]:
    """The app that made the tasks (it knows the ``ghost`` type) and the worker's, which does not."""
    maker, worker = tether.App(store), tether.App(store)
    for app in (maker, worker):

        @app.task(name="plain")
        def plain(ctx: tether.TaskContext, n: int) -> int:
            return n

    @maker.task(name="ghost")
    def ghost(ctx: tether.TaskContext) -> str:
        return "ran where its code is"

    return maker, worker


def _run(worker: Worker, timeout: float) -> float:
    """Run ``worker`` in a thread for at most ``timeout`` seconds (stopped then); how long it ran."""
    started = time.monotonic()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(10)
    return time.monotonic() - started


def test_idle_exit_runs_the_others_and_leaves_a_task_it_cannot_run(store: Store, stops: _Stops) -> None:
    maker, app = _apps(store)
    maker.start("ghost", task_id="ghost")  # the first due, before every other
    for n in range(3):
        maker.start("plain", n, task_id=f"plain-{n}")
    worker = Worker(app, idle_exit=True, poll=0.05)
    worker.backoff = 30.0  # still held aside when the listing below reads it, however slow the machine
    took = _run(worker, 20)
    assert took < 15, f"the worker did not exit when only a task it cannot run was left ({took:.1f}s)"
    assert [app.get(f"plain-{n}").output for n in range(3)] == [0, 1, 2]
    attempts = stops.of("ghost")
    assert len(attempts) == 1, f"{len(attempts)} attempts at a task no run can go on with"
    assert "not claimed again for 30s" in attempts[0] and "'ghost' is not a task of this app" in attempts[0]
    assert worker.runs == 3 + len(attempts)
    # Held aside, not lost: the listing says so, and its own code's app runs it at once (a person's
    # resume is not refused by a backoff, which holds no run).
    [summary] = [s for s in maker.list_tasks() if s.task_id == "ghost"]
    assert summary.held_by is not None and summary.held_by.startswith(app.worker_id)
    assert "a run stopped with an error; claimed again from " in summary.held_by
    assert maker.resume("ghost").output == "ran where its code is"


def test_a_stopped_task_backs_off_exponentially_while_the_others_run(store: Store, stops: _Stops) -> None:
    maker, app = _apps(store)
    maker.start("ghost", task_id="ghost")
    worker = Worker(app, poll=0.02)
    worker.backoff, worker.max_backoff = 0.05, 0.4
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        time.sleep(0.5)  # the ghost in backoff: tasks made now are claimed before it comes due again
        for n in range(20):
            maker.start("plain", n, task_id=f"plain-{n}")
        deadline = time.monotonic() + 15
        while not all(app.get(f"plain-{n}").status is tether.Status.COMPLETED for n in range(20)):
            assert time.monotonic() < deadline, "the worker starved the tasks due after the one it cannot run"
            time.sleep(0.02)
        time.sleep(1.5)
    finally:
        worker.stop()
        thread.join(10)
    attempts = stops.of("ghost")
    # 0.05, 0.1, 0.2, then 0.4 s apart: about 8 attempts in 2.5 s (a worker that spun made thousands).
    assert 3 <= len(attempts) <= 14, f"{len(attempts)} attempts in 2.5 s"
    waits = [float(line.split("not claimed again for ")[1].split("s")[0]) for line in attempts]
    assert waits[:4] == [0.05, 0.1, 0.2, 0.4] and set(waits[4:]) <= {0.4}


def test_a_run_that_goes_through_resets_the_backoff(store: Store, stops: _Stops) -> None:
    # A run that could not go on (the store away, as the task's code says here) twice, then one that
    # goes through to a wait: once answered, the next stop waits the first backoff again.
    app = tether.App(store)
    runs = [0]

    @app.task(name="flaky")
    def flaky(ctx: tether.TaskContext) -> str:
        runs[0] += 1
        if runs[0] in (1, 2, 4):
            raise tether.StoreUnavailableError("the store is away for a moment")
        ctx.wait_for_input("go")
        return "done"

    app.start("flaky", task_id="flaky")
    worker = Worker(app, idle_exit=True, poll=0.02)
    worker.backoff = 0.05
    deadline = time.monotonic() + 15
    while app.get("flaky").status is not tether.Status.AWAITING_INPUT:
        assert time.monotonic() < deadline
        _run(worker, 10)
        time.sleep(0.05)
    app.send_input("flaky", "go", True)
    while app.get("flaky").status is not tether.Status.COMPLETED:
        assert time.monotonic() < deadline
        _run(worker, 10)
        time.sleep(0.05)
    waits = [line.split("not claimed again for ")[1].split(" ")[0] for line in stops.of("flaky")]
    assert (runs[0], waits) == (5, ["0.05s", "0.1s", "0.05s"])
