"""A fork is the same task from its fork point: made in a failure's records, or among a cancel's
compensations, resuming it does what resuming the original from that point would have done.

* Forked in a failure (at the step that failed, at the failure record, among its compensations, at
  its end), the fork fails again on its run, and ``app.retry`` of the fork retires the failure it
  shares with its parent, as a retry of the parent does: the retried fork completes, and replays clean.
* Forked among a cancel's compensations, the fork carries on compensating (an effect undone is not
  done again) and ends cancelled, its cancel recorded; its replay walks the compensations as its run
  did. A fork made before the compensations began still drops the cancel (only asked for) and goes on.

Every compensation runs at most once per idempotency key; one in flight at the fork point runs again
under its key (as a resumed task runs it), one completed before the fork point does not run again.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import tether

FAILURE_POINTS = ["step failed", "failure recorded", "compensation started", "compensation done", "end"]


def _seq(app: tether.App, task_id: str, point: str) -> int:
    history = list(app.history(task_id))
    match point:
        case "step failed":
            return next(e.seq for e in history if e.type == "StepFailed")
        case "failure recorded":
            return next(e.seq for e in history if e.type == "FailureRecorded")
        case "compensation started":
            return next(e.seq for e in history if e.type == "CallStarted" and "compensation" in e.summary)
        case "compensation done":
            started = _seq(app, task_id, "compensation started")
            return next(e.seq for e in history if e.type == "CallCompleted" and e.seq > started)
        case "end" | "last":
            return history[-1].seq
        case "cancel requested":
            return next(e.seq for e in history if e.type == "CancelRequested")
    raise AssertionError(point)


def _undone(app: tether.App, task_id: str, at: int) -> set[str]:
    """The keys of the compensations that completed at or before event ``at`` of ``task_id``."""
    return {c.key for c in app.state_at(task_id, at).calls if c.kind == "compensation" and c.status == "completed"}


def _check_compensations(app: tether.App, fork: str, ran: list[tuple[str, str]], done_before: set[str]) -> None:
    """Each compensation ran at most once per key in the fork's runs, none that completed before the
    fork point; and the fork undid each call at most once."""
    per_key = Counter(key for task, key in ran if task == fork)
    assert all(count == 1 for count in per_key.values()), per_key
    assert not set(per_key) & done_before, (per_key, done_before)
    undone = Counter(
        c.compensates for c in app.state(fork).calls if c.kind == "compensation" and c.status == "completed"
    )
    assert all(count == 1 for count in undone.values()), undone


def failing_app(store_url: str) -> tuple[tether.App, list[tuple[str, str]]]:
    """A seat held (compensated by a release), then a step whose flaky call fails once: the task fails
    and releases the seat; retried, it completes."""
    app = tether.App(store_url)
    ran: list[tuple[str, str]] = []  # (task, key) of each release run
    tries: list[str] = []

    @app.tool
    def release(hold: str) -> None:
        info = tether.current_call()
        ran.append((info.task_id, info.key))

    @app.tool(compensate=release)
    def reserve(seat: str) -> str:
        return f"hold-{seat}"

    @app.tool(retry=tether.Retry(max_attempts=1))
    def flaky(label: str) -> str:
        tries.append(label)
        if len(tries) == 1:  # the API is down, once
            raise TimeoutError("down")
        return label

    @app.task(name="job")
    def job(ctx: tether.TaskContext) -> str:
        ctx.call(reserve, "1A")
        with ctx.step("check"):
            ctx.call(flaky, "s0")
        return "done"

    return app, ran


@pytest.mark.parametrize("point", FAILURE_POINTS)
def test_a_fork_made_in_a_failure_is_retried(store_url: str, point: str) -> None:
    app, ran = failing_app(store_url)
    assert app.run("job", task_id="j1").status is tether.Status.FAILED
    at = _seq(app, "j1", point)
    app.fork("j1", at=at, new_id="j1-fork")
    failed = app.resume("j1-fork")
    assert failed.status is tether.Status.FAILED
    assert failed.state.failure is not None and failed.state.failure.exception_type == "TimeoutError"
    assert app.replay("j1-fork").clean
    retried = app.retry("j1-fork")  # before the fix: NonDeterminismError at the inherited StepFailed
    assert retried.status is tether.Status.COMPLETED and retried.output == "done"
    assert app.replay("j1-fork").clean, app.replay("j1-fork")
    _check_compensations(app, "j1-fork", ran, _undone(app, "j1", at))
    # The parent is untouched, and retries as it always did.
    assert app.retry("j1").output == "done"
    assert app.replay("j1").clean


def test_a_fork_of_a_fork_made_in_a_failure_is_retried(store_url: str) -> None:
    app, ran = failing_app(store_url)
    app.run("job", task_id="j1")
    app.fork("j1", at=_seq(app, "j1", "failure recorded"), new_id="f1")
    assert app.resume("f1").status is tether.Status.FAILED
    app.fork("f1", at=_seq(app, "f1", "end"), new_id="f2")
    assert app.resume("f2").status is tether.Status.FAILED
    assert app.retry("f2").output == "done"
    assert app.replay("f2").clean
    _check_compensations(app, "f2", ran, _undone(app, "f1", app.state("f2").parent.seq))  # type: ignore[union-attr]


def in_flight_app(store_url: str) -> tuple[tether.App, list[tuple[str, str]]]:
    """fork_in_compensation_replay_diverges.py: a seat held, then a call the process dies in; the task
    is cancelled with the call's intent and no result, and the seat released."""
    app = tether.App(store_url)
    ran: list[tuple[str, str]] = []
    dead: list[int] = []

    @app.tool
    def release(hold: str) -> None:
        info = tether.current_call()
        ran.append((info.task_id, info.key))

    @app.tool(compensate=release)
    def reserve(n: int) -> str:
        return f"hold-{n}"

    @app.tool
    def slow(n: int) -> int:
        if not dead:
            dead.append(n)
            raise KeyboardInterrupt  # stands for the process dying in the middle of the call
        return n

    @app.task(name="job")
    def job(ctx: tether.TaskContext) -> str:
        ctx.call(reserve, 1)
        ctx.call(slow, 2)
        return "done"

    with pytest.raises(KeyboardInterrupt):
        app.run("job", task_id="j1")
    assert app.cancel("j1").status is tether.Status.CANCELLED
    return app, ran


def waiting_app(store_url: str) -> tuple[tether.App, list[tuple[str, str]]]:
    """Two seats held, then a wait; cancelled while it waits: both released, the compensations taking
    the ordinals the code's next calls have (#3, #4)."""
    app = tether.App(store_url)
    ran: list[tuple[str, str]] = []

    @app.tool
    def release(hold: str) -> None:
        info = tether.current_call()
        ran.append((info.task_id, info.key))

    @app.tool(compensate=release)
    def reserve(n: int) -> str:
        return f"hold-{n}"

    @app.task(name="job")
    def job(ctx: tether.TaskContext) -> str:
        ctx.call(reserve, 1)
        ctx.call(reserve, 2)
        go = ctx.wait_for_input("go")
        ctx.call(reserve, 3)
        ctx.call(reserve, 4)
        return f"done {go}"

    assert app.run("job", task_id="j1").status is tether.Status.AWAITING_INPUT
    assert app.cancel("j1").status is tether.Status.CANCELLED
    return app, ran


CANCELLED: dict[str, Any] = {"in flight": in_flight_app, "waiting": waiting_app}


@pytest.mark.parametrize("point", ["compensation started", "compensation done", "last"])
@pytest.mark.parametrize("world", sorted(CANCELLED))
def test_a_fork_made_among_a_cancels_compensations_carries_on_compensating(
    store_url: str, world: str, point: str
) -> None:
    app, ran = CANCELLED[world](store_url)
    at = _seq(app, "j1", point)
    app.fork("j1", at=at, new_id="j1-fork")
    ended = app.resume("j1-fork")
    assert ended.status is tether.Status.CANCELLED
    assert ended.state.cancel_reason == "cancelled"
    report = app.replay("j1-fork")
    assert report.clean, report
    _check_compensations(app, "j1-fork", ran, _undone(app, "j1", at))
    # Every seat the fork holds is released once, by its parent's compensation or its own.
    state = app.state("j1-fork")
    held = {c.n for c in state.calls if c.kind != "compensation" and c.status == "completed"}
    undone = {c.compensates for c in state.calls if c.kind == "compensation" and c.status == "completed"}
    assert held == undone
    assert app.resume("j1-fork").status is tether.Status.CANCELLED  # finished: nothing runs again
    assert app.replay("j1-fork").clean


def test_a_fork_made_before_a_cancels_compensations_drops_the_cancel(store_url: str) -> None:
    app, ran = in_flight_app(store_url)
    app.fork("j1", at=_seq(app, "j1", "cancel requested"), new_id="j1-fork")
    run = app.resume("j1-fork")
    assert run.output == "done" and run.state.cancel_reason is None
    assert app.replay("j1-fork").clean
    assert not [key for task, key in ran if task == "j1-fork"]  # nothing undone
