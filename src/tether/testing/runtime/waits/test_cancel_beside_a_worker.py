"""app.cancel of a task a live run holds (a worker woken by the request) leaves the cancel to that run:
the compensations run once, under one key, and app.cancel returns the cancelled task."""

from __future__ import annotations

import threading

import tether


def test_cancel_waits_for_the_run_that_holds_the_task_instead_of_taking_its_lease(store_url: str) -> None:
    app = tether.App(store_url, lease_ttl=5)
    undone: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    @app.tool
    def hold(seat: str) -> str:
        return seat

    @app.tool
    def unhold(seat: str) -> None:
        holding.set()
        release.wait(5)  # the holder is still compensating when app.cancel asks
        undone.append(tether.current_call().key)

    @app.task
    def book(ctx: tether.TaskContext) -> str:
        ctx.call(hold, "12A", compensate=unhold)
        return str(ctx.wait_for_input("go"))

    app.run(book, task_id="b")
    worker = threading.Thread(target=app.run_worker, kwargs={"idle_exit": True, "poll": 0.01})
    app.request_cancel("b", "changed plans")
    worker.start()
    assert holding.wait(10)  # the worker runs the compensation now, holding the lease
    cancelling = threading.Thread(target=lambda: results.append(app.cancel("b", "changed plans")))
    results: list[tether.TaskHandle] = []
    cancelling.start()
    release.set()
    cancelling.join(20)
    worker.join(20)
    assert [r.status for r in results] == [tether.Status.CANCELLED]
    assert len(undone) == 1  # once, by the run that held the task
