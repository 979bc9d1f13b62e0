"""What a run accepts from other writers while it holds its task.

While a run is inside a tool, another process may append to its task: an answer (``send_input``)
or a cancel request — the two things a person or a service legitimately sends a running task.
The run's next write meets them, takes them in and goes on after them (a cancel stops it).
Anything else appended meanwhile is someone else writing the task's history: the run must not
write its record on top of it as if it were its own. It stops with a ``ConflictError``, writes
nothing, and leaves the task as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tether
from tether.events import CancelRequested, DecisionMade, Event, InputReceived, ObservationRecorded, OutputSet


@pytest.fixture
def app(store_url: str) -> Iterator[tether.App]:
    app = tether.App(store_url)
    yield app
    app.close()


def _task_written_to_meanwhile(app: tether.App, meanwhile: Callable[[tether.App], None]) -> list[str]:
    """Task ``job``: a tool during which ``meanwhile(other)`` writes to the task through another app
    on the same store, then a second tool and a wait for ``later``. Returns the tools that ran."""
    other = tether.App(app.store)
    ran: list[str] = []

    @app.tool
    def first() -> str:
        ran.append("first")
        meanwhile(other)
        return "one"

    @app.tool
    def second() -> str:
        ran.append("second")
        return "two"

    @app.task
    def job(ctx: tether.TaskContext) -> Any:
        a = ctx.call(first)
        b = ctx.call(second)
        return [a, b, ctx.wait_for_input("later")]

    return ran


def _appending(events: Callable[[], list[Event]]) -> Callable[[tether.App], None]:
    def append(other: tether.App) -> None:
        other.log.append("t", events(), other.state("t").version)

    return append


def _answering(other: tether.App) -> None:
    other.send_input("t", "later", "yes")


@pytest.mark.parametrize(
    "foreign",
    [
        lambda: [ObservationRecorded(key="price", value=1)],
        lambda: [DecisionMade(name="route", choice="b", rationale="another writer's")],
        lambda: [OutputSet(output="not this run's")],
        lambda: [InputReceived(key="later", value=1), ObservationRecorded(key="price", value=1)],
    ],
    ids=["observation", "decision", "output", "answer-then-observation"],
)
def test_a_foreign_append_of_any_other_kind_stops_the_run_and_it_writes_nothing(
    app: tether.App, foreign: Callable[[], list[Event]]
) -> None:
    ran = _task_written_to_meanwhile(app, _appending(foreign))
    with pytest.raises(tether.ConflictError):
        app.run("job", task_id="t")
    history = app.history("t")
    appended = [h.type for h in history]
    # The foreign events are the last record: the run wrote nothing on top of them.
    assert appended[-len(foreign()) :] == [type(e).__name__ for e in foreign()]
    assert "CallCompleted" not in appended
    state = app.state("t")
    assert state.call(1) is not None and state.call(1).status == "intended"  # type: ignore[union-attr]
    assert ran == ["first"]


def test_an_answer_appended_meanwhile_is_taken_in_and_the_run_goes_on(app: tether.App) -> None:
    ran = _task_written_to_meanwhile(app, _answering)
    run = app.run("job", task_id="t")
    assert run.status is tether.Status.COMPLETED and run.output == ["one", "two", "yes"]
    assert ran == ["first", "second"]
    assert app.replay("t").clean


def test_a_cancel_requested_meanwhile_is_taken_in_and_stops_the_run(app: tether.App) -> None:
    ran = _task_written_to_meanwhile(app, _appending(lambda: [CancelRequested(reason="the user gave up")]))
    run = app.run("job", task_id="t")
    assert run.status is tether.Status.CANCELLED
    assert ran == ["first"]  # the next call never started
    state = app.state("t")
    assert state.call(1) is not None and state.call(1).status == "completed"  # type: ignore[union-attr]


@pytest.mark.parametrize("thread", [False, True], ids=["on-the-loop", "commit-thread"])
def test_a_foreign_append_stops_an_async_run_whose_branches_commit_together(app: tether.App, thread: bool) -> None:
    app.engine.commits.always = thread
    other = tether.App(app.store)

    @app.tool
    async def lookup(i: int) -> int:
        if i == 0:
            other.log.append("a", [ObservationRecorded(key="price", value=1)], other.state("a").version)
        return i

    @app.task
    async def fan_out(ctx: tether.AsyncTaskContext) -> list[int]:
        return list(await asyncio.gather(*(ctx.call(lookup, i) for i in range(3))))

    with pytest.raises(tether.ConflictError):
        asyncio.run(app.run_async(fan_out, task_id="a"))
    appended = [h.type for h in app.history("a")]
    assert appended[-1] == "ObservationRecorded" and "CallCompleted" not in appended
    assert [c.status for c in app.state("a").calls] == ["intended"] * 3
