"""Async tasks do their store I/O off the event loop, and share transactions across tasks.

The proofs use no clock: the store is wrapped so that a write waits for the event loop to let
it go. Were the write made on the loop's own thread, the loop could not run the coroutine that
lets it go, and the write would give up waiting (the test fails, it does not hang).
"""
# mypy: disable-error-code="unused-ignore"

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

import tether
from tether.store import open_store

GIVE_UP = 20.0  # seconds a held write waits before saying the loop never let it go


class HeldStore:
    """A store whose writes of records wait, while ``holding``, until the event loop lets them go."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.url = inner.url
        self.holding = False
        self.entered = threading.Event()
        self.go = threading.Event()
        self.let_go_by_loop = 0
        self.streams_per_write: list[int] = []
        self.types_per_write: list[list[list[str]]] = []  # each write's streams, each stream's event types

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _hold(self) -> None:
        if not self.holding or (threading.current_thread() is threading.main_thread() and _loop_running()):
            # A write on the loop's thread: it would wait for a loop that cannot run.
            assert not self.holding, "a record was written on the event loop's thread"
            return
        self.entered.set()
        assert self.go.wait(GIVE_UP), "the event loop never let the write go: it was blocked"
        self.go.clear()
        self.let_go_by_loop += 1

    def append(self, *args: Any, **kwargs: Any) -> None:
        self._hold()
        self.streams_per_write.append(1)
        self._inner.append(*args, **kwargs)

    def append_streams(self, tenant: str, appends: Any) -> None:
        self._hold()
        self.streams_per_write.append(len(appends))
        self.types_per_write.append([[e.type for e in a.events] for a in appends])
        self._inner.append_streams(tenant, appends)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _let_writes_go(
    store: HeldStore, done: asyncio.Event, *, queued: Callable[[], bool] | None = None, patience: float = GIVE_UP / 4
) -> None:
    """On the loop: each time a write waits, let it go — once ``queued()`` says enough records
    wait behind it, or once nothing else can come (every task waits on a write)."""
    while not done.is_set():
        if store.entered.is_set():
            if queued is not None:
                # The tasks each take a few turns to queue. Bounded in time well under GIVE_UP (a
                # held write's patience): on a loaded machine 2,000 turns of a 1 ms sleep once
                # outlasted it, and the write gave up as if the loop were blocked.
                until = time.monotonic() + patience
                while not queued() and time.monotonic() < until:
                    await asyncio.sleep(0.001)
            store.entered.clear()
            store.go.set()
        await asyncio.sleep(0.001)


class Runs:
    """A test's runs, gathered, and how many have not returned (``left``)."""

    def __init__(self, runs: list[Coroutine[Any, Any, tether.TaskHandle]]) -> None:
        self.left = len(runs)
        self._runs = runs

    async def _one(self, run: Coroutine[Any, Any, tether.TaskHandle]) -> tether.TaskHandle:
        try:
            return await run
        finally:
            self.left -= 1

    async def gather(self) -> list[tether.TaskHandle]:
        return await asyncio.gather(*(self._one(run) for run in self._runs))


def _queued(app: tether.App, runs: Runs) -> Callable[[], bool]:
    """When to let a held write go: two tasks' records wait behind it, or every run still under way
    waits on the commit thread (its records in the thread's hands or queued), so nothing more can
    queue (without this a write went only after ``patience``: a test ran 10-30 s on a loaded machine)."""
    commits = app.engine.commits
    return lambda: commits.waiting >= 2 or commits.waiting + commits.in_hand >= runs.left


@pytest.fixture
def held(store_url: str) -> Iterator[tuple[tether.App, HeldStore]]:
    store = HeldStore(open_store(store_url))
    app = tether.App(store)  # type: ignore[arg-type]
    app.engine.commits.always = True  # a lone run's records too: these tests hold every write
    yield app, store
    app.close()


def _tools(app: tether.App) -> tuple[Any, Any]:
    @app.tool(name="send")
    async def send(i: int) -> str:
        return f"sent {i}"

    @app.tool(name="weigh")
    async def weigh(i: int) -> float:
        return math.nan if i < 0 else float(i)

    return send, weigh


def test_a_record_is_written_while_the_loop_goes_on(held: tuple[tether.App, HeldStore]) -> None:
    app, store = held
    send, _ = _tools(app)

    @app.task(name="three")
    async def three(ctx: tether.AsyncTaskContext) -> list[str]:
        return [await ctx.call(send, i) for i in range(3)]

    async def main() -> tether.TaskHandle:
        done = asyncio.Event()
        letting = asyncio.create_task(_let_writes_go(store, done))
        store.holding = True
        try:
            return await app.run_async(three, task_id="t")
        finally:
            store.holding = False
            done.set()
            await letting

    handle = asyncio.run(main())
    assert handle.status is tether.Status.COMPLETED and handle.output == ["sent 0", "sent 1", "sent 2"]
    # Every record (status, three intents and three results, the output) waited for the loop.
    assert store.let_go_by_loop >= 8
    assert [c.status for c in app.state("t").calls] == ["completed"] * 3


def test_tasks_waiting_at_once_share_one_transaction(held: tuple[tether.App, HeldStore]) -> None:
    app, store = held
    send, _ = _tools(app)

    @app.task(name="two")
    async def two(ctx: tether.AsyncTaskContext) -> str:
        await ctx.call(send, 0)
        return str(await ctx.call(send, 1))

    async def main() -> list[tether.TaskHandle]:
        done = asyncio.Event()
        # Each write is held until two tasks' records wait behind it: they share the next one.
        runs = Runs([app.run_async(two, task_id=f"t{i}") for i in range(12)])
        letting = asyncio.create_task(_let_writes_go(store, done, queued=_queued(app, runs)))
        store.holding = True
        try:
            return await runs.gather()
        finally:
            store.holding = False
            done.set()
            await letting

    handles = asyncio.run(main())
    assert all(h.status is tether.Status.COMPLETED for h in handles)
    assert max(store.streams_per_write) >= 2, store.streams_per_write
    for i in range(12):
        history = [h.type for h in app.history(f"t{i}")]
        assert history.count("CallStarted") == 2 and history.count("CallCompleted") == 2, history


def test_one_tasks_refused_record_fails_that_task_only(held: tuple[tether.App, HeldStore]) -> None:
    app, store = held
    _, weigh = _tools(app)

    @app.task(name="weighing")
    async def weighing(ctx: tether.AsyncTaskContext, i: int) -> float:
        return float(await ctx.call(weigh, i))

    async def main() -> list[tether.TaskHandle]:
        done = asyncio.Event()
        runs = Runs([app.run_async(weighing, i, task_id=f"w{i}") for i in (1, -1, 2, 3)])
        letting = asyncio.create_task(_let_writes_go(store, done, queued=_queued(app, runs)))
        store.holding = True
        try:
            return await runs.gather()
        finally:
            store.holding = False
            done.set()
            await letting

    handles = {h.task_id: h for h in asyncio.run(main())}
    assert max(store.streams_per_write) >= 2, store.streams_per_write  # they did share transactions
    assert handles["w-1"].status is tether.Status.FAILED
    assert handles["w-1"].failure is not None and "cannot be stored" in handles["w-1"].failure.message
    outcomes = {t: (h.status, h.output, h.failure) for t, h in handles.items()}
    assert [outcomes[t][:2] for t in ("w1", "w2", "w3")] == [(tether.Status.COMPLETED, x) for x in (1.0, 2.0, 3.0)], (
        outcomes
    )


def test_a_lone_run_writes_on_its_loop_and_runs_together_share_the_thread(store_url: str) -> None:
    app = tether.App(store_url)
    send, _ = _tools(app)
    handed: list[int] = []
    submit = app.engine.commits.submit

    def counting(recorder: Any, batch: Any) -> None:
        handed.append(len(batch))
        submit(recorder, batch)

    app.engine.commits.submit = counting  # type: ignore[method-assign]

    @app.task(name="two")
    async def two(ctx: tether.AsyncTaskContext) -> str:
        await ctx.call(send, 0)
        return str(await ctx.call(send, 1))

    alone = asyncio.run(app.run_async(two, task_id="alone"))
    assert alone.output == "sent 1" and handed == []  # nothing to share the loop with: no handoff

    async def together() -> list[tether.TaskHandle]:
        return await asyncio.gather(*(app.run_async(two, task_id=f"t{i}") for i in range(6)))

    assert all(h.output == "sent 1" for h in asyncio.run(together()))
    assert sum(handed) > 0  # while several ran, their records went through the commit thread
    app.close()


def test_runs_starting_and_ending_together_share_transactions_and_one_refusal_stays_its_own(
    held: tuple[tether.App, HeldStore],
) -> None:
    # A run's first record (running) and its last (its output, completed) go through the group
    # commit like its calls' records: runs starting and ending together share transactions. One
    # task whose output cannot be stored fails alone; the others complete.
    app, store = held
    send, _ = _tools(app)

    @app.task(name="finishing")
    async def finishing(ctx: tether.AsyncTaskContext, i: int) -> float:
        await ctx.call(send, i)
        return math.nan if i < 0 else float(i)

    async def main(ids: tuple[int, ...]) -> list[tether.TaskHandle]:
        done = asyncio.Event()
        runs = Runs([app.run_async(finishing, i, task_id=f"f{i}") for i in ids])
        letting = asyncio.create_task(_let_writes_go(store, done, queued=_queued(app, runs)))
        store.holding = True
        try:
            return await runs.gather()
        finally:
            store.holding = False
            done.set()
            await letting

    handles = {h.task_id: h for h in asyncio.run(main((1, 2, 3)))}
    assert [handles[t].output for t in ("f1", "f2", "f3")] == [1.0, 2.0, 3.0]
    shared = [streams for streams in store.types_per_write if len(streams) >= 2]
    starts = max(sum(types == ["StatusChanged"] for types in w) for w in shared)
    ends = max(sum("OutputSet" in types for types in w) for w in shared)
    assert starts >= 2 and ends >= 2, store.types_per_write  # several runs' first and last records, one write

    # A refused output: the transaction it was in is written again task by task; it fails alone.
    handles = {h.task_id: h for h in asyncio.run(main((-1, 4, 5)))}
    assert handles["f-1"].status is tether.Status.FAILED
    assert handles["f-1"].failure is not None and "output is nan" in handles["f-1"].failure.message
    assert [(handles[t].status, handles[t].output) for t in ("f4", "f5")] == [
        (tether.Status.COMPLETED, 4.0),
        (tether.Status.COMPLETED, 5.0),
    ]
    assert [h.type for h in app.history("f4")][-2:] == ["OutputSet", "StatusChanged"]


class LoopWatch:
    """A store that notes each of its methods called on the event loop's thread while more than
    one async run is under way (``crowded``)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.url = inner.url
        self.crowded: Callable[[], bool] = lambda: False
        self.on_loop: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if not callable(found):
            return found

        def watched(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is threading.main_thread() and _loop_running() and self.crowded():
                self.on_loop.append(name)
            return found(*args, **kwargs)

        return watched


def test_no_store_call_runs_on_the_loop_while_other_runs_are_under_way(store_url: str) -> None:
    # A lone run writes on its loop (nothing else of tether's waits there); once two or more are
    # under way — opening, running or letting go — every store call of theirs is made off the loop.
    store = LoopWatch(open_store(store_url))
    app = tether.App(store)  # type: ignore[arg-type]
    send, _ = _tools(app)

    @app.task(name="three")
    async def three(ctx: tether.AsyncTaskContext) -> str:
        for i in range(3):
            await ctx.call(send, i)
        return "done"

    under_way = 0
    store.crowded = lambda: under_way > 1
    # Nor does the run read the log's memory there: its locks are held through a whole group
    # transaction by the commit thread, and a loop waiting on one stalls as long.
    load_as_writer = app.log.load_as_writer

    def watched(task_id: str, version: int) -> Any:
        if threading.current_thread() is threading.main_thread() and _loop_running() and under_way > 1:
            store.on_loop.append("log.load_as_writer")
        return load_as_writer(task_id, version)

    app.log.load_as_writer = watched  # type: ignore[method-assign]

    async def one(i: int) -> tether.TaskHandle:
        nonlocal under_way
        under_way += 1
        try:
            return await app.run_async(three, task_id=f"t{i}")
        finally:
            under_way -= 1

    async def main() -> list[tether.TaskHandle]:
        return await asyncio.gather(*(one(i) for i in range(20)))

    assert all(h.output == "done" for h in asyncio.run(main()))
    assert store.on_loop == []
    app.close()
