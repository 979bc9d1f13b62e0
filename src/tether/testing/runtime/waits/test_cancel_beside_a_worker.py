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


def test_a_task_that_cancels_itself_from_a_tool_is_cancelled_at_its_next_step(store_url: str) -> None:
    """``app.cancel`` from inside one of the task's own calls records the request and returns: the run
    is that very holder, inside the call, and meets the request at its next write. (Waiting for the
    holder to carry it out, the cancel waited on itself for twice the lease, then raised
    TaskBusyError into the tool.)"""
    app = tether.App(store_url, lease_ttl=1)
    undone: list[str] = []
    asked: list[tether.TaskHandle] = []

    @app.tool
    def refund(order: str) -> str:
        undone.append(order)
        return order

    @app.tool(compensate=refund)
    def charge(order: str) -> str:
        asked.append(app.cancel(tether.current_call().task_id, "the customer left"))
        return order

    @app.task
    def checkout(ctx: tether.TaskContext) -> str:
        ctx.call(charge, "o-1")
        ctx.call(charge, "o-2")
        return "paid"

    handle = app.run(checkout, task_id="c")
    assert [h.status for h in asked] == [tether.Status.RUNNING]  # the request, recorded; the run goes on
    assert handle.status is tether.Status.CANCELLED and undone == ["o-1"]  # its call kept, then undone
    assert [(c.tool, c.status) for c in app.state("c").calls] == [("charge", "completed"), ("refund", "completed")]
