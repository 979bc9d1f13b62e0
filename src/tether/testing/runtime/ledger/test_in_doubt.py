"""A task whose call is in doubt under ``on_unknown="raise"`` waits for a person, on every backend:
no worker takes it up until the call is settled (each one took it up again at once, and the queue
behind it starved); a run of it before then writes nothing; settling it wakes it and records who."""
# mypy: disable-error-code="attr-defined,misc,union-attr,unused-ignore"

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import tether
from tether.testing import dump_database
from tether.testing.runtime.ledger.test_ledger import _task_with_interrupted_charge


@pytest.fixture
def app(store_url: str) -> tether.App:
    app = tether.App(store_url)
    yield app
    app.close()


def _parked(app: tether.App) -> list[str]:
    """Task ``co``, waiting on ``tether.call-1``: its charge() started and its process died inside it."""
    effects: list[str] = []
    _task_with_interrupted_charge(app, "raise", effects)
    with pytest.raises(tether.OutcomeUnknownError):
        app.resume("co")
    assert app.state("co").waiting.key == "tether.call-1"  # type: ignore[union-attr]
    return effects


def _claim(app: tether.App) -> str | None:
    claimed = app.store.claim(app.tenant, "another-worker", 30.0, time.time())
    if claimed is None:
        return None
    app.store.release_lease(app.tenant, claimed[0], claimed[1])
    return claimed[0]


def test_a_call_in_doubt_leaves_the_task_waiting_and_no_worker_takes_it(app: tether.App) -> None:
    effects = _parked(app)
    state = app.state("co")
    assert state.status is tether.Status.AWAITING_INPUT and state.waiting is not None
    assert state.waiting.key == "tether.call-1" and effects[0] in (state.waiting.prompt or "")
    assert _claim(app) is None  # before: claimed at once, run, raised, released, claimed again...
    app.task(name="other")(lambda ctx: 1)
    app.start("other", task_id="later")
    assert _claim(app) == "later"  # the queue behind it goes on
    (line,) = [t for t in app.list_tasks() if t.task_id == "co"]
    assert (line.status, line.waiting_for) == (tether.Status.AWAITING_INPUT, "tether.call-1")
    assert "its outcome is unknown" in app.history("co")[-2].summary


@pytest.mark.tether_requires("dump")
def test_a_run_of_a_task_still_in_doubt_writes_nothing(app: tether.App, store_url: str) -> None:
    _parked(app)
    before = dump_database(store_url, app.store)
    with pytest.raises(tether.OutcomeUnknownError):
        app.resume("co")
    assert dump_database(store_url, app.store) == before


def test_settling_the_call_wakes_the_task_and_records_who(app: tether.App) -> None:
    effects = _parked(app)
    settled = app.resolve_call("co", 1, {"charge": "ch_by_hand"}, actor="ops@example.com")
    assert settled.waiting is None and settled.received["tether.call-1"] == {"happened": True}
    assert _claim(app) == "co"  # runnable again
    assert "ops@example.com" in app.history("co")[-1].summary
    run = app.resume("co")
    assert run.output == {"charge": "ch_by_hand"} and len(effects) == 1


@pytest.mark.tether_requires("dump")
@pytest.mark.parametrize("happened", [True, False])
def test_resolve_is_refused_while_a_process_holds_the_task(app: tether.App, store_url: str, happened: bool) -> None:
    _parked(app)
    app.resolve_call("co", 1, happened=False)  # settled; the run that takes it up stops inside again:
    token = app.store.acquire_lease(app.tenant, "co", "busy-worker", 30.0, time.time())
    assert token is not None
    before = dump_database(store_url, app.store)
    result: Any = {"charge": "x"} if happened else tether.runtime.calls.UNSET
    with pytest.raises(tether.InvalidInputError, match="being run by busy-worker"):
        app.resolve_call("co", 1, result, happened=happened)
    assert dump_database(store_url, app.store) == before


@pytest.mark.tether_requires("dump")
def test_keys_of_tethers_own_are_not_for_answers_or_waits(app: tether.App, store_url: str) -> None:
    _parked(app)
    before = dump_database(store_url, app.store)
    with pytest.raises(tether.InvalidInputError, match="tether resolve"):
        app.send_input("co", "tether.call-1", {"happened": True})
    assert dump_database(store_url, app.store) == before

    @app.task
    def asks(ctx: tether.TaskContext) -> Any:
        return ctx.wait_for_input("tether.call-1")

    handle = app.run(asks, task_id="asks")
    assert handle.status is tether.Status.FAILED and "one of tether's own" in (handle.failure.message or "")


def test_a_task_in_doubt_can_still_be_cancelled(app: tether.App) -> None:
    _parked(app)
    app.cancel("co", reason="the customer gave up")
    handle = app.resume("co")  # a cancel a person asked for is carried out, call in doubt or not
    assert handle.status is tether.Status.CANCELLED


def test_calls_under_way_beside_the_call_in_doubt_end_recorded_before_the_task_waits(app: tether.App) -> None:
    """An async task's email, run again (on_unknown="retry") beside a charge in doubt, ends and is
    recorded before the task waits: cut off, it was sent a third time by the run after the settling."""
    crash = {"on": True}
    effects: list[str] = []

    @app.tool(on_unknown="raise")
    async def charge(amount: int) -> str:
        effects.append("charge")
        if crash["on"]:
            crash["on"] = False
            await asyncio.sleep(0.01)
            raise KeyboardInterrupt  # stands for the process dying inside both calls
        return "charged"

    @app.tool
    async def email(to: str) -> str:
        effects.append("email")  # sent, then a slow answer
        await asyncio.sleep(0.05)
        return "sent"

    @app.task
    async def checkout(ctx: tether.AsyncTaskContext) -> list[str]:
        return list(await asyncio.gather(ctx.call(charge, 1), ctx.call(email, "a@example.com")))

    with pytest.raises(tether.RunInterrupted):
        app.run(checkout, task_id="co")
    with pytest.raises(tether.OutcomeUnknownError):
        app.resume("co")
    state = app.state("co")
    assert state.waiting is not None and state.call(2).status == "completed"  # type: ignore[union-attr]
    app.resolve_call("co", 1, "charged")
    assert app.resume("co").output == ["charged", "sent"]
    assert effects == ["charge", "email", "email"]  # the email cut off by the crash, then once more


@pytest.mark.tether_requires("dump")
def test_a_replay_of_a_task_in_doubt_stops_at_the_call_and_writes_nothing(app: tether.App, store_url: str) -> None:
    _parked(app)
    before = dump_database(store_url, app.store)
    report = app.replay("co")  # the record ends inside the call: the replay ends there, as for any task
    assert report.clean and dump_database(store_url, app.store) == before
