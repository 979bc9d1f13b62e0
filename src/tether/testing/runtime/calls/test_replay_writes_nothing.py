"""`app.replay` writes nothing — compared as a full dump of the database before and after — for a
task stopped in every kind of position; and a replay that could not go on is never reported clean."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.testing import dump_database


class Stop(BaseException):
    """Stands for a crash."""


POSITIONS = ["inside_step", "after_steps_last_call", "waiting", "sleeping", "failed", "completed"]


@pytest.mark.tether_requires("dump")
@pytest.mark.parametrize("position", POSITIONS)
def test_replay_writes_nothing_wherever_the_task_stopped(store_url: str, position: str) -> None:
    app = tether.App(store_url)
    crash = {"on": True}

    @app.tool
    def work(n: int) -> int:
        return n

    @app.task
    def job(ctx: tether.TaskContext, where: str) -> int:
        ctx.plan(["one", "two"])
        with ctx.step("one"):
            ctx.call(work, 1)
            if where == "inside_step":
                ctx.call(work, 2)
                if crash["on"]:
                    raise Stop
            ctx.call(work, 3)
            if where == "after_steps_last_call" and crash["on"]:
                raise Stop  # the step's last call is recorded, its end is not
        with ctx.step("two"):
            if where == "waiting":
                ctx.wait_for_input("go")
            if where == "sleeping":
                ctx.sleep(3600)
            if where == "failed":
                raise ValueError("broken")
        return 7

    try:
        app.run(job, position, task_id="t")
    except Stop:
        pass
    crash["on"] = False  # the replay runs the code as it would run after the crash
    before = dump_database(store_url, app.store)
    report = app.replay("t")
    assert report.clean, report
    assert dump_database(store_url, app.store) == before
    assert app.replay("t", upto=3).clean
    assert dump_database(store_url, app.store) == before


@pytest.mark.tether_requires("dump")
@pytest.mark.parametrize("where", ["inside_the_record", "where_the_record_ends"])
@pytest.mark.parametrize(
    "error",
    [tether.ConflictError("t", expected=1, actual=2), tether.OutcomeUnknownError("t:1:work:0")],
    ids=["conflict", "outcome_unknown"],
)
def test_a_replay_that_cannot_go_on_is_not_reported_clean(store_url: str, where: str, error: Exception) -> None:
    """An error that stops the run itself (not a failure of the task) is never a clean replay —
    inside the record, nor where it ends, where a task failure would be what a live run records
    next — and the replay writes nothing."""
    app = tether.App(store_url)
    replaying = {"on": False}

    @app.tool
    def work() -> int:
        return 1

    @app.task
    def job(ctx: tether.TaskContext) -> int:
        ctx.call(work)
        if replaying["on"]:
            raise error
        if where == "where_the_record_ends":
            raise Stop
        ctx.call(work)
        return 1

    try:
        app.run(job, task_id="t")
    except Stop:
        pass
    replaying["on"] = True
    before = dump_database(store_url, app.store)
    report = app.replay("t")
    assert not report.clean and type(error).__name__ in report.outcome, report
    assert dump_database(store_url, app.store) == before


def test_code_that_now_raises_before_recorded_work_diverges(store_url: str) -> None:
    app = tether.App(store_url)
    broken = {"on": False}

    @app.tool
    def work(n: int) -> int:
        return n

    @app.task
    def job(ctx: tether.TaskContext) -> Any:
        ctx.call(work, 1)
        if broken["on"]:
            raise KeyError("new bug")
        return ctx.call(work, 2)

    app.run(job, task_id="t")
    broken["on"] = True
    report = app.replay("t")
    assert not report.clean and "KeyError" in report.outcome


@pytest.mark.tether_requires("dump")
def test_a_replay_runs_no_tool_past_the_record(store_url: str) -> None:
    """Where the record ends, the next call would run live: a replay stops there, before a readonly
    call (which records nothing until it returns) runs as much as before one with an intent."""
    app = tether.App(store_url)
    ran: list[str] = []
    crash = {"on": True}

    @app.tool(readonly=True)
    def lookup(n: int) -> int:
        ran.append("lookup")
        return n

    @app.tool
    def send(n: int) -> int:
        ran.append("send")
        return n

    @app.task
    def job(ctx: tether.TaskContext) -> int:
        ctx.call(send, 1)
        if crash["on"]:
            raise Stop
        ctx.call(lookup, 2)
        return int(ctx.call(send, 3))

    with pytest.raises(Stop):
        app.run(job, task_id="t")
    crash["on"] = False
    ran.clear()
    before = dump_database(store_url, app.store)
    report = app.replay("t")
    assert report.clean and ran == [], (report, ran)
    assert dump_database(store_url, app.store) == before
