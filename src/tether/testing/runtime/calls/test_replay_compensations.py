"""Replay and check walk the compensations a failed or cancelled task ran, as the run did: an
unchanged task replays cleanly, and a change to what it compensates is a divergence naming it."""
# mypy: disable-error-code="type-var"

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.testing import dump_database


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


def booking(app: tether.App, *, undo: str = "release_seat", fixed: bool = False) -> tether.App:
    """docs/upgrades.md's booking: a seat held with a compensation, then a charge that fails.
    ``undo``: the compensation it registers ("release_seat", "cancel_seat", or "" for none);
    ``fixed``: the code catches the charge's failure and returns."""
    released: list[str] = []

    @app.tool
    def hold_seat(seat: str) -> str:
        return f"held {seat}"

    @app.tool
    def release_seat(held: str) -> None:
        released.append(held)

    @app.tool
    def cancel_seat(held: str) -> None:
        released.append(held)

    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0))
    def charge(amount: int) -> str:
        raise ValueError("card declined")

    undoes = {"release_seat": release_seat, "cancel_seat": cancel_seat, "": None}

    @app.task(name="book")
    def book(ctx: tether.TaskContext, seat: str) -> str:
        held = ctx.call(hold_seat, seat, compensate=undoes[undo])
        ctx.call(hold_seat, "bag")  # no compensation: nothing to undo for it
        try:
            return f"{held}, {ctx.call(charge, 420)}"
        except tether.ToolError:
            if fixed:
                return "paid later"
            raise

    return app


def trip(app: tether.App, *, undo: Callable[[str], Any] | None = None) -> tether.App:
    """docs/workers.md's trip: two holds, each with its compensation, then a wait for approval."""
    undone: list[str] = []

    @app.tool(compensate=undo or (lambda hold: undone.append(hold)))
    def hold_seat(flight: str) -> str:
        return f"hold-{flight}"

    @app.task(name="trip")
    def trip_task(ctx: tether.TaskContext) -> str:
        ctx.call(hold_seat, "BA117")
        ctx.call(hold_seat, "BA118")
        ctx.wait_for_input("approve")
        return "done"

    return app


@pytest.mark.tether_requires("dump")
def test_replay_of_a_failed_task_that_compensated_is_clean(app: tether.App, store_url: str) -> None:
    booking(app)
    run = app.run("book", "12A", task_id="booking-1")
    assert run.status is tether.Status.FAILED
    compensations = [c for c in run.state.calls if c.kind == "compensation"]
    assert [(c.tool, c.compensates) for c in compensations] == [("release_seat", 1)]
    before = dump_database(store_url, app.store)
    report = app.replay("booking-1")
    assert report.clean, report
    assert report.replayed == report.recorded and "raises ValueError, as recorded" in report.outcome
    assert app.check(finished=5).clean
    assert dump_database(store_url, app.store) == before  # the compensations were replayed, not run


@pytest.mark.tether_requires("dump")
def test_replay_of_a_cancelled_task_that_compensated_is_clean(app: tether.App, store_url: str) -> None:
    trip(app)
    app.run("trip", task_id="trip-8")
    run = app.cancel("trip-8", reason="the user changed their mind", actor="ada")
    assert run.status is tether.Status.CANCELLED
    # Undone in reverse order: the later hold first.
    assert [c.compensates for c in run.state.calls if c.kind == "compensation"] == [2, 1]
    before = dump_database(store_url, app.store)
    report = app.replay("trip-8")
    assert report.clean, report
    assert report.replayed == report.recorded
    assert app.check(finished=5).clean
    assert dump_database(store_url, app.store) == before


def test_replay_of_an_async_task_that_compensated_is_clean(app: tether.App) -> None:
    undone: list[str] = []

    @app.tool
    async def hold(seat: str) -> str:
        return f"held {seat}"

    @app.tool
    async def release(held: str) -> None:
        undone.append(held)

    @app.tool
    async def charge(amount: int) -> str:
        raise ValueError("card declined")

    @app.task
    async def book(ctx: tether.AsyncTaskContext) -> str:
        first, second = await asyncio.gather(
            ctx.call(hold, "1A", compensate=release), ctx.call(hold, "1B", compensate=release)
        )
        return f"{first} {second} {await ctx.call(charge, 1)}"

    assert app.run(book, task_id="a").status is tether.Status.FAILED and sorted(undone) == ["held 1A", "held 1B"]
    report = app.replay("a")
    assert report.clean, report


@pytest.mark.parametrize(
    ("change", "found"),
    [
        # The compensation tool renamed, or another undo registered for the same call.
        ({"undo": "cancel_seat"}, ["call #4 release_seat", "call #4 cancel_seat", "compensating call #1"]),
        # The undo taken away: the recorded compensation is work the code no longer asks for.
        ({"undo": ""}, ["more work (call #4 release_seat)", "raise ToolError"]),
        # The code no longer fails: it neither fails nor compensates.
        ({"fixed": True}, ["the code now returns; the record failed with ValueError"]),
    ],
    ids=["other_undo", "undo_removed", "no_longer_fails"],
)
def test_a_changed_compensation_of_a_failed_task_diverges(
    app: tether.App, change: dict[str, Any], found: list[str]
) -> None:
    booking(app)
    app.run("book", "12A", task_id="booking-1")
    deployed = booking(tether.App(app.store), **change)
    report = deployed.replay("booking-1")
    assert not report.clean, report
    assert all(text in report.outcome for text in found), report.outcome
    assert [r.task_id for r in deployed.check(finished=5).diverging] == ["booking-1"]


def test_an_undo_the_failed_record_never_ran_diverges(app: tether.App) -> None:
    booking(app, undo="")
    app.run("book", "12A", task_id="booking-1")  # failed with no compensation
    report = booking(tether.App(app.store)).replay("booking-1")
    assert not report.clean
    assert "the end of the task (failed)" in report.outcome and "a compensation it did not run" in report.outcome


def test_a_changed_compensation_of_a_cancelled_task_diverges(app: tether.App) -> None:
    trip(app)
    app.run("trip", task_id="trip-8")
    app.cancel("trip-8", reason="the user changed their mind")

    def forget(hold: str) -> None:
        pass

    report = trip(tether.App(app.store), undo=forget).replay("trip-8")
    assert not report.clean, report
    assert "call #3 <lambda>" in report.outcome and "call #3 forget" in report.outcome, report.outcome


class Stop(BaseException):
    """Stands for a crash."""


def test_a_run_stopped_between_two_compensations_finishes_them_from_its_record(app: tether.App) -> None:
    """A run that stops while it compensates goes on from its record: the compensation that ran is
    not run again (its record answers it), and the one cut short runs again under its own ordinal."""
    undone: list[str] = []
    crash = {"on": True}

    @app.tool
    def hold(seat: str) -> str:
        return seat

    @app.tool
    def release(seat: str) -> None:
        if seat == "1A" and crash["on"]:
            raise Stop
        undone.append(seat)

    @app.task
    def book(ctx: tether.TaskContext) -> str:
        ctx.call(hold, "1A", compensate=release)
        ctx.call(hold, "1B", compensate=release)
        raise ValueError("no payment")

    with pytest.raises(Stop):
        app.run(book, task_id="b")
    assert undone == ["1B"]
    assert app.replay("b").clean  # the record ends inside the second compensation
    crash["on"] = False
    done = app.resume("b")
    assert done.status is tether.Status.FAILED and undone == ["1B", "1A"]
    compensations = [(c.n, c.compensates, c.status) for c in done.state.calls if c.kind == "compensation"]
    assert compensations == [(3, 2, "completed"), (4, 1, "completed")]
    assert app.replay("b").clean


def test_a_returned_value_that_cannot_be_stored_replays_as_the_failure_it_was(app: tether.App) -> None:
    """The run failed the task (and compensated) when the value could not be stored: so does the replay."""
    undone: list[str] = []

    @app.tool
    def hold(seat: str) -> str:
        return seat

    @app.tool
    def release(seat: str) -> None:
        undone.append(seat)

    @app.task
    def book(ctx: tether.TaskContext) -> object:
        ctx.call(hold, "1A", compensate=release)
        return object()

    run = app.run(book, task_id="b")
    assert run.status is tether.Status.FAILED and undone == ["1A"]
    report = app.replay("b")
    assert report.clean and "NotSerializableError, as recorded" in report.outcome, report


def test_code_that_now_fails_where_the_record_completed_diverges(app: tether.App) -> None:
    broken = {"on": False}

    @app.task
    def job(ctx: tether.TaskContext) -> str:
        if broken["on"]:
            raise ValueError("new bug")
        return "done"

    app.run(job, task_id="j")
    broken["on"] = True
    report = app.replay("j")
    assert not report.clean and "the code now raises ValueError; the record completed" in report.outcome, report


def test_a_readonly_undo_that_ran_is_not_run_again_by_a_retry_that_fails_again(store_url: str) -> None:
    """A compensation records its intent whatever its tool says (readonly included): the intent
    names the call it undid, which the retry's run reads to leave that call undone once."""
    app = tether.App(store_url)
    undone: list[str] = []
    charge_fails = [True]

    @app.tool(readonly=True)
    def undo(held: str) -> None:
        undone.append(held)

    @app.tool(compensate=undo)
    def hold(x: str) -> str:
        return "hold-" + x

    @app.tool
    def charge() -> None:
        if charge_fails[0]:
            raise ValueError("declined")

    @app.tool
    def ship() -> None:
        raise RuntimeError("down")

    @app.task(name="t")
    def t(ctx: tether.TaskContext) -> None:
        ctx.call(hold, "a")
        ctx.call(charge)
        ctx.call(ship)

    assert app.run("t", task_id="x").status is tether.Status.FAILED and undone == ["hold-a"]
    charge_fails[0] = False
    again = app.retry("x")  # charge now goes through; ship fails: the task fails again
    assert again.status is tether.Status.FAILED
    assert undone == ["hold-a"]  # undone once, by the first failure's compensation
    assert app.replay("x").clean


STRAGGLER = """
import asyncio, os, sys
import tether

app = tether.App(sys.argv[1])

@app.tool
async def undo(h: str) -> None:
    await asyncio.sleep(0.02)
    with open(sys.argv[2], "a") as out:
        out.write(h + "\\n")
    if h == "hold-z" and os.environ.get("CRASH"):
        os._exit(9)  # killed inside the last compensation: nothing of it recorded as done

@app.tool(compensate=undo)
async def hold(x: str) -> str:
    await asyncio.sleep({"a": 0.01, "slow": 0.08}.get(x, 0))
    return "hold-" + x

@app.tool
async def charge() -> None:
    await asyncio.sleep(0.03)
    raise ValueError("declined")

@app.task(name="s")
async def s(ctx):
    await ctx.call(hold, "z")
    await asyncio.gather(ctx.call(hold, "a"), ctx.call(hold, "slow"), ctx.call(charge))

if __name__ == "__main__":
    if sys.argv[3] == "replay":
        print(app.replay("s"))
    else:
        handle = asyncio.run(app.run_async("s", task_id="s") if sys.argv[3] == "run" else app.resume_async("s"))
        print(handle.status.value)
"""


@pytest.mark.tether_requires("cross_process", "durable")  # the run is a process of its own
@pytest.mark.parametrize("crash", [False, True], ids=["whole", "killed-in-a-compensation"])
def test_a_call_that_completes_after_the_failure_is_undone_too(store_url: str, tmp_path: Path, crash: bool) -> None:
    """``asyncio.gather`` raises the first failure while other calls still run: the compensations
    wait for them, so a hold that completes after the charge failed is released too (it was not),
    replay agrees with the run, and a run killed mid-compensation is finished by the next one."""
    script, undone = tmp_path / "straggler.py", tmp_path / "undone.txt"
    script.write_text(STRAGGLER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tether.__file__).parents[1]), *sys.path])}
    first = subprocess.run(
        [sys.executable, str(script), store_url, str(undone), "run"],
        env={**env, "CRASH": "1"} if crash else env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if crash:
        assert first.returncode == 9, first.stderr
        again = subprocess.run(
            [sys.executable, str(script), store_url, str(undone), "resume"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert again.returncode == 0 and again.stdout.strip() == "failed", again.stderr
    else:
        assert first.returncode == 0 and first.stdout.strip() == "failed", first.stderr
    done = undone.read_text().split()
    # Each hold released: the one that completed after the charge failed first (the latest call),
    # z's twice when the run was killed inside its release (the run's own retry of a call in doubt).
    assert done[:3] == ["hold-slow", "hold-a", "hold-z"] and set(done[3:]) <= {"hold-z"}, done
    undos = [c for c in tether.App(store_url).log.load("s").calls if c.kind == "compensation"]
    assert sorted(c.compensates for c in undos) == [1, 2, 3] and all(c.status == "completed" for c in undos)
    replayed = subprocess.run(
        [sys.executable, str(script), store_url, str(undone), "replay"], env=env, capture_output=True, text=True
    )
    assert "replays cleanly" in replayed.stdout, replayed.stdout + replayed.stderr


def test_a_cancel_asked_for_while_a_failure_compensated_replays_as_the_failure(store_url: str) -> None:
    """The run ended failed (the cancel came after its code had); replay follows the failure, so a
    code that now returns, or raises something else, still diverges."""
    import threading

    app = tether.App(store_url)
    mode = {"code": "as run"}

    @app.tool
    def undo(held: str) -> None:
        if held == "hold-b" and mode["code"] == "as run":
            asking = threading.Thread(target=lambda: app.request_cancel("x", reason="stop"))
            asking.start()
            asking.join()

    @app.tool(compensate=undo)
    def hold(x: str) -> str:
        return "hold-" + x

    @app.tool
    def charge() -> None:
        raise ValueError("declined")

    @app.task(name="t")
    def t(ctx: tether.TaskContext) -> str:
        ctx.call(hold, "a")
        ctx.call(hold, "b")
        try:
            ctx.call(charge)
        except tether.ToolError:
            if mode["code"] == "fixed":
                return "paid later"
            if mode["code"] == "other":
                raise KeyError("other") from None
            raise
        return "paid"

    ran = app.run("t", task_id="x")
    assert ran.status is tether.Status.FAILED and app.log.load("x").cancel_reason == "stop"
    assert app.replay("x").clean
    mode["code"] = "fixed"
    assert "the code now returns" in str(app.replay("x"))
    mode["code"] = "other"
    assert "now raises KeyError" in str(app.replay("x"))
