"""Once a run stops, the log keeps its task's state with the calls' records put away (read from their
events when asked for, as after a load): an app that has run thousands of tasks keeps none of their
records as objects, which every full collection of the cycle collector would walk, its event loop
stalled meanwhile. The run's handle keeps its records; what is read later is what was kept."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

import tether
from tether.model import ToolCall


def _live(cls: type) -> int:
    gc.collect()
    return sum(type(o) is cls for o in gc.get_objects())


def _app(url: Any) -> tuple[tether.App, Any, Any]:
    app = tether.App(url)

    @app.tool(name="fetch", readonly=True)
    def fetch(i: int) -> dict[str, Any]:
        return {"i": i, "text": "r" * 500}

    @app.task(name="gather")
    def gather(ctx: tether.TaskContext, n: int, ask: bool = False) -> int:
        total = sum(ctx.call(fetch, i)["i"] for i in range(n))
        if ask:
            total += ctx.wait_for_input("more")
            total += ctx.call(fetch, 10)["i"]
        return total

    @app.tool(name="afetch", readonly=True)
    async def afetch(i: int) -> dict[str, Any]:
        return {"i": i, "text": "a" * 500}

    @app.task(name="agather")
    async def agather(ctx: tether.AsyncTaskContext, n: int) -> int:
        return sum([(await ctx.call(afetch, i))["i"] for i in range(n)])

    return app, gather, agather


def _reads(app: tether.App) -> list[str]:
    """The tasks whose events the app's store reads from now on."""
    reads: list[str] = []
    read_events = app.store.read_events

    def counted(tenant: str, task_id: str, **kwargs: Any) -> Any:
        reads.append(task_id)
        return read_events(tenant, task_id, **kwargs)

    app.store.read_events = counted  # type: ignore[method-assign]
    return reads


def test_the_tasks_an_app_ran_keep_no_call_records_in_memory(store_url: str) -> None:
    app, gather, agather = _app(store_url)
    before = _live(ToolCall)
    for i in range(30):
        app.run(gather, 3, task_id=f"sync-{i}")

    async def many() -> None:
        await asyncio.gather(*(app.run_async(agather, 3, task_id=f"async-{i}") for i in range(30)))

    asyncio.run(many())
    assert app.log._memory.held[0] >= 60  # every task is remembered (the budget admits them all)
    assert _live(ToolCall) - before <= 3  # but none of their 180 calls' records is kept
    app.close()


def test_a_handle_keeps_its_records_and_a_later_read_gives_the_same(store_url: str) -> None:
    app, gather, agather = _app(store_url)
    handle = app.run(gather, 4, task_id="t")
    ahandle = asyncio.run(app.run_async(agather, 4, task_id="a"))
    reads = _reads(app)
    assert [c.result["i"] for c in handle.state.calls] == [0, 1, 2, 3]
    assert [c.result["text"] for c in ahandle.state.calls] == ["a" * 500] * 4
    assert reads == []  # the handles' records are theirs: reading them reads no store
    for task_id, ran in (("t", handle), ("a", ahandle)):
        kept = app.state(task_id)
        assert kept.calls == ran.state.calls and kept == ran.state
        assert reads.count(task_id) == 1  # read back from the task's events, a page at once
    app.close()


def test_a_task_put_away_while_it_waits_goes_on_from_what_was_kept(store_url: str) -> None:
    app, gather, _ = _app(store_url)
    waiting = app.run(gather, 3, ask=True, task_id="w")
    assert waiting.status is tether.Status.AWAITING_INPUT
    app.send_input("w", "more", 100)
    done = app.resume("w")  # replayed from the kept state, its calls read back from their events
    assert done.output == 0 + 1 + 2 + 100 + 10
    assert [c.result["i"] for c in app.state("w").calls] == [0, 1, 2, 10]
    assert [c.status for c in done.state.calls] == ["completed"] * 4
    app.close()


def test_a_kept_state_read_after_its_task_was_replaced_elsewhere_says_so(store_url: str) -> None:
    if store_url.startswith("memory"):
        pytest.skip("a memory store is one process's: nothing else replaces its tasks")
    app, gather, _ = _app(store_url)
    app.run(gather, 2, task_id="t")
    kept = app.state("t")  # its records put away, not read yet
    other = _app(store_url)[0]
    other.rewind("t", to=3)  # another stream under the same id: the first call's, and no more
    with pytest.raises(tether.TetherError, match="rewound or deleted"):
        kept.calls[0]
    assert len(app.state("t").calls) == 1  # loaded again: the new one
    app.close()
    other.close()


def test_a_task_another_app_made_is_put_away_when_a_run_here_stops(store_url: str) -> None:
    """A worker runs tasks made elsewhere: what its log loaded, it has never checked against the
    task's row, and pins the calls it puts away to the stream as it stands."""
    where: Any = tether.open_store(store_url) if store_url.startswith("memory") else store_url
    (first, made_there, _), (app, _, _) = _app(where), _app(where)
    first.run(made_there, 2, ask=True, task_id="w")  # waits, made by the other app
    first.send_input("w", "more", 5)
    before = _live(ToolCall)
    done = app.resume("w")
    assert done.output == 0 + 1 + 5 + 10
    del done
    assert _live(ToolCall) - before <= 0  # the run here kept none of its 3 records
    assert [c.result["i"] for c in app.state("w").calls] == [0, 1, 10]
    first.close()
    app.close()
