"""Who did it: write actions (answer, cancel, retry) record their actor in the task's own history."""
# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import tether
from tether.events import CancelRequested, InputReceived, RetryRequested


@pytest.fixture
def app(store_url: str) -> tether.App:
    app = tether.App(store_url)
    flags = {"fail": True}

    @app.tool(retry=tether.Retry(max_attempts=1))
    def charge(amount: int) -> int:
        if flags["fail"]:
            raise RuntimeError("card declined")
        return amount

    @app.task
    def approve(ctx: tether.TaskContext) -> Any:
        return ctx.wait_for_input("ok", schema={"type": "boolean"})

    @app.task
    def pay(ctx: tether.TaskContext, amount: int) -> int:
        return int(ctx.call(charge, amount))

    app.flags = flags  # type: ignore[attr-defined]
    return app


def _last(app: tether.App, task_id: str, type_: str) -> tether.HistoryEntry:
    return [h for h in app.history(task_id) if h.type == type_][-1]


def test_answer_cancel_and_retry_record_their_actor(app: tether.App) -> None:
    waiting = app.run("approve", task_id="w").task_id
    app.send_input(waiting, "ok", True, actor="ada")
    answer = _last(app, waiting, "InputReceived")
    assert isinstance(answer.event, InputReceived) and answer.event.actor == "ada"
    assert answer.summary == "received 'ok' = true by ada"

    asking = app.run("approve", task_id="c").task_id
    assert app.cancel(asking, "not needed", actor="grace").status is tether.Status.CANCELLED
    cancel = _last(app, asking, "CancelRequested")
    assert isinstance(cancel.event, CancelRequested) and cancel.event.actor == "grace"
    assert cancel.summary == "cancellation requested by grace: not needed"
    assert app.state(asking).cancel_reason == "not needed"

    failed = app.run("pay", 3, task_id="p").task_id
    app.flags["fail"] = False  # type: ignore[attr-defined]
    assert app.retry(failed, actor="linus").result() == 3
    retry = _last(app, failed, "RetryRequested")
    assert isinstance(retry.event, RetryRequested) and retry.event.actor == "linus"
    assert retry.summary.startswith("retried by linus after RuntimeError")


def test_the_request_forms_and_the_async_twin_record_it_too(app: tether.App) -> None:
    asking = app.run("approve", task_id="c").task_id
    app.request_cancel(asking, actor="ops")
    assert _last(app, asking, "CancelRequested").summary == "cancellation requested by ops: cancelled"

    failed = app.run("pay", 1, task_id="p").task_id
    app.request_retry(failed, actor="ops")
    assert _last(app, failed, "RetryRequested").summary.startswith("retried by ops")
    app.flags["fail"] = True  # type: ignore[attr-defined]
    assert app.resume(failed).status is tether.Status.FAILED
    app.flags["fail"] = False  # type: ignore[attr-defined]
    assert asyncio.run(app.retry_async(failed, actor="night shift")).result() == 1
    assert _last(app, failed, "RetryRequested").summary.startswith("retried by night shift")


def test_without_an_actor_nothing_is_claimed(app: tether.App) -> None:
    waiting = app.run("approve", task_id="w").task_id
    app.send_input(waiting, "ok", False)
    answer = _last(app, waiting, "InputReceived")
    assert answer.event.actor is None and answer.summary == "received 'ok' = false"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("actor", "says"),
    [("", "non-empty"), ("  ", "non-empty"), (7, "must be a string"), ("x" * 201, "at most 200"), ("a\0b", "NUL")],
)
def test_a_bad_actor_is_refused_by_name_and_nothing_is_written(app: tether.App, actor: Any, says: str) -> None:
    waiting = app.run("approve", task_id="w").task_id
    failed = app.run("pay", 1, task_id="p").task_id
    before = {t: app.state(t).version for t in (waiting, failed)}
    attempts = [
        lambda: app.send_input(waiting, "ok", True, actor=actor),
        lambda: app.request_cancel(waiting, actor=actor),
        lambda: app.cancel(waiting, actor=actor),
        lambda: app.request_retry(failed, actor=actor),
        lambda: app.retry(failed, actor=actor),
        lambda: app.fork(waiting, at=1, actor=actor),
        lambda: app.rewind(waiting, to=1, actor=actor),
    ]
    for attempt in attempts:
        with pytest.raises(tether.InvalidInputError, match=f"^actor .*{says}"):
            attempt()
    assert {t: app.state(t).version for t in (waiting, failed)} == before
    assert {r.task_id for r in app.log.list()} == {waiting, failed}  # no fork, no set-aside branch


def test_fork_and_rewind_record_their_actor_in_the_new_branches(app: tether.App) -> None:
    waiting = app.run("approve", task_id="w").task_id
    fork = app.fork(waiting, at=2, new_id="w-fork", actor="ada")
    first = _last(app, fork.task_id, "TaskForked")
    assert first.event.actor == "ada" and first.summary == "forked from w at event 2 by ada"  # type: ignore[attr-defined]
    app.rewind(waiting, to=2, actor="grace")
    new_start = _last(app, waiting, "TaskForked")
    assert new_start.event.actor == "grace" and new_start.summary.endswith(" by grace")  # type: ignore[attr-defined]
    set_aside = _last(app, "w~1", "TaskArchived")
    assert set_aside.event.actor == "grace"  # type: ignore[attr-defined]
    assert set_aside.summary == "set aside by a rewind by grace; w took its place"
    assert _last(app, app.fork(waiting, at=2).task_id, "TaskForked").event.actor is None  # type: ignore[attr-defined]
