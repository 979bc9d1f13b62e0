"""A group commit that fails fails for every branch waiting on it.

The records of an async task's parallel branches (and of other tasks' branches, on the commit
thread) are written in one transaction. When that transaction is refused — the store is down —
none of them is durable, so every branch waiting on it must hear the error: a branch woken as if
its record were written would go on with a result the task's record does not hold.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tether

PATIENCE = 30.0  # seconds the held write waits for the tasks' records before saying they never came


@pytest.fixture
def app(store_url: str) -> Iterator[tether.App]:
    app = tether.App(store_url)
    yield app
    app.close()


def _results(events: Any) -> int:
    return sum(1 for e in events if e.type == "CallCompleted")


def _fan_out(app: tether.App, outcomes: dict[str, list[Any]]) -> Any:
    """Task ``fan_out``: five readonly lookups at once (their results are one group commit), what
    each branch got kept in ``outcomes[task_id]``; the first error is raised."""

    @app.tool(readonly=True)
    async def lookup(i: int) -> int:
        return i

    @app.task
    async def fan_out(ctx: tether.AsyncTaskContext) -> list[int]:
        got = await asyncio.gather(*(ctx.call(lookup, i) for i in range(5)), return_exceptions=True)
        outcomes.setdefault(ctx.task_id, []).append(
            [type(o).__name__ if isinstance(o, BaseException) else o for o in got]
        )
        for o in got:
            if isinstance(o, BaseException):
                raise o
        return list(got)

    return fan_out


def test_a_failed_group_commit_on_the_commit_thread_reaches_every_branch(app: tether.App) -> None:
    app.engine.commits.always = True  # a lone run's records go through the commit thread
    outcomes: dict[str, list[Any]] = {}
    fan_out = _fan_out(app, outcomes)
    original = app.store.append
    failing = {"left": 1}

    def append(tenant: str, task_id: str, events: Any, *args: Any, **kwargs: Any) -> Any:
        if _results(events) == 5 and failing["left"]:  # the five branches' results, together
            failing["left"] -= 1
            raise tether.StoreUnavailableError("disk went away")
        return original(tenant, task_id, events, *args, **kwargs)

    app.store.append = append  # type: ignore[method-assign]
    with pytest.raises(tether.StoreUnavailableError):
        asyncio.run(app.run_async(fan_out, task_id="t"))
    assert failing["left"] == 0  # the five results were one transaction
    assert outcomes["t"] == [["StoreUnavailableError"] * 5]  # every branch heard it
    assert app.state("t").calls == ()
    assert asyncio.run(app.resume_async("t")).output == [0, 1, 2, 3, 4]
    assert outcomes["t"][1] == [0, 1, 2, 3, 4]
    assert app.replay("t").clean


def test_a_failed_transaction_of_several_tasks_reaches_every_branch_of_each(app: tether.App) -> None:
    """Two tasks' group commits share one transaction, which fails, and so does each task's
    write on its own: all ten branches hear the error."""
    app.engine.commits.always = True
    outcomes: dict[str, list[Any]] = {}
    loop: list[asyncio.AbstractEventLoop] = []
    entered: list[str] = []
    both_entered, plugged = asyncio.Event(), asyncio.Event()

    @app.tool(readonly=True)
    async def lookup(i: int) -> int:
        return i

    @app.task
    async def fan_out(ctx: tether.AsyncTaskContext) -> list[int]:
        entered.append(ctx.task_id)
        if len(entered) == 2:
            both_entered.set()
        await plugged.wait()  # the commit thread is held: what the two tasks record now waits together
        got = await asyncio.gather(*(ctx.call(lookup, i) for i in range(5)), return_exceptions=True)
        outcomes[ctx.task_id] = [type(o).__name__ if isinstance(o, BaseException) else o for o in got]
        for o in got:
            if isinstance(o, BaseException):
                raise o
        return list(got)

    @app.task
    async def plug(ctx: tether.AsyncTaskContext) -> str:
        return "done"

    # The plug's first record holds the commit thread until both tasks' five results wait behind it,
    # so the thread takes them up together, in one transaction.
    batches: set[str] = set()
    both_queued = threading.Event()
    submit = app.engine.commits.submit

    def counting(recorder: Any, batch: Any) -> None:
        submit(recorder, batch)
        if len(batch) == 5:
            batches.add(recorder.task_id)
            if batches == {"a", "b"}:
                both_queued.set()

    app.engine.commits.submit = counting  # type: ignore[method-assign]
    original_append, original_streams = app.store.append, app.store.append_streams
    refused: list[list[str]] = []  # each refused write: the tasks whose five results it held

    def refuse(parts: list[tuple[str, Any]]) -> None:
        holding = sorted(task_id for task_id, events in parts if _results(events) == 5)
        if holding:
            refused.append(holding)
            raise tether.StoreUnavailableError("disk went away")

    def append(tenant: str, task_id: str, events: Any, *args: Any, **kwargs: Any) -> Any:
        if task_id == "plug" and not plugged.is_set():
            loop[0].call_soon_threadsafe(plugged.set)
            assert both_queued.wait(PATIENCE), "the tasks' results never queued behind the plug"
        refuse([(task_id, events)])
        return original_append(tenant, task_id, events, *args, **kwargs)

    def append_streams(tenant: str, appends: Any) -> Any:
        refuse([(a.task_id, a.events) for a in appends])
        return original_streams(tenant, appends)

    app.store.append = append  # type: ignore[method-assign]
    app.store.append_streams = append_streams  # type: ignore[method-assign]

    async def main() -> list[Any]:
        loop.append(asyncio.get_running_loop())
        runs = asyncio.gather(*(app.run_async(fan_out, task_id=t) for t in ("a", "b")), return_exceptions=True)
        await both_entered.wait()
        done = await app.run_async(plug, task_id="plug")
        return [done, *await runs]

    plug_run, run_a, run_b = asyncio.run(main())
    assert isinstance(plug_run, tether.TaskHandle) and plug_run.output == "done"
    # One transaction held both tasks' results; refused, each task's was tried on its own.
    assert sorted(refused) == [["a"], ["a", "b"], ["b"]], refused
    assert isinstance(run_a, tether.StoreUnavailableError) and isinstance(run_b, tether.StoreUnavailableError)
    assert outcomes == {"a": ["StoreUnavailableError"] * 5, "b": ["StoreUnavailableError"] * 5}
    assert app.state("a").calls == () and app.state("b").calls == ()
