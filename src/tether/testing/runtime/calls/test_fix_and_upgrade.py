"""When the code is wrong or changes: results, retries, patches, checks, and mistakes caught."""
# mypy: disable-error-code="no-any-return,union-attr,unused-ignore"

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

import tether


@pytest.fixture
def app(store_url: str) -> tether.App:
    return tether.App(store_url)


def _events(app: tether.App, task_id: str) -> list[Any]:
    return [tuple(r) for r in app.store.read_events(app.tenant, task_id)]


# ---------------------------------------------------------------- result() and retry


def test_result_returns_the_output_or_raises_with_the_failure(app: tether.App) -> None:
    @app.task
    def divide(ctx: tether.TaskContext, a: int, b: int) -> float:
        return a / b

    assert app.run(divide, 1, 2).result() == 0.5
    with pytest.raises(tether.TaskFailedError) as info:
        app.run(divide, 1, 0, task_id="d0").result()
    assert "ZeroDivisionError" in str(info.value) and "tether retry d0" in str(info.value)
    assert info.value.failure is not None and info.value.failure["exception_type"] == "ZeroDivisionError"

    @app.task
    def asks(ctx: tether.TaskContext) -> Any:
        return ctx.wait_for_input("ok")

    with pytest.raises(tether.TaskNotFinishedError, match="awaiting_input for input 'ok'"):
        app.run(asks).result()


def test_retry_runs_the_fixed_code_reusing_calls_before_the_failure(app: tether.App) -> None:
    ran: list[str] = []
    bug = {"on": True}
    undone: list[Any] = []

    @app.tool
    def hold(seat: str) -> str:
        ran.append(f"hold {seat}")
        return f"held {seat}"

    @app.tool
    def release(result: str) -> None:
        undone.append(result)

    @app.tool(retry=tether.Retry(max_attempts=2, backoff=0))
    def charge(amount: int) -> str:
        ran.append(f"charge {amount}")
        if bug["on"]:
            raise ValueError("card declined")
        return f"charged {amount}"

    @app.task
    def book(ctx: tether.TaskContext) -> str:
        ctx.plan(["hold", "charge", "confirm"])
        with ctx.step("hold"):
            held = ctx.call(hold, "12A", compensate=release)
        with ctx.step("charge"):
            charged = ctx.call(charge, 420)
        with ctx.step("confirm"):
            return f"{held}, {charged}, {ctx.call(hold, 'confirmed')}"

    failed = app.run(book, task_id="b")
    assert failed.status is tether.Status.FAILED and undone == ["held 12A"]
    assert ran == ["hold 12A", "charge 420", "charge 420"]
    # Running it again returns it as it is: a failure stays a failure until it is retried.
    assert app.run(book, task_id="b").status is tether.Status.FAILED and len(ran) == 3
    bug["on"] = False
    ran.clear()
    retried = app.retry("b", actor="ops")
    assert retried.result() == "held 12A, charged 420, held confirmed"
    assert ran == ["charge 420", "hold confirmed"]  # the hold was reused; the failed call and what follows ran
    charge_call = retried.state.call(2)
    assert charge_call is not None and [a.number for a in charge_call.attempts] == [1, 2, 3]
    assert [s.status for s in retried.state.plan] == ["completed"] * 3
    retry_lines = [h.summary for h in app.history("b") if h.type == "RetryRequested"]
    assert retry_lines == ["retried by ops after ValueError: card declined; call #2 runs again"]
    assert app.replay("b").clean
    with pytest.raises(tether.InvalidInputError, match="is completed; only a failed task can be retried"):
        app.retry("b")


def test_a_second_failure_after_a_retry_does_not_compensate_twice(app: tether.App) -> None:
    undone: list[Any] = []

    @app.tool
    def hold(seat: str) -> str:
        return f"held {seat}"

    @app.tool
    def release(result: str) -> None:
        undone.append(result)

    @app.tool
    def charge(amount: int) -> str:
        raise ValueError("still declined")

    @app.task
    def book(ctx: tether.TaskContext) -> str:
        held = ctx.call(hold, "12A", compensate=release)
        return f"{held} {ctx.call(charge, 1)}"

    app.run(book, task_id="b")
    again = app.retry("b")
    assert again.status is tether.Status.FAILED and undone == ["held 12A"]
    assert app.replay("b").clean


def test_retry_refuses_a_task_that_did_not_fail(app: tether.App) -> None:
    @app.task
    def waits(ctx: tether.TaskContext) -> Any:
        return ctx.wait_for_input("go")

    app.run(waits, task_id="w")
    rows = _events(app, "w")
    with pytest.raises(tether.InvalidInputError, match="'w' is awaiting_input; only a failed task can be retried"):
        app.retry("w")
    assert _events(app, "w") == rows


def test_retry_of_an_async_task(app: tether.App) -> None:
    bug = {"on": True}

    @app.tool
    async def fetch(n: int) -> int:
        if bug["on"] and n == 2:
            raise RuntimeError("flaky upstream")
        return n

    @app.task
    async def gather_all(ctx: tether.AsyncTaskContext) -> list[int]:
        return list(await asyncio.gather(*(ctx.call(fetch, n) for n in range(4))))

    assert app.run(gather_all, task_id="g").status is tether.Status.FAILED
    bug["on"] = False
    assert app.retry("g").result() == [0, 1, 2, 3]
    assert app.replay("g").clean


# ---------------------------------------------------------------- upgrades


def _mail_tools(app: tether.App, ran: list[str]) -> tuple[Any, ...]:
    """draft, check_tone, keep, send: each notes in ``ran`` that it ran."""

    @app.tool
    def draft(text: str) -> str:
        ran.append("draft")
        return text

    @app.tool
    def check_tone(text: str) -> str:
        ran.append("tone")
        return text + " (polite)"

    @app.tool
    def keep(text: str) -> str:
        ran.append("keep")
        return text

    @app.tool
    def send(text: str) -> str:
        ran.append("send")
        return f"sent {text}"

    return draft, check_tone, keep, send


def _mail_code(tools: tuple[Any, ...]) -> tuple[Any, Any, Any]:
    """The task's code before the change, after it behind a patch marker, and after it unmarked."""
    draft, check_tone, keep, send = tools

    def old_code(ctx: tether.TaskContext) -> str:
        text = ctx.call(draft, "hello")
        text = ctx.call(keep, text)
        ctx.wait_for_input("approve")
        return str(ctx.call(send, text))

    def new_code(ctx: tether.TaskContext) -> str:
        text = ctx.call(draft, "hello")
        if ctx.patched("tone-check"):
            text = ctx.call(check_tone, text)
        text = ctx.call(keep, text)
        ctx.wait_for_input("approve")
        return str(ctx.call(send, text))

    def unpatched_new_code(ctx: tether.TaskContext) -> str:
        text = ctx.call(draft, "hello")
        text = ctx.call(check_tone, text)  # inserted before recorded work: old tasks cannot replay it
        text = ctx.call(keep, text)
        ctx.wait_for_input("approve")
        return str(ctx.call(send, text))

    return old_code, new_code, unpatched_new_code


def test_patched_code_replays_old_tasks_on_the_old_path_and_runs_new_ones_on_the_new(app: tether.App) -> None:
    ran: list[str] = []
    tools = _mail_tools(app, ran)
    old_code, new_code, unpatched_new_code = _mail_code(tools)
    app.task(name="mail")(old_code)
    app.run("mail", task_id="old")  # waits for approval under the old code
    deployed = tether.App(app.store)
    for tool in tools:
        deployed.tool(tool)
    deployed.task(name="mail")(unpatched_new_code)
    report = deployed.check()
    assert not report.clean and [r.task_id for r in report.diverging] == ["old"]
    assert "call #2 keep" in str(report) and "call #2 check_tone" in str(report)

    deployed = tether.App(app.store)
    for tool in tools:
        deployed.tool(tool)
    deployed.task(name="mail")(new_code)
    assert deployed.check().clean
    deployed.run("mail", task_id="new")
    for task_id in ("old", "new"):
        deployed.send_input(task_id, "approve", True)
    ran.clear()
    assert deployed.resume("old").result() == "sent hello"  # the old path: no tone check
    assert deployed.resume("new").result() == "sent hello (polite)"
    assert ran == ["send", "send"]  # the new task checked the tone before its wait
    assert deployed.replay("old").clean and deployed.replay("new").clean
    assert deployed.check(finished=10).clean


@pytest.mark.parametrize("stopped", ["waiting", "sleeping"])
def test_changed_code_refused_on_resume_writes_nothing_to_a_waiting_or_sleeping_task(
    app: tether.App, stopped: str
) -> None:
    """A task waiting for an answer (answered) or sleeping, resumed by code that no longer replays its
    history: the divergence is raised and nothing is written. The run wrote that the task was running
    before its code ran, so the task was left running, with no holder, and no longer said it waited."""
    app.engine.inline_wait = 0.0

    @app.tool
    def draft(topic: str) -> str:
        return f"about {topic}"

    topic = {"now": "tether"}

    @app.task(name="mail")
    def mail(ctx: tether.TaskContext) -> str:
        text = ctx.call(draft, topic["now"])
        if stopped == "waiting":
            ctx.wait_for_input("approve")
        else:
            ctx.sleep(3600)
        return text

    first = app.run(mail, task_id="m")
    assert first.status is (tether.Status.AWAITING_INPUT if stopped == "waiting" else tether.Status.SLEEPING)
    if stopped == "waiting":
        app.send_input("m", "approve", True)
    before, status = _events(app, "m"), app.state("m").status
    topic["now"] = "something else"  # the next deploy asks for the first call with other arguments
    with pytest.raises(tether.NonDeterminismError, match="something else"):
        app.resume("m")
    assert _events(app, "m") == before
    assert app.state("m").status is status
    topic["now"] = "tether"  # the code fixed: the task goes on from where it was
    if stopped == "waiting":
        assert app.resume("m").output == "about tether"


def test_check_skips_tasks_of_other_apps_and_says_so(app: tether.App) -> None:
    other = tether.App(app.store)

    @other.task
    def elsewhere(ctx: tether.TaskContext) -> Any:
        return ctx.wait_for_input("x")

    other.run(elsewhere, task_id="e")
    report = app.check()
    assert report.clean and report.unknown == ["e"] and "unknown types skipped" in str(report)


# ---------------------------------------------------------------- mistakes caught


def test_a_tool_called_directly_inside_a_task_raises_naming_ctx_call(app: tether.App) -> None:
    sent: list[str] = []

    @app.tool
    def send(to: str) -> str:
        sent.append(to)
        return to

    @app.task
    def careless(ctx: tether.TaskContext) -> str:
        return send("ada")

    run = app.run(careless)
    assert run.status is tether.Status.FAILED and "ctx.call(send" in run.failure.message
    assert sent == [] and send("outside a task") == "outside a task"


def test_assigning_to_ctx_data_raises_naming_ctx_update(app: tether.App) -> None:
    class Draft(BaseModel):
        drafted: int = 0

    @app.task(state=Draft)
    def careless(ctx: tether.TaskContext) -> int:
        try:
            ctx.data.drafted = 5  # type: ignore[attr-defined]
        except tether.TetherError as exc:
            assert "ctx.update(drafted=" in str(exc)
        ctx.update(drafted=5)
        assert ctx.data == Draft(drafted=5) and isinstance(ctx.data, Draft)
        return int(ctx.data.drafted)  # type: ignore[attr-defined]

    assert app.run(careless, task_id="d").result() == 5
    assert app.state("d").data == {"drafted": 5}


@dataclasses.dataclass
class Slot:
    start: datetime
    room: str


class Quote(BaseModel):
    amount: int
    at: datetime


def test_tool_results_keep_their_declared_types_live_and_on_replay(app: tether.App) -> None:
    seen: list[Any] = []
    moment = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)

    @app.tool(readonly=True)
    def when() -> datetime:
        return moment

    @app.tool(readonly=True)
    def slot() -> Slot:
        return Slot(moment, "4B")

    @app.tool(readonly=True)
    def quotes() -> list[Quote]:
        return [Quote(amount=3, at=moment)]

    @app.task
    def typed(ctx: tether.TaskContext) -> str:
        values = [ctx.call(when), ctx.call(slot), ctx.call(quotes)]
        seen.append(values)
        ctx.wait_for_input("go")
        return "ok"

    app.run(typed, task_id="t")
    app.send_input("t", "go", True)
    app.resume("t")
    live, replayed = seen
    assert live == replayed == [moment, Slot(moment, "4B"), [Quote(amount=3, at=moment)]]


def test_a_value_that_cannot_be_stored_says_what_to_return(app: tether.App) -> None:
    @app.tool
    def opaque() -> Any:
        return object()

    @app.task
    def t(ctx: tether.TaskContext) -> Any:
        return ctx.call(opaque)

    failure = app.run(t).failure
    assert failure is not None and "opaque" in failure.message and "cannot be stored" in failure.message
