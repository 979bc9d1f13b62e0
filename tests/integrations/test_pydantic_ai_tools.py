"""The Pydantic AI adapter's tool calls: what a tool returns or raises reaches the model (and the
code around the run) the same live, replayed after a crash, and as in a plain Pydantic AI run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, RunContext, SkipToolExecution
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

import tether
from tether.integrations.pydantic_ai import TetherDurability

LABEL = b"\x89PNG\r\n\x1a\n\x00\xff"  # not UTF-8: bytes JSON cannot hold as they are


@dataclass
class Parcel:
    id: str
    due: datetime


class ParcelLostError(Exception):
    """A tool's own exception, which the code around the run catches."""


WHEN = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
RETURNS: dict[str, Callable[[], Any]] = {
    "tool_return": lambda: ToolReturn(
        return_value={"status": "lost"},
        content=["The label:", BinaryContent(LABEL, media_type="image/png")],
        metadata={"scanned": WHEN},
    ),
    "binary": lambda: BinaryContent(LABEL, media_type="image/png"),
    "files_in_a_list": lambda: [
        "the label",
        ImageUrl("https://example.com/label.png"),
        BinaryContent(LABEL, media_type="image/png"),
    ],
    "dataclass": lambda: Parcel("p1", WHEN),
    "datetime": lambda: WHEN,
    "bytes": lambda: LABEL,
    "marker_lookalike": lambda: {"__tether_model_retry__": "a user's own key"},
}


def seen_by_model(messages: list[ModelMessage]) -> list[Any]:
    """The messages as Pydantic AI dumps them, without what differs from run to run by nature
    (timestamps, run ids)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("timestamp", "run_id", "conversation_id")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))  # type: ignore[no-any-return]


def model_view(messages: list[ModelMessage]) -> list[Any]:
    """What a provider is sent of each request part: a tool return's text and files, a prompt's content."""
    out: list[Any] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                out.append(("tool", part.model_response_str(), [f.identifier for f in part.files], part.outcome))
            elif isinstance(part, UserPromptPart):
                content = [part.content] if isinstance(part.content, str) else part.content
                out.append(("user", [c if isinstance(c, str) else c.identifier for c in content]))
    return out


class Script:
    """A FunctionModel script: asks for tool ``t``, then answers; keeps what each request carried,
    and fails its second request while ``down`` (a provider outage: the task fails there, its tool
    call already recorded, and is retried)."""

    def __init__(self, *calls: dict[str, Any]) -> None:
        self.calls = calls or ({"x": 1},)
        self.seen: list[list[Any]] = []
        self.views: list[list[Any]] = []
        self.down = False

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(seen_by_model(messages))
        self.views.append(model_view(messages))
        turn = sum(isinstance(m, ModelRequest) for m in messages) - 1
        if turn < len(self.calls):
            return ModelResponse(parts=[ToolCallPart("t", self.calls[turn], tool_call_id=f"c{turn}")])
        if self.down:
            raise ConnectionError("the provider is down")
        return ModelResponse(parts=[TextPart("Noted.")])


def durable_task(app: tether.App, agent: Agent[None, str], name: str) -> Any:
    @app.task(name=name)
    async def task(ctx: tether.AsyncTaskContext) -> str:
        return (await agent.run("Where is my parcel?", capabilities=[TetherDurability(ctx)])).output

    return task


def reopened(app: tether.App, url: str) -> tether.App:
    """Another App on the same database (a new process would open it so), or the same memory store."""
    return app if url == "memory://" else tether.App(url)


@pytest.mark.parametrize("kind", list(RETURNS))
def test_a_replayed_tool_return_reaches_the_model_as_the_live_one_did(store_url: str, kind: str) -> None:
    """A tool returns a value JSON cannot hold as it is (a ``ToolReturn`` with content for the model,
    ``BinaryContent``, a dataclass, bytes...): the durable run gives the model what a plain run does
    (the same text and files), and a retried run, whose tool call comes from the record, gives the
    model the same messages again, part for part, without running the tool again."""
    ran: list[int] = []

    def make(script: Script) -> Agent[None, str]:
        agent = Agent(FunctionModel(script), name="tracker")

        @agent.tool_plain
        def t(x: int) -> Any:
            ran.append(x)
            return RETURNS[kind]()

        return agent

    plain = Script()
    asyncio.run(make(plain).run("Where is my parcel?"))
    script = Script()
    script.down = True
    app = tether.App(store_url)
    first = app.run(durable_task(app, make(script), "track"), task_id="p1")
    assert first.status is tether.Status.FAILED and "provider is down" in str(first.failure)
    assert script.views[1] == plain.views[1]  # the model is sent what a plain run sends it
    ran.clear()
    script.down = False
    again = reopened(app, store_url)
    if again is not app:
        durable_task(again, make(script), "track")
    assert again.retry("p1").output == "Noted."
    assert ran == []  # the tool's result came from the record
    assert [s[-1] for s in script.seen[1:]] == [script.seen[1][-1]] * 2  # the tool's answer, equal
    assert script.seen[2] == script.seen[1]
    assert again.replay("p1").clean


def test_a_tools_exception_is_raised_as_itself_live_and_as_its_type_on_replay(store_url: str) -> None:
    """A tool raises its own exception: the code around the run catches it by its type, live as in a
    plain run (tether's ToolError went there instead), and again when the run is replayed after the
    task waited: the recorded failure is raised as a ``tether.ToolError`` that is also a
    ``ParcelLostError``, with the same message."""
    ran: list[int] = []
    caught: list[BaseException] = []
    script = Script()
    agent = Agent(FunctionModel(script), name="tracker")

    @agent.tool_plain
    def t(x: int) -> str:
        ran.append(x)
        raise ParcelLostError("no scan since Tuesday")

    with pytest.raises(ParcelLostError):
        asyncio.run(agent.run("Where is my parcel?"))
    ran.clear()

    def define(app: tether.App) -> Any:
        @app.task(name="lost")
        async def lost(ctx: tether.AsyncTaskContext) -> str:
            try:
                return (await agent.run("Where is my parcel?", capabilities=[TetherDurability(ctx)])).output
            except ParcelLostError as exc:
                caught.append(exc)
                answer = await ctx.wait_for_input("next", prompt=f"{type(exc).__name__}: {exc}")
                return f"{exc} / {answer}"

        return lost

    app = tether.App(store_url)
    first = app.run(define(app), task_id="l1")
    assert first.status is tether.Status.AWAITING_INPUT, first.failure
    assert type(caught[0]) is ParcelLostError and ran == [1]  # live: the tool's own exception object
    again = reopened(app, store_url)
    if again is not app:
        define(again)
    again.send_input("l1", "next", "refund")
    assert again.resume("l1").output == "no scan since Tuesday / refund"
    assert ran == [1]  # replayed, not run again
    replayed = caught[1]
    assert isinstance(replayed, ParcelLostError) and isinstance(replayed, tether.ToolError)
    assert type(replayed).__name__ == "ParcelLostError" and str(replayed) == "no scan since Tuesday"
    assert replayed.error_type == "ParcelLostError" and replayed.error_message == "no scan since Tuesday"
    assert again.replay("l1").clean


def test_an_uncaught_tool_exception_fails_the_task_as_itself(store_url: str) -> None:
    """Uncaught, the tool's exception leaves the run and fails the task as it is (the code saw a
    ToolError), its type and message in the failure record; the failed task replays clean, the
    replay raising the recorded failure under the same type name; a retry runs the tool again."""
    app = tether.App(store_url)
    agent = Agent(FunctionModel(Script()), name="tracker")
    left: list[BaseException] = []
    ran: list[int] = []

    @agent.tool_plain
    def t(x: int) -> str:
        ran.append(x)
        raise ParcelLostError("no scan since Tuesday")

    @app.task(name="lost")
    async def lost(ctx: tether.AsyncTaskContext) -> str:
        try:
            return (await agent.run("Where is my parcel?", capabilities=[TetherDurability(ctx)])).output
        except BaseException as exc:
            left.append(exc)
            raise

    failed = app.run(lost, task_id="u1")
    assert failed.status is tether.Status.FAILED and failed.failure is not None
    assert type(left[0]) is ParcelLostError
    assert (failed.failure.exception_type, failed.failure.message) == ("ParcelLostError", "no scan since Tuesday")
    assert app.replay("u1").clean
    assert isinstance(left[1], ParcelLostError) and str(left[1]) == "no scan since Tuesday"
    assert app.retry("u1").status is tether.Status.FAILED and ran == [1, 1]  # a retry runs a failed call again


def steered_then_resumed(
    make: Callable[[Script], Agent[None, str]], ran: list[int], store_url: str, task_id: str, *, answered: str
) -> None:
    """The agent ``make`` builds, run plain: its first call ``answered`` (a retry prompt, a failed
    result); then durably, the provider down at the turn after it (the task fails there), and retried
    in a fresh App: the model is sent what a plain run sends it, and the tool does not run again."""
    plain = Script({"x": 1}, {"x": 2})
    asyncio.run(make(plain).run("Where is my parcel?"))
    assert plain.views[1][-1][3] == answered
    script = Script({"x": 1}, {"x": 2})
    script.down = True
    app = tether.App(store_url)
    first = app.run(durable_task(app, make(script), "track"), task_id=task_id)
    assert first.status is tether.Status.FAILED and "provider is down" in str(first.failure), first.failure
    assert script.views[:3] == plain.views[:3]
    ran.clear()
    script.down = False
    again = reopened(app, store_url)
    if again is not app:
        durable_task(again, make(script), "track")
    assert again.retry(task_id).output == "Noted."
    assert ran == [] and len(script.seen) == 4 and script.seen[3] == script.seen[2]
    assert again.replay(task_id).clean


class OrderIn(BaseModel):
    id: str


def test_a_validation_error_the_tool_raises_is_a_retry_for_the_model_live_and_replayed(store_url: str) -> None:
    """Pydantic AI answers a ``ValidationError`` from a tool with a retry prompt (the errors, for the
    model to fix its call); the durable run did not (the call failed, and the task with it). Now the
    same live, and the same replayed (the errors are the call's recorded answer)."""
    ran: list[int] = []

    def make(script: Script) -> Agent[None, str]:
        agent = Agent(FunctionModel(script), name="tracker")

        @agent.tool_plain
        def t(x: int) -> str:
            ran.append(x)
            return OrderIn.model_validate({"id": x}).id if x == 1 else "found"

        return agent

    steered_then_resumed(make, ran, store_url, "v1", answered="retried")


class Cached(AbstractCapability[Any]):
    """Answers tool ``t`` from a cache (``SkipToolExecution``), inside the durable call."""

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        raise SkipToolExecution(BinaryContent(LABEL, media_type="image/png"))


def test_a_tool_skipped_by_a_capability_answers_with_the_skips_result(store_url: str) -> None:
    """A capability's ``before_tool_execute`` skips the tool with a result (``SkipToolExecution``):
    the result is the call's answer, live and replayed (the durable call failed instead)."""
    ran: list[int] = []

    def make(script: Script) -> Agent[None, str]:
        agent = Agent(FunctionModel(script), name="tracker", capabilities=[Cached()])

        @agent.tool_plain
        def t(x: int) -> str:
            ran.append(x)
            return "from the tool"

        return agent

    plain = Script()
    asyncio.run(make(plain).run("Where is my parcel?"))
    script = Script()
    script.down = True
    app = tether.App(store_url)
    first = app.run(durable_task(app, make(script), "track"), task_id="k1")
    assert first.status is tether.Status.FAILED and "provider is down" in str(first.failure), first.failure
    assert script.views[1] == plain.views[1]
    script.down = False
    again = reopened(app, store_url)
    if again is not app:
        durable_task(again, make(script), "track")
    assert again.retry("k1").output == "Noted."
    assert ran == [] and script.seen[2] == script.seen[1]
    assert again.replay("k1").clean


class Checked(AbstractCapability[Any]):
    """Checks tool ``t``'s result after it ran: a vague one is sent back (``ModelRetry``) or failed
    (``ToolFailed``), raised by the hook, inside the durable call."""

    def __init__(self, signal: type[Exception]) -> None:
        self.signal = signal

    async def after_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any], result: Any
    ) -> Any:
        if result == "somewhere":
            raise self.signal("be specific")
        return result


@pytest.mark.parametrize("signal", [ModelRetry, ToolFailed])
def test_a_retry_or_failure_a_hook_raises_steers_the_run_live_and_replayed(
    store_url: str, signal: type[Exception]
) -> None:
    """A capability's hook around the tool raises ``ModelRetry`` (or ``ToolFailed``): Pydantic AI
    answers the call with a retry prompt (or a failed result), outside the durable call. The durable
    call recorded it as the tool failing, and the task failed; now it is the call's answer, raised
    again from the record live and replayed."""
    ran: list[int] = []

    def make(script: Script) -> Agent[None, str]:
        agent = Agent(FunctionModel(script), name="tracker", capabilities=[Checked(signal)])

        @agent.tool_plain
        def t(x: int) -> str:
            ran.append(x)
            return "somewhere" if x == 1 else "Leeds"

        return agent

    steered_then_resumed(make, ran, store_url, "h1", answered="retried" if signal is ModelRetry else "failed")


def test_a_replayed_run_counts_the_tool_calls_the_live_one_did(store_url: str) -> None:
    """Pydantic AI counts a tool call (``usage.tool_calls``, which ``UsageLimits(tool_calls_limit=)``
    checks) when the tool returns; a replayed tool returns from the record without running, and the
    resumed run counted none of them."""
    ran: list[int] = []
    agent = Agent(FunctionModel(Script({"x": 1}, {"x": 2})), name="tracker")

    @agent.tool_plain
    def t(x: int) -> str:
        ran.append(x)
        return "Leeds"

    def define(app: tether.App) -> Any:
        @app.task(name="counted")
        async def counted(ctx: tether.AsyncTaskContext) -> str:
            result = await agent.run("Where is my parcel?", capabilities=[TetherDurability(ctx)])
            await ctx.wait_for_input("go on")
            return f"{result.usage.requests} requests, {result.usage.tool_calls} tool calls"

        return counted

    app = tether.App(store_url)
    assert app.run(define(app), task_id="n1").status is tether.Status.AWAITING_INPUT
    again = reopened(app, store_url)
    if again is not app:
        define(again)
    again.send_input("n1", "go on", True)
    assert again.resume("n1").output == "3 requests, 2 tool calls"  # as a plain run counts them
    assert ran == [1, 2]


def test_a_nan_a_tool_returns_is_refused_by_name(store_url: str) -> None:
    """tether stores no NaN (JSON has none): a tool that returns one fails its call, saying so, as
    before results were kept as Pydantic AI keeps them (whose JSON would make it a silent null, and
    the replayed tool would answer the model something else than the live one did)."""
    app = tether.App(store_url)
    agent = Agent(FunctionModel(Script()), name="tracker")

    @agent.tool_plain
    def t(x: int) -> list[float]:
        return [1.5, float("nan")]

    failed = app.run(durable_task(app, agent, "nan"), task_id="f1")
    assert failed.status is tether.Status.FAILED and failed.failure is not None
    assert failed.failure.exception_type == "NotSerializableError" and "NaN" in failed.failure.message
