"""A task that waits (for a person, or a long sleep) while other calls of a parallel batch are under way.

The agent loop's shape: the model answers with several tool calls, one of which needs a person's
approval. The calls already under way when the task decides to wait are not cut off midway: they end
and are recorded before the task waits, so no process stopped and no effect runs twice; calls that
had not started start when the task runs again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import tether
from tether.events import CallAttemptFailed
from tether.testing import dump_database


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url, inline_wait=0.05)


def _interrupted(app: tether.App, task_id: str) -> list[int]:
    """Calls whose record says the process stopped inside them."""
    return [
        r.event.n
        for r in app.log.events(task_id)
        if isinstance(r.event, CallAttemptFailed) and r.event.error_type == "Interrupted"
    ]


def _batch_app(app: tether.App, effects: list[str], group: str) -> Any:
    @app.tool
    async def send(to: str) -> str:
        effects.append(to)  # the effect happens at once; the answer takes a while to come back
        await asyncio.sleep(0.05)
        return f"sent {to}"

    async def approval(ctx: tether.AsyncTaskContext) -> str:
        return str(await ctx.wait_for_input("approve", prompt="Go?"))

    @app.task(name=f"batch_{group}")
    async def batch(ctx: tether.AsyncTaskContext) -> list[str]:
        if group == "gather":
            return list(await asyncio.gather(ctx.call(send, "a"), approval(ctx), ctx.call(send, "b")))
        async with asyncio.TaskGroup() as tasks:
            made = [tasks.create_task(ctx.call(send, "a")), tasks.create_task(approval(ctx))]
            made.append(tasks.create_task(ctx.call(send, "b")))
        return [t.result() for t in made]

    return batch


@pytest.mark.parametrize("group", ["gather", "taskgroup"])
def test_a_wait_in_a_batch_lets_the_calls_under_way_end_first(app: tether.App, group: str) -> None:
    effects: list[str] = []
    batch = _batch_app(app, effects, group)
    waiting = app.run(batch, task_id="w")
    assert waiting.status is tether.Status.AWAITING_INPUT
    # The sends under way when the task decided to wait ended, and were recorded, before it waited.
    assert {c.args["to"]: c.status for c in app.state("w").calls} == {"a": "completed", "b": "completed"}
    app.send_input("w", "approve", "yes")
    done = app.resume("w")
    assert done.output == ["sent a", "yes", "sent b"]
    assert sorted(effects) == ["a", "b"]  # each once: no process stopped, so nothing ran again
    assert _interrupted(app, "w") == []  # and the history does not say a process stopped
    assert app.replay("w").clean


def test_a_long_sleep_beside_one_call_under_way_does_not_cut_it_off(app: tether.App) -> None:
    effects: list[str] = []

    @app.tool
    async def send(to: str) -> str:
        effects.append(to)
        await asyncio.sleep(0.05)
        return f"sent {to}"

    async def nap(ctx: tether.AsyncTaskContext) -> str:
        await ctx.sleep(0.3)  # longer than inline_wait: a durable sleep, unless something runs beside it
        return "rested"

    @app.task
    async def both(ctx: tether.AsyncTaskContext) -> list[str]:
        return list(await asyncio.gather(ctx.call(send, "a"), nap(ctx)))

    first = app.run(both, task_id="s")
    if first.status is tether.Status.SLEEPING:
        assert [c.status for c in app.state("s").calls] == ["completed"]
        wake = app.state("s").wake_at
        assert wake is not None
        while app.state("s").status is not tether.Status.COMPLETED:
            app.resume("s")
    assert app.state("s").output == ["sent a", "rested"]
    assert effects == ["a"] and _interrupted(app, "s") == []
    assert app.replay("s").clean


@pytest.mark.tether_requires("dump")
def test_a_wait_in_a_taskgroup_suspends_replays_and_cancels(app: tether.App, store_url: str) -> None:
    """TaskGroup hands a branch's wait to the run inside an exception group: it still suspends the
    task (it raised the group out of app.run), replays cleanly, and a cancel stops it."""

    @app.tool
    async def work(x: int) -> int:
        return x

    @app.task
    async def grouped(ctx: tether.AsyncTaskContext) -> list[Any]:
        async with asyncio.TaskGroup() as tasks:
            done = tasks.create_task(ctx.call(work, 1))
            answer = tasks.create_task(ctx.wait_for_input("ok"))
        return [done.result(), answer.result()]

    assert app.run(grouped, task_id="g").status is tether.Status.AWAITING_INPUT
    before = dump_database(store_url, app.store)
    report = app.replay("g")
    assert report.clean, report
    assert dump_database(store_url, app.store) == before
    assert app.cancel("g").status is tether.Status.CANCELLED


def test_two_questions_in_one_batch_are_asked_one_after_the_other(app: tether.App) -> None:
    """A model may ask for two approvals in one batch. A task waits for one answer at a time: the
    second question is asked once the first is answered. (Both were asked at once, and the second
    status write failed the task: 'cannot move from awaiting_input to awaiting_input'.)"""
    effects: list[str] = []

    @app.tool
    async def send(to: str) -> str:
        effects.append(to)
        await asyncio.sleep(0.01)
        return f"sent {to}"

    @app.task
    async def approvals(ctx: tether.AsyncTaskContext) -> list[Any]:
        asks = (ctx.wait_for_input("refund", prompt="Refund?"), ctx.wait_for_input("upgrade", prompt="Upgrade?"))
        return list(await asyncio.gather(ctx.call(send, "a"), *asks, ctx.call(send, "b")))

    first = app.run(approvals, task_id="two")
    assert first.status is tether.Status.AWAITING_INPUT
    assert [p.key for p in app.pending_inputs()] == ["refund"]
    app.send_input("two", "refund", True)
    assert app.resume("two").status is tether.Status.AWAITING_INPUT
    assert [p.key for p in app.pending_inputs()] == ["upgrade"]
    app.send_input("two", "upgrade", False)
    assert app.resume("two").output == ["sent a", True, False, "sent b"]
    assert sorted(effects) == ["a", "b"] and _interrupted(app, "two") == []
    assert app.replay("two").clean


@pytest.mark.parametrize("first", ["wait", "backoff"])
def test_a_wait_beside_a_call_that_backs_off_for_long(app: tether.App, first: str) -> None:
    """A question and a call whose retry backs off longer than inline_wait, in one batch: whichever
    stops the task first (the wait, or the backoff's durable sleep), the other writes no second status
    over it and waits for nothing forever, and each attempt runs once (the call's first attempt, under
    way when the question was asked, was cut off and run again)."""
    attempts: list[int] = []

    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0.3, jitter=0))
    async def flaky(q: str) -> str:
        if first == "wait":
            await asyncio.sleep(0.05)  # fails once the question is asked
        attempts.append(tether.current_call().attempt)
        if tether.current_call().attempt == 1:
            raise TimeoutError("rate limited")
        return f"found {q}"

    async def approval(ctx: tether.AsyncTaskContext) -> Any:
        if first == "backoff":
            await asyncio.sleep(0.05)  # asks once the call is backing off
        return await ctx.wait_for_input("approve")

    @app.task
    async def both(ctx: tether.AsyncTaskContext) -> list[Any]:
        return list(await asyncio.gather(ctx.call(flaky, "x"), approval(ctx)))

    first_run = app.run(both, task_id="b")
    assert first_run.status in (tether.Status.AWAITING_INPUT, tether.Status.SLEEPING), first_run.state.failure
    app.send_input("b", "approve", True)
    for _ in range(200):
        state = app.resume("b").state
        if state.status in (tether.Status.COMPLETED, tether.Status.FAILED):
            break
        time.sleep(0.01)
    assert state.status is tether.Status.COMPLETED, state.failure
    assert state.output == ["found x", True] and attempts == [1, 2]
    assert app.replay("b").clean
