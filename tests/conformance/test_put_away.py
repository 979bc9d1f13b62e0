"""Once a run stops, the log keeps its task's state with the calls' records put away (read from their
events when asked for, as after a load): an app that has run thousands of tasks keeps none of their
records as objects, which every full collection of the cycle collector would walk, its event loop
stalled meanwhile. The run's handle keeps its records; what is read later is what was kept."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import pytest

import tether
from tether.model import ToolCall


def _live(cls: type) -> int:
    gc.collect()
    return sum(type(o) is cls for o in gc.get_objects())


_AFTER_FETCH: list[Callable[[int], None]] = []  # what a test runs inside each fetch (its last call's, say)
_TOOLS: dict[int, Any] = {}  # each app's async fetch, by the app's id


def _app(url: Any) -> tuple[tether.App, Any, Any]:
    app = tether.App(url)

    @app.tool(name="fetch", readonly=True)
    def fetch(i: int) -> dict[str, Any]:
        for hook in _AFTER_FETCH:
            hook(i)
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

    _TOOLS[id(app)] = afetch

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


def test_an_async_run_reads_no_store_on_its_loop_replaying_what_was_kept(store_url: str) -> None:
    """A resumed async task replays its calls: their records, put away when its first run stopped
    (or never read since a load from a snapshot), are read before its code runs, off its loop."""
    app, _, _ = _app(store_url)
    afetch = _TOOLS[id(app)]

    @app.task(name="await_more")
    async def await_more(ctx: tether.AsyncTaskContext, n: int) -> int:
        total = sum([(await ctx.call(afetch, i))["i"] for i in range(n)])
        return total + await ctx.wait_for_input("more")

    on_loop: list[str] = []
    reads: list[str] = []
    read_events = app.store.read_events

    def counted(tenant: str, task_id: str, **kwargs: Any) -> Any:
        reads.append(task_id)
        try:
            asyncio.get_running_loop()
            on_loop.append(task_id)
        except RuntimeError:
            pass  # off any loop: a thread of its own
        return read_events(tenant, task_id, **kwargs)

    app.store.read_events = counted  # type: ignore[method-assign]
    waiting = asyncio.run(app.run_async(await_more, 40, task_id="w"))
    assert waiting.status is tether.Status.AWAITING_INPUT
    app.send_input("w", "more", 1000)
    reads.clear()
    done = asyncio.run(app.resume_async("w"))
    assert done.output == sum(range(40)) + 1000
    assert on_loop == []
    assert reads == ["w"]  # its record, read once: the calls are folded from it, not read again
    assert [c.result["i"] for c in done.state.calls] == list(range(40))
    app.close()


def test_a_store_that_fails_at_the_end_of_a_run_leaves_the_records_and_lets_the_task_go(store_url: str) -> None:
    """Putting a worker's records away reads the task's row once: a store that fails then leaves
    them where they are, and the run's end goes on (its lease released, nothing raised)."""
    if store_url.startswith("memory"):
        pytest.skip("a memory store does not fail")
    made = _app(store_url)
    made[0].run(made[1], 2, ask=True, task_id="w")
    made[0].send_input("w", "more", 5)
    app = _app(store_url)[0]  # a worker: it reads the task first when it claims it
    failing = {"on": False}
    get_task = app.store.get_task

    def flaky(tenant: str, task_id: str) -> Any:
        if failing["on"]:
            raise tether.StoreUnavailableError("the connection was reset")
        return get_task(tenant, task_id)

    app.store.get_task = flaky  # type: ignore[method-assign]

    def last_call(i: int) -> None:
        failing["on"] = i == 10  # from the run's last call on, until its end: the store fails

    _AFTER_FETCH.append(last_call)
    try:
        assert app.run_worker(idle_exit=True, poll=0.05) == 1
    finally:
        _AFTER_FETCH.clear()
        failing["on"] = False
    row = app.store.get_task(app.tenant, "w")
    assert row is not None and row.lease_owner is None  # let go: another worker may run it
    assert row.status == "completed"
    assert [c.result["i"] for c in app.state("w").calls] == [0, 1, 10]
    made[0].close()
    app.close()


def test_a_worker_reads_a_task_rewound_elsewhere_after_its_run_as_it_now_stands(store_url: str) -> None:
    """What a worker's log put away is pinned to the stream it ran; the next load sees that another
    process rewound the task since, and reads it again, even at the same version."""
    if store_url.startswith("memory"):
        pytest.skip("a memory store is one process's: nothing else rewinds its tasks")
    maker, gather, _ = _app(store_url)
    maker.run(gather, 2, ask=True, task_id="w")
    maker.send_input("w", "more", 5)
    worker = _app(store_url)[0]
    assert worker.run_worker(idle_exit=True, poll=0.05) == 1  # it reads the task first when it claims it
    version = maker.state("w").version
    maker.rewind("w", to=version - 1)  # another stream under the id, at the same version
    again = worker.state("w")
    assert again.version == version and again == maker.state("w")
    assert [c.result["i"] for c in again.calls] == [c.result["i"] for c in maker.state("w").calls]
    maker.close()
    worker.close()


def test_an_async_run_of_a_task_loaded_from_snapshots_reads_no_store_on_its_loop(store_url: str) -> None:
    """The same for a task another app wrote with snapshots every few events: what this app loads
    from them (a prefix of calls read by page, heads) is read before the code runs, off its loop."""
    if store_url.startswith("memory"):
        pytest.skip("one memory store per app here: the other app's tasks are not this one's")
    maker = tether.App(store_url, snapshots=tether.SnapshotPolicy(every=5, size_ratio=0))
    maker.tool(name="afetch", readonly=True)(_afetch)
    maker.task(name="await_more")(_await_more)
    assert asyncio.run(maker.run_async(_await_more, 30, task_id="s")).status is tether.Status.AWAITING_INPUT
    maker.send_input("s", "more", 7)
    app = tether.App(store_url)
    app.tool(name="afetch", readonly=True)(_afetch)
    app.task(name="await_more")(_await_more)
    on_loop: list[str] = []
    read_events = app.store.read_events

    def counted(tenant: str, task_id: str, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(task_id)
        except RuntimeError:
            pass
        return read_events(tenant, task_id, **kwargs)

    app.store.read_events = counted  # type: ignore[method-assign]
    done = asyncio.run(app.resume_async("s"))
    assert done.output == sum(range(30)) + 7 and on_loop == []
    maker.close()
    app.close()


async def _afetch(i: int) -> dict[str, Any]:
    return {"i": i, "text": "a" * 500}


async def _await_more(ctx: tether.AsyncTaskContext, n: int) -> int:
    total = sum([(await ctx.call(_afetch, i))["i"] for i in range(n)])
    return total + await ctx.wait_for_input("more")
