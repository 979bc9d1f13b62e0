"""Durable execution: replay, keys, retries, failure context, compensation, typed data."""
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import BaseModel

import tether
from tether.canonical import args_hash


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


class Sink:
    """An external system that deduplicates by idempotency key, like a real email or payment API."""

    def __init__(self) -> None:
        self.raw: list[tuple[str, Any]] = []
        self.effects: dict[str, Any] = {}

    def send(self, payload: Any) -> dict[str, Any]:
        key = tether.current_call().key
        self.raw.append((key, payload))
        self.effects.setdefault(key, payload)
        return {"id": len(self.effects), "key": key}


def test_replay_returns_recorded_results_without_running(app: tether.App) -> None:
    runs: list[str] = []

    @app.tool
    def search(dest: str) -> list[dict[str, Any]]:
        runs.append(dest)
        return [{"id": "BA117", "price": 420.5, "tags": ("a", "b")}]

    class StopError(Exception):
        pass

    stop = {"now": True}

    @app.task
    def trip(ctx: tether.TaskContext, dest: str) -> Any:
        flights = ctx.call(search, dest)
        if stop["now"]:
            raise StopError("crash-like interruption")
        return flights

    first = app.run(trip, "NYC")
    assert first.status is tether.Status.FAILED  # an exception fails the task...
    stop["now"] = False
    second = app.run(trip, "NYC", task_id="again")
    assert second.output == [{"id": "BA117", "price": 420.5, "tags": ["a", "b"]}]
    assert runs == ["NYC", "NYC"]
    replayed = app.resume("again")  # finished: returned as is
    assert replayed.output == second.output and runs == ["NYC", "NYC"]


def test_resume_after_interruption_skips_recorded_calls(app: tether.App) -> None:
    sink = Sink()
    app.tool(sink.send)
    interrupt = {"at": 3}

    @app.task
    def mailer(ctx: tether.TaskContext, n: int) -> int:
        for i in range(n):
            if i == interrupt["at"]:
                raise KeyboardInterrupt  # stands for a crash: leaves the task running, not failed
            ctx.call(sink.send, {"i": i})
        return n

    with pytest.raises(KeyboardInterrupt):
        app.run(mailer, 5, task_id="m1")
    state = app.state("m1")
    assert state.status is tether.Status.RUNNING and len(state.calls) == 3
    interrupt["at"] = -1
    done = app.resume("m1")
    assert done.status is tether.Status.COMPLETED and done.output == 5
    assert [p["i"] for _, p in sink.raw] == [0, 1, 2, 3, 4]  # 0..2 were not sent again


def test_nondeterminism_names_position_recorded_and_requested(app: tether.App) -> None:
    @app.tool
    def a() -> int:
        return 1

    @app.tool
    def b() -> int:
        return 2

    order = [a]

    @app.task
    def flow(ctx: tether.TaskContext) -> int:
        total = 0
        for fn in order:
            total += ctx.call(fn)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        app.run(flow, task_id="nd")
    order[:] = [b]
    with pytest.raises(tether.NonDeterminismError) as info:
        app.resume("nd")
    message = str(info.value)
    assert "call #1 a" in message and "call #1 b" in message
    assert info.value.position == 3  # created, running, then the call
    assert app.state("nd").status is tether.Status.RUNNING  # not failed: the code must be fixed


def test_keys_are_stable_and_visible_to_tools(app: tether.App) -> None:
    seen: list[tether.CallInfo] = []

    @app.tool(name="pay")
    def pay(amount: float, meta: dict[str, Any]) -> str:
        seen.append(tether.current_call())
        return tether.current_call().key

    @app.task
    def t(ctx: tether.TaskContext) -> list[str]:
        return [ctx.call(pay, 10.0, {"b": 1, "a": 2}), ctx.call(pay, amount=10, meta={"a": 2, "b": 1})]

    run = app.run(t, task_id="k1")
    first, second = run.output
    expected_hash = args_hash({"amount": 10, "meta": {"a": 2, "b": 1}})
    assert first == f"k1:1:pay:{expected_hash}" and second == f"k1:2:pay:{expected_hash}"
    assert [(i.task_id, i.n, i.attempt) for i in seen] == [("k1", 1, 1), ("k1", 2, 1)]
    with pytest.raises(tether.TetherError, match="only available inside a tool"):
        tether.current_call()


def test_retries_are_recorded_with_errors_and_backoff(app: tether.App) -> None:
    attempts = {"n": 0}

    @app.tool(retry=tether.Retry(max_attempts=4, backoff=0.01, multiplier=2, jitter=0))
    def flaky_price(flight: str) -> int:
        attempts["n"] += 1
        if attempts["n"] < 3:
            raise TimeoutError(f"pricing API timed out (try {attempts['n']})")
        return 420

    @app.task
    def t(ctx: tether.TaskContext) -> int:
        return ctx.call(flaky_price, "BA117")

    run = app.run(t)
    call = run.state.calls[0]
    assert run.output == 420 and call.status == "completed"
    assert [a.number for a in call.attempts] == [1, 2, 3]
    assert [a.error_type for a in call.attempts] == ["TimeoutError", "TimeoutError", None]
    assert [a.backoff for a in call.attempts] == [0.01, 0.02, None]
    assert "try 2" in (call.attempts[1].message or "") and "TimeoutError" in (call.attempts[0].traceback or "")
    assert all(a.duration is not None for a in call.attempts)


def test_give_up_fails_with_context_and_compensates_in_reverse(app: tether.App) -> None:
    undone: list[Any] = []

    @app.tool(compensate=lambda booking: undone.append(("cancel", booking["id"])))
    def hold_seat(flight: str) -> dict[str, str]:
        return {"id": f"hold-{flight}"}

    def refund(charge: dict[str, str]) -> None:
        undone.append(("refund", charge["id"]))
        raise RuntimeError("refund API down")  # recorded, must not hide the original failure

    @app.tool(compensate=refund)
    def charge(amount: int) -> dict[str, str]:
        return {"id": f"ch-{amount}"}

    @app.tool(retry=tether.Retry(max_attempts=3, backoff=0, give_up_on=(PermissionError,)))
    def book(flight: str) -> None:
        raise PermissionError("fare class closed")

    @app.task
    def trip(ctx: tether.TaskContext) -> None:
        ctx.plan(["hold", "charge", "book"])
        with ctx.step("hold"):
            ctx.call(hold_seat, "BA117")
        with ctx.step("charge"):
            ctx.call(charge, 420)
        with ctx.step("book"):
            ctx.call(book, "BA117")

    run = app.run(trip, task_id="f1")
    assert run.status is tether.Status.FAILED
    assert undone == [("refund", "ch-420"), ("cancel", "hold-BA117")]
    failure = run.failure
    assert failure is not None
    assert (failure.exception_type, failure.message, failure.tool, failure.step) == (
        "PermissionError",
        "fare class closed",
        "book",
        "book",
    )
    assert failure.input == {"flight": "BA117"} and failure.call_key and failure.call_key.startswith("f1:3:book:")
    assert "PermissionError" in (failure.traceback or "")
    book_call = run.state.calls[2]
    assert book_call.status == "failed" and len(book_call.attempts) == 1  # give_up_on: no retry
    compensations = [c for c in run.state.calls if c.kind == "compensation"]
    assert [(c.compensates, c.status) for c in compensations] == [(2, "failed"), (1, "completed")]
    assert run.state.plan[2].status == "failed"
    assert app.resume("f1").status is tether.Status.FAILED and len(undone) == 2  # nothing runs again


def test_tool_error_can_be_caught_and_replays_the_same_way(app: tether.App) -> None:
    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0))
    def down() -> None:
        raise ConnectionError("no route")

    crash = {"now": True}

    @app.task
    def t(ctx: tether.TaskContext) -> str:
        try:
            ctx.call(down)
        except tether.ToolError as exc:
            fallback = f"fallback after {exc.attempts} attempts: {exc.error_type}"
        ctx.observe("fallback", fallback)
        if crash["now"]:
            raise KeyboardInterrupt
        return fallback

    with pytest.raises(KeyboardInterrupt):
        app.run(t, task_id="c1")
    crash["now"] = False
    run = app.resume("c1")  # the failed call is not retried; the same ToolError takes the same path
    assert run.output == "fallback after 2 attempts: ConnectionError"
    assert len(run.state.calls[0].attempts) == 2


def test_unstorable_result_fails_the_call_naming_tool_and_type(app: tether.App) -> None:
    @app.tool
    def weird() -> Any:
        return {"when": {1, 2}}

    @app.task
    def t(ctx: tether.TaskContext) -> Any:
        return ctx.call(weird)

    run = app.run(t)
    assert run.status is tether.Status.FAILED and run.failure is not None
    assert run.failure.tool == "weird" and "dict" in run.failure.message and "cannot be stored" in run.failure.message
    call = run.state.calls[0]
    assert call.status == "failed" and call.result is None


@pytest.mark.parametrize("readonly", [False, True])
def test_an_unstorable_result_is_recorded_once_as_the_attempt_that_failed(app: tether.App, readonly: bool) -> None:
    @app.tool(readonly=readonly, retry=tether.Retry(max_attempts=3, backoff=0))
    def weird() -> Any:
        return {"when": {1, 2}}

    @app.task
    def t(ctx: tether.TaskContext) -> Any:
        return ctx.call(weird)

    run = app.run(t, task_id="u1")
    assert run.status is tether.Status.FAILED
    kinds = [type(r.event).__name__ for r in app.log.events("u1") if type(r.event).__name__.startswith("Call")]
    # One intent (written before the attempt, or with its failure for a readonly call), not retried.
    assert kinds == ["CallStarted", "CallAttemptFailed", "CallFailed"]
    assert [a.number for a in run.state.calls[0].attempts] == [1]


def test_oversized_result_is_refused(store_url: str) -> None:
    app = tether.App(store_url, max_value_bytes=2000)

    @app.tool
    def big() -> str:
        return "x" * 5000

    @app.task
    def t(ctx: tether.TaskContext) -> str:
        return ctx.call(big)

    run = app.run(t)
    assert run.status is tether.Status.FAILED and run.failure is not None
    assert run.failure.exception_type == "ValueTooLargeError" and "str" in run.failure.message


def test_unstorable_output_fails_the_task(app: tether.App) -> None:
    @app.task
    def t(ctx: tether.TaskContext) -> Any:
        return object()

    run = app.run(t)
    assert run.status is tether.Status.FAILED and run.failure is not None
    assert run.failure.exception_type == "NotSerializableError"


def test_readonly_tools_skip_the_intent(app: tether.App) -> None:
    @app.tool(readonly=True)
    def look() -> int:
        return 7

    @app.tool
    def act() -> int:
        return 8

    @app.task
    def t(ctx: tether.TaskContext) -> int:
        return ctx.call(look) + ctx.call(act)

    run = app.run(t)
    types = [r.event.event_type for r in app.log.events(run.task_id)]
    assert types.count("CallStarted") == 1 and types.count("CallCompleted") == 2
    assert run.state.calls[0].readonly and not run.state.calls[1].readonly


def test_task_id_reuse_never_starts_a_second_copy(app: tether.App) -> None:
    count = {"n": 0}

    @app.task
    def t(ctx: tether.TaskContext, x: int) -> int:
        count["n"] += 1
        return x

    assert app.run(t, 1, task_id="same").output == 1
    assert app.run(t, 1, task_id="same").output == 1
    assert count["n"] == 1 and len(app.log.list()) == 1

    @app.task
    def other(ctx: tether.TaskContext) -> None:
        return None

    with pytest.raises(tether.InvalidInputError, match="exists as a"):
        app.run(other, task_id="same")


def test_an_existing_task_id_is_returned_whatever_the_arguments(app: tether.App) -> None:
    @app.task
    def t(ctx: tether.TaskContext, x: int) -> int:
        return x

    assert app.run(t, 1, task_id="same").output == 1
    assert app.run(t, task_id="same").output == 1  # x missing: the task exists, so it is returned
    assert app.start(t, 1, 2, task_id="same").output == 1
    with pytest.raises(tether.InvalidInputError, match="x"):
        app.run(t, task_id="new")  # a new task needs its arguments
    with pytest.raises(tether.TaskNotFoundError):
        app.get("new")  # and nothing was written


def test_a_run_of_a_new_task_holds_it_from_its_creation(app: tether.App) -> None:
    """A task a run creates is created leased to the run (one write: no lease taken after, no
    record read back), and nobody can claim it meanwhile; an existing one is leased as before."""
    seen: dict[str, Any] = {}
    taken: list[str] = []
    read: list[str] = []
    store = app.store
    acquire, read_events = store.acquire_lease, store.read_events

    def counting_acquire(tenant: str, task_id: str, *args: Any, **kwargs: Any) -> int | None:
        taken.append(task_id)
        return acquire(tenant, task_id, *args, **kwargs)

    def counting_read(tenant: str, task_id: str, **kwargs: Any) -> Any:
        read.append(task_id)
        return read_events(tenant, task_id, **kwargs)

    store.acquire_lease, store.read_events = counting_acquire, counting_read  # type: ignore[method-assign]

    @app.task
    def t(ctx: tether.TaskContext) -> str:
        row = app.log.get(ctx.task_id)
        seen["held"] = (row.lease_owner, row.lease_token)
        seen["claimed"] = store.claim(app.tenant, "thief", 30, time.time())
        return ctx.task_id

    assert app.run(t, task_id="fresh").output == "fresh"
    assert seen == {"held": (app.worker_id, 1), "claimed": None}
    assert taken == [] and read == []
    assert app.log.get("fresh").lease_owner is None  # given back at the end
    app.start(t, task_id="made")
    assert app.run(t, task_id="made").output == "made"
    assert taken == ["made"] and read == ["made"]


def test_task_parameters_that_collide_with_start_options_are_refused(app: tether.App) -> None:
    with pytest.raises(tether.TaskDefinitionError, match="task_id"):

        @app.task
        def bad(ctx: tether.TaskContext, task_id: str) -> None: ...

    with pytest.raises(tether.TaskDefinitionError, match="ctx"):

        @app.task
        def no_ctx() -> None: ...


def test_steps_decisions_observations_and_scratch(app: tether.App) -> None:
    @app.task
    def t(ctx: tether.TaskContext) -> Any:
        ctx.plan(["search", "pick"])
        with ctx.step("search"):
            ctx.scratch["tmp"] = 1
            ctx.observe("price", 420, source="search_flights")
        assert ctx.scratch == {}
        with ctx.step("pick"):
            choice = ctx.decide("flight", "BA117", rationale="cheapest nonstop", alternatives=["AA100"])
        return {"choice": choice, "position": ctx.state.position}

    run = app.run(t)
    assert run.output == {"choice": "BA117", "position": "all 2 steps committed"}
    decision = run.state.decisions[0]
    assert (decision.name, decision.rationale, decision.alternatives) == ("flight", "cheapest nonstop", ["AA100"])
    assert run.state.observations["price"].source == "search_flights"


def test_phases_are_checked(app: tether.App) -> None:
    phases = tether.Phases({"planning": ["executing"], "executing": ["done"], "done": []})

    @app.task(phases=phases)
    def t(ctx: tether.TaskContext, skip: bool) -> str | None:
        if not skip:
            ctx.transition("executing")
        ctx.transition("done")
        return ctx.state.phase

    assert app.run(t, False).output == "done"
    run = app.run(t, True)
    assert run.status is tether.Status.FAILED and run.failure is not None
    assert run.failure.exception_type == "InvalidTransition" and "'planning' to 'done'" in run.failure.message


class TripV1(BaseModel):
    schema_version: int = 1
    dest: str = ""
    nights: int = 0


class TripV2(BaseModel):
    schema_version: int = 2
    destination: str = ""
    nights: int = 0


def test_typed_data_validates_and_records_only_changes(app: tether.App) -> None:
    @app.task(state=TripV1)
    def t(ctx: tether.TaskContext) -> Any:
        ctx.update(dest="NYC", nights=0)
        with pytest.raises(tether.InvalidInputError):
            ctx.update(nights="many")
        return ctx.data.model_dump()

    run = app.run(t)
    assert run.output == {"schema_version": 1, "dest": "NYC", "nights": 0}
    updates = [r.event for r in app.log.events(run.task_id) if r.event.event_type == "DataUpdated"]
    assert [u.fields for u in updates] == [{"dest": "NYC"}]  # type: ignore[attr-defined]


def test_typed_data_upcast_on_resume(store_url: str) -> None:
    old = tether.App(store_url)

    @old.task(name="trip", state=TripV1)
    def trip_v1(ctx: tether.TaskContext) -> Any:
        ctx.update(dest="NYC", nights=3)
        raise KeyboardInterrupt  # the process stops here; the code is upgraded meanwhile

    with pytest.raises(KeyboardInterrupt):
        old.run(trip_v1, task_id="u1")

    new = tether.App(old.store)

    @new.task(name="trip", state=TripV2, upcast={1: lambda d: {"destination": d["dest"], "nights": d["nights"]}})
    def trip_v2(ctx: tether.TaskContext) -> Any:
        ctx.update(destination="NYC", nights=3)  # recorded under v1: replayed, not written again
        ctx.update(nights=4)
        return ctx.data.model_dump()

    run = new.resume("u1")
    assert run.output == {"schema_version": 2, "destination": "NYC", "nights": 4}, run.failure
    assert run.state.data_version == 2 and run.state.data == {"schema_version": 2, "destination": "NYC", "nights": 4}

    stale = tether.App(old.store)
    stale.task(name="trip", state=TripV2)(trip_v2)
    created = stale.log.create(type="trip", data={"schema_version": 1, "dest": "LA"}, data_version=1)
    with pytest.raises(tether.SchemaVersionError) as info:
        stale.resume(created.task_id)
    assert (info.value.found, info.value.supported) == (1, 2)
    assert "no upcaster" in str(info.value)


def test_async_tasks_use_the_same_engine(app: tether.App) -> None:
    sink = Sink()

    @app.tool(retry=tether.Retry(max_attempts=3, backoff=0))
    async def fetch(x: int) -> int:
        await asyncio.sleep(0)
        if x == 2 and not sink.raw:
            sink.raw.append(("first-failure", x))
            raise TimeoutError("slow")
        return x * 10

    @app.task
    async def t(ctx: tether.AsyncTaskContext, n: int) -> int:
        total = 0
        for i in range(n):
            total += await ctx.call(fetch, i)
        return total

    run = app.run(t, 3)
    assert run.status is tether.Status.COMPLETED and run.output == 30
    assert [len(c.attempts) for c in run.state.calls] == [1, 1, 2]

    async def main() -> tether.TaskHandle:
        return await app.run_async(t, 2)

    assert asyncio.run(main()).output == 10


def test_a_sync_task_may_call_an_async_tool(app: tether.App) -> None:
    async def answer() -> int:
        return 42

    @app.task
    def t(ctx: tether.TaskContext) -> int:
        return ctx.call(answer)

    assert app.run(t).output == 42


def test_pydantic_results_come_back_as_models(app: tether.App) -> None:
    class Flight(BaseModel):
        id: str
        price: float

    @app.tool
    def search() -> Flight:
        return Flight(id="BA117", price=420)

    @app.task
    def t(ctx: tether.TaskContext) -> str:
        flight = ctx.call(search)
        assert isinstance(flight, Flight)
        return flight.id

    assert app.run(t).output == "BA117"
