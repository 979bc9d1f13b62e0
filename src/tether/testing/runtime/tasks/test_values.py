"""Values round-trip identically on every backend, or are refused with the same error everywhere."""
# mypy: disable-error-code="assignment,unused-ignore"

from __future__ import annotations

import asyncio
import math

import pytest

import tether
from tether.testing import opens_share

STRANGE = {"nul": "a\0b", "key\0": ["\0", "\\u0000", "x\0"], "nested": {"deep": "\0\0"}}


def _app(url: str) -> tether.App:
    app = tether.App(url)

    @app.tool
    def echo(value: object) -> object:
        return value

    @app.task
    def relay(ctx: tether.TaskContext, value: object) -> object:
        return ctx.call(echo, value)

    return app


def test_nul_characters_round_trip(store_url: str) -> None:
    app = _app(store_url)
    run = app.run("relay", STRANGE)
    assert run.status is tether.Status.COMPLETED and run.output == STRANGE
    elsewhere = tether.App(store_url) if opens_share(store_url) else app
    state = tether.TaskLog(app.store).load(run.task_id)
    assert state.inputs == {"value": STRANGE} and state.output == STRANGE
    assert state.calls[0].result == STRANGE and state.calls[0].status == "completed"
    chat = app.session("s1")
    chat.add("user", "a\0b")
    assert [m.content for m in elsewhere.session("s1").messages()] == ["a\0b"]
    app.close()


def test_a_nul_tool_result_does_not_fail_the_task(store_url: str) -> None:
    app = _app(store_url)
    run = app.run("relay", "a\0b")
    assert (run.status, run.output, run.failure) == (tether.Status.COMPLETED, "a\0b", None)
    app.close()


def _deep(levels: int) -> list[object]:
    top: list[object] = []
    current = top
    for _ in range(levels):
        inner: list[object] = []
        current.append(inner)
        current = inner
    return top


def test_deep_nesting_is_refused_at_every_entry_point(store_url: str) -> None:
    app = _app(store_url)
    deep = _deep(10_000)
    with pytest.raises(tether.NotSerializableError, match="levels deep"):
        app.run("relay", deep)
    waiting = app.start("relay", 1)
    with pytest.raises(tether.NotSerializableError, match="levels deep"):
        app.send_input(waiting.task_id, "k", deep)
    with pytest.raises(tether.NotSerializableError, match="levels deep"):
        app.user("ada").set("k", deep)
    with pytest.raises(tether.NotSerializableError, match="levels deep"):
        app.fork(waiting.task_id, at=1, inputs={"value": deep})
    app.close()


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_not_stored_as_null(store_url: str, number: float) -> None:
    app = _app(store_url)
    with pytest.raises(tether.NotSerializableError, match="NaN or infinity"):
        app.run("relay", {"a": [1, number]})
    assert app.list_tasks() == []
    waiting = app.start("relay", 1)
    with pytest.raises(tether.NotSerializableError, match="NaN or infinity"):
        app.send_input(waiting.task_id, "k", number)
    with pytest.raises(tether.NotSerializableError, match="NaN or infinity"):
        app.user("ada").set("k", number)
    with pytest.raises(tether.NotSerializableError, match="NaN or infinity"):
        app.session("s1").add("user", "hi", score=number)

    @app.tool
    def measure() -> float:
        return number

    @app.task
    def uses(ctx: tether.TaskContext) -> float:
        return float(ctx.call(measure))

    run = app.run(uses)
    assert run.status is tether.Status.FAILED and run.failure is not None
    assert "NaN or infinity" in run.failure.message
    assert app.state(run.task_id).calls[0].result is None
    app.close()


@pytest.mark.parametrize("number", [math.nan, math.inf])
def test_a_nan_beside_none_fields_and_null_text_is_still_refused(store_url: str, number: float) -> None:
    """The check skips its walk only when an event's nulls are exactly its None fields: a NaN adds
    one, and text that reads "null" cannot hide it (it only adds more)."""
    log = tether.TaskLog(store_url)
    state = log.create(type="t")
    for value in ({"x": number}, ["null", number], {"null": None, "y": number}):
        with pytest.raises(tether.NotSerializableError, match="NaN or infinity"):
            log.append(state.task_id, [tether.events.DataUpdated(fields={"v": value})], state.version)
    assert log.append(state.task_id, [tether.events.DataUpdated(fields={"v": "null", "w": None})], 1) == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_result_too_large_to_store_is_offered_once_and_fails_the_call(store_url: str, kind: str) -> None:
    # The value is JSON (so the call's own check passes), but its event is over the log's limit: the
    # log refuses it before anything is written, and the call records its failure at once. Offering
    # it again would write nothing more, but within an asyncio.gather it moved the failure's records
    # after its siblings' (the refused write waited for another group commit).
    app = tether.App(store_url, max_value_bytes=4_000)
    offered: list[int] = []
    append = app.log.append

    def counting(task_id: str, events: list[tether.events.Event], *args: object, **kwargs: object) -> int:
        offered.extend(e.n for e in events if isinstance(e, tether.events.CallCompleted))  # type: ignore[attr-defined]
        return append(task_id, events, *args, **kwargs)  # type: ignore[arg-type]

    app.log.append = counting  # type: ignore[method-assign]

    @app.tool
    def big() -> str:
        return "x" * 5_000

    @app.task(name="sync_task")
    def sync_task(ctx: tether.TaskContext) -> str:
        try:
            return str(ctx.call(big))
        except tether.ToolError as exc:
            return exc.error_type

    @app.task(name="async_task")
    async def async_task(ctx: tether.AsyncTaskContext) -> str:
        try:
            return str(await ctx.call(big))
        except tether.ToolError as exc:
            return exc.error_type

    run = app.run(sync_task) if kind == "sync" else asyncio.run(app.run_async(async_task))
    assert run.status is tether.Status.COMPLETED and run.output == "ValueTooLargeError"
    assert offered == [1]  # once
    events = [r.event.event_type for r in app.log.events(run.task_id)]
    assert events[2:5] == ["CallStarted", "CallAttemptFailed", "CallFailed"], events
    app.close()
