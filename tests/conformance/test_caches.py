"""A process's caches never outlive what another process did to the store: a rewind, a delete."""

from __future__ import annotations

import gc

import pytest

import tether
from tether.model import ToolCall


def _pair(url: str) -> tuple[tether.App, tether.App]:
    if url.startswith("memory"):
        store = tether.open_store(url)
        apps = (tether.App(store), tether.App(store))
    else:
        apps = (tether.App(url), tether.App(url))
    for app in apps:

        @app.task(name="approval")
        def approval(ctx: tether.TaskContext) -> object:
            ctx.plan(["ask"])
            return ctx.wait_for_input("approve")

    return apps


def test_an_answer_after_a_rewind_elsewhere_reaches_the_task(store_url: str) -> None:
    here, there = _pair(store_url)
    run = here.run("approval", task_id="trip")
    assert run.status is tether.Status.AWAITING_INPUT
    assert here.get("trip").state.waiting is not None  # this process now caches the task
    there.rewind("trip", to=1)  # another process: "trip" is a new branch, the old one "trip~1"
    here.send_input("trip", "approve", True)
    assert there.state("trip").received == {"approve": True}
    assert here.state("trip").received == {"approve": True}
    assert "approve" not in there.state("trip~1").received
    assert there.resume("trip").output is True
    for app in (here, there):
        app.close()


def test_a_session_deleted_and_made_again_elsewhere_reads_cleanly(store_url: str) -> None:
    here, there = _pair(store_url)
    here.session("s1").add("user", "first")
    assert [m.content for m in here.session("s1").messages()] == ["first"]
    there.delete_session("s1")
    there.session("s1").add("user", "second")
    for _ in range(2):  # every later read, not only the first
        assert [m.content for m in here.session("s1").messages()] == ["second"]
    here.session("s1").add("user", "third")
    assert [m.content for m in there.session("s1").messages()] == ["second", "third"]
    for app in (here, there):
        app.close()


def test_a_task_deleted_elsewhere_is_not_found_here(store_url: str) -> None:
    here, there = _pair(store_url)
    here.run("approval", task_id="gone")
    there.store.delete_task(there.tenant, "gone")
    with pytest.raises(tether.TaskNotFoundError):
        here.get("gone")
    for app in (here, there):
        app.close()


def _live(cls: type) -> int:
    gc.collect()
    return sum(type(o) is cls for o in gc.get_objects())


def test_what_an_app_remembers_of_the_tasks_it_ran_stays_within_its_budget(store_url: str) -> None:
    """A worker or a server goes through task after task: the folded states it keeps (every call's
    record with its result) stay within ``cache_bytes``, however many tasks it has run, and a task
    dropped from memory reads and resumes as well as one kept."""
    app = tether.App(store_url, cache_bytes=30_000)
    result = "r" * 2_000

    @app.tool(name="fetch", readonly=True)
    def fetch(i: int) -> str:
        return result

    @app.task(name="gather")
    def gather(ctx: tether.TaskContext, n: int, ask: bool = False) -> int:
        for i in range(n):
            ctx.call(fetch, i)
        if ask:
            ctx.wait_for_input("go")
        return n

    first = app.run(gather, 3, ask=True, task_id="first")  # waits, then is pushed out by the rest
    assert first.status is tether.Status.AWAITING_INPUT
    for i in range(20):
        app.run(gather, 3, task_id=f"warm-{i}")
    calls_then = _live(ToolCall)
    for i in range(100):
        app.run(gather, 3, task_id=f"more-{i}")
    assert _live(ToolCall) <= calls_then + 3  # 300 more calls run, none kept beyond the budget's
    entries, held = app.log._memory.held
    assert held <= 30_000 and entries < 20
    app.send_input("first", "go", True)
    assert app.resume("first").output == 3
    assert [c.result for c in app.state("first").calls] == [result] * 3
    assert app.get("more-0").output == 3
    app.close()


def test_the_memory_counts_bytes_and_drops_the_least_recently_used() -> None:
    from tether.log.memory import Entry, Memory

    state = tether.TaskLog("memory://").create(type="t")
    memory = Memory(10, budget=100)
    a, b, c = Entry(state, 0, 40, 0), Entry(state, 0, 40, 0), Entry(state, 0, 30, 0)
    memory.remember("a", a)
    memory.remember("b", b)
    assert memory.held == (2, 80)
    memory.touch("a")  # now b is the least recently used
    memory.remember("c", c)  # 110 > 100: b goes, not a
    assert memory.get("b") is None and memory.get("a") is a and memory.held == (2, 70)
    a.bytes_since += 50  # a grew while its run went on: counted when touched
    memory.touch("a")  # 120 > 100: c goes, a stays, last of all (never the last one left)
    assert memory.get("c") is None and memory.held == (1, 90)
    memory.remember("a", Entry(state, 0, 5, 0))  # remembered again: counted once
    assert memory.held == (1, 5)
    memory.forget("a")
    assert memory.held == (0, 0)
    big = Entry(state, 0, 500, 0)
    memory.remember("big", big)  # bigger than the budget alone: kept, until another comes
    assert memory.get("big") is big
    memory.remember("a", a)
    assert memory.get("big") is None and memory.held == (1, 90)


def test_a_store_keeps_a_bounded_number_of_task_ids(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SQL store caches each task's row id (and what it last wrote to it): past ``IDS_KEPT`` it
    drops them all, and appends go on, guarded as for a stream it never saw."""
    if store_url.startswith(("memory", "redis")):
        pytest.skip("the memory and Redis stores have no row ids to cache")
    from tether.store import _sql

    monkeypatch.setattr(_sql, "IDS_KEPT", 4)
    app = tether.App(store_url)

    @app.task(name="steps")
    def steps(ctx: tether.TaskContext) -> int:
        for name in ("a", "b"):
            with ctx.step(name):
                pass
        return 2

    for i in range(12):
        assert app.run(steps, task_id=f"t{i}").output == 2
        assert len(app.store._ids) <= 4  # type: ignore[attr-defined]
    state = app.state("t0")
    app.log.append("t0", [tether.events.ObservationRecorded(key="k", value=1)], state.version)
    with pytest.raises(tether.ConflictError):  # a stale version is still refused, cache or none
        app.log.append("t0", [tether.events.ObservationRecorded(key="k", value=2)], state.version)
    app.close()


def test_a_task_a_run_holds_stays_remembered_while_others_come_and_go(store_url: str) -> None:
    """Runs of other tasks fill the memory past its budget while a task runs: the running one is
    not dropped (its run keeps its state anyway), so none of its appends reads it again; once its
    run stops it is counted as any other."""
    app = tether.App(store_url, cache_bytes=0)
    reads: list[str] = []
    read_events = app.store.read_events

    def counted(tenant: str, task_id: str, **kwargs: object) -> object:
        reads.append(task_id)
        return read_events(tenant, task_id, **kwargs)  # type: ignore[arg-type]

    @app.tool(name="noop")
    def noop() -> int:
        return 1

    @app.task(name="small")
    def small(ctx: tether.TaskContext) -> int:
        return ctx.call(noop)

    @app.tool(name="others")
    def others(n: int) -> int:
        return sum(app.run(small, task_id=f"small-{n}-{i}").output for i in range(3))

    @app.task(name="long")
    def long(ctx: tether.TaskContext) -> int:
        return sum(ctx.call(others, n) for n in range(3))

    app.store.read_events = counted  # type: ignore[method-assign]
    assert app.run(long, task_id="long").output == 9
    assert "long" not in reads  # created, run and ended from memory: never read back
    assert app.log._memory.get("long") is not None  # the last to stop: the one remembered
    app.run(small, task_id="after")
    assert app.log._memory.get("long") is None  # let go: dropped as any other
    app.close()
