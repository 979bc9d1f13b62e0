"""A durable run is, to the model and to the code, the plain SDK's run, live and replayed: the
model is sent the same items; what a tool returned reaches the model as the same text and the
run's items carry the same output; what a tool raised reaches the code as the same exception.

Each test runs the agent with plain ``Runner.run`` first, for reference; then as a tether task
whose run stops at the model turn after the tool (the model is down), in one app; then it resumes
the task from the same database in a fresh app, where the tool's outcome comes from the record.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.exceptions import ModelBehaviorError
from agents.items import ToolCallOutputItem
from agents.result import RunResult
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from pydantic import BaseModel

import tether
from tether.integrations.openai_agents import run, run_streamed

set_tracing_disabled(True)


class Parcel(BaseModel):
    id: str
    status: str


@dataclasses.dataclass
class Stop:
    city: str
    at: datetime.datetime


class Opaque:
    """A value with no JSON form: the SDK sends the model its ``str()``."""

    def __str__(self) -> str:
        return "parcel A-1, somewhere"


class ParcelLostError(LookupError):
    """Raised by a tool; at module level, so a replay can name it again."""


OUTPUTS: dict[str, Callable[[], Any]] = {
    "pydantic": lambda: Parcel(id="A-1", status="lost"),
    "datetime": lambda: datetime.datetime(2024, 5, 1, 12, 30),
    "date": lambda: datetime.date(2024, 5, 1),
    "tuple": lambda: ("A-1", 3),
    "dataclass": lambda: Stop("Leipzig", datetime.datetime(2024, 5, 1, 9, 0)),
    "opaque": Opaque,
}


class Turns:
    """A scripted model that keeps the input of every turn: first it calls ``lookup``, then it
    answers; ``down`` makes the turn after the tool fail (the run stops there)."""

    def __init__(self, *, down: bool = False) -> None:
        self.inputs: list[Any] = []
        self.down = down

    def model(self) -> ScriptedModel:
        return ScriptedModel([ModelStep.respond(self.answer) for _ in range(4)])

    def answer(self, call: Any) -> Any:
        self.inputs.append(copy.deepcopy(call.input))
        if not any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in call.input):
            return [function_call("lookup", {}, call_id="c1")]
        if self.down:
            raise ConnectionError("the model is down")
        return [assistant_message("Done.")]


def _outputs(result: RunResult) -> list[tuple[Any, Any]]:
    """The run's tool output items: the raw item the model is sent, and the output the code reads."""
    return [(item.raw_item, item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def _stop_then_resume(
    url: str, make_agent: Callable[[Turns], Agent[Any]], *, streamed: bool = False
) -> tuple[Turns, Turns, list[Any]]:
    """Run the agent as a task that stops at the turn after the tool, then retry it in a fresh app.
    The live turns and the resumed turns, and the resumed run's result."""
    live, resumed = Turns(down=True), Turns()
    results: list[Any] = []

    def app_with(turns: Turns) -> tether.App:
        app = tether.App(url)
        agent = make_agent(turns)

        @app.task(name="track")
        async def track(ctx: tether.AsyncTaskContext) -> str:
            if streamed:
                result = run_streamed(ctx, agent, "Where is A-1?")
                async for _ in result.stream_events():
                    pass
                results.append(result)
            else:
                results.append(await run(ctx, agent, "Where is A-1?"))
            return str(results[-1].final_output)

        return app

    stopped = app_with(live).run("track", task_id="t1")
    assert stopped.status is tether.Status.FAILED
    done = app_with(resumed).retry("t1")
    assert done.status is tether.Status.COMPLETED, done.failure
    return live, resumed, results


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_the_model_is_sent_the_items_a_plain_run_sends(durable_url: str, streamed: bool) -> None:
    """The turn after a tool is sent the items a plain run sends: the model's function call as the
    model made it. Before, a recorded response came back with every field of its items set (the
    ones the model left out as ``None``), so the next turn sent the model ``'async_': None,
    'caller': None, 'namespace': None`` beside the call, live and replayed alike."""
    ran: list[str] = []

    def make_agent(turns: Turns) -> Agent[Any]:
        @function_tool
        def lookup() -> str:
            """Look the parcel up."""
            ran.append("lookup")
            return "lost"

        return Agent(name="Tracker", model=turns.model(), tools=[lookup])

    plain = Turns()
    asyncio.run(Runner.run(make_agent(plain), "Where is A-1?"))
    ran.clear()
    live, resumed, _ = _stop_then_resume(durable_url, make_agent, streamed=streamed)
    assert live.inputs == plain.inputs
    assert resumed.inputs == plain.inputs[1:]
    assert ran == ["lookup"]


@pytest.mark.parametrize("kind", sorted(OUTPUTS))
def test_a_tool_output_reaches_the_model_as_plain_runs_send_it(durable_url: str, kind: str) -> None:
    """A pydantic model, a datetime, a date, a tuple, a dataclass, a value with no JSON form: the
    model gets the text plain ``Runner.run`` sends it (``str()`` of the value, not of its JSON
    form), live and resumed, and the resumed run's items carry the output a plain run's do; the
    tool runs once. Before, tether handed the SDK the value's JSON form (a dict, an ISO string, a
    list), so the model read ``{'id': 'A-1', ...}`` where a plain run sends ``id='A-1' ...``; and a
    value with no JSON form failed the call."""
    ran: list[str] = []

    def make_agent(turns: Turns) -> Agent[Any]:
        @function_tool
        def lookup() -> Any:
            """Look the parcel up."""
            ran.append(kind)
            return OUTPUTS[kind]()

        return Agent(name="Tracker", model=turns.model(), tools=[lookup])

    plain = Turns()
    plain_result = asyncio.run(Runner.run(make_agent(plain), "Where is A-1?"))
    ran.clear()
    live, resumed, results = _stop_then_resume(durable_url, make_agent)
    assert live.inputs == plain.inputs  # the live run sends the model what a plain run sends
    assert resumed.inputs == plain.inputs[1:]  # the first turn from the record, the next one live
    assert ran == [kind]  # the tool ran once, in the live run
    ((raw, output),) = _outputs(results[-1])
    ((plain_raw, plain_output),) = _outputs(plain_result)
    assert raw == plain_raw
    if kind == "opaque":
        assert output == str(plain_output)  # no JSON form: the run's item holds the text the model got
    else:
        assert type(output) is type(plain_output) and output == plain_output


def test_a_tool_failure_the_sdk_answers_replays_as_it_was_answered(durable_url: str) -> None:
    """A tool with an output schema (``output_type=``) raises and the SDK's default failure
    function answers the model: the model gets the same answer live and resumed, and the tool runs
    once. Before, the resumed run handed the SDK the recorded answer as if the tool had returned it:
    the SDK held it to the output schema and the run failed with 'Function tool output does not
    match its declared output schema'."""
    ran: list[str] = []

    def make_agent(turns: Turns) -> Agent[Any]:
        @function_tool(output_type=Parcel)
        def lookup() -> Parcel:
            """Look the parcel up."""
            ran.append("lookup")
            raise ParcelLostError("A-1 is lost")

        return Agent(name="Tracker", model=turns.model(), tools=[lookup])

    plain = Turns()
    asyncio.run(Runner.run(make_agent(plain), "Where is A-1?"))
    ran.clear()
    live, resumed, _ = _stop_then_resume(durable_url, make_agent)
    assert live.inputs == plain.inputs
    assert resumed.inputs == plain.inputs[1:]
    assert ran == ["lookup"]


def _described(error: BaseException) -> tuple[str, str, str, str]:
    cause = error.__cause__
    return type(error).__name__, str(error), type(cause).__name__, str(cause)


@pytest.mark.parametrize("raised", [ParcelLostError, ModelBehaviorError])
def test_a_tool_error_reaches_the_code_as_plain_runs_raise_it(durable_url: str, raised: type[Exception]) -> None:
    """A tool without a failure function (``failure_error_function=None``) raises: the run raises
    what plain ``Runner.run`` raises (the SDK's ``UserError`` from the tool's own exception, or the
    tool's ``AgentsException`` itself), live and when the task resumes and the failed call is
    replayed from its record; the tool runs once. Before, tether put its ``ToolError`` between
    them: the run raised ``UserError('Error running tool lookup: lookup failed after 1 attempt:
    ...')`` from a ``ToolError``, and a ``ModelBehaviorError`` came out as a ``UserError``."""
    ran: list[str] = []

    def make_agent() -> Agent[Any]:
        @function_tool(failure_error_function=None)
        def lookup() -> str:
            """Look the parcel up."""
            ran.append("lookup")
            raise raised("no parcel A-1")

        return Agent(name="Tracker", model=Turns().model(), tools=[lookup])

    with pytest.raises(Exception) as plain:
        asyncio.run(Runner.run(make_agent(), "Where is A-1?"))
    expected = _described(plain.value)
    ran.clear()
    seen: list[tuple[str, str, str, str]] = []

    def app_with() -> tether.App:
        app = tether.App(durable_url)
        agent = make_agent()

        @app.task(name="track")
        async def track(ctx: tether.AsyncTaskContext) -> str:
            try:
                await run(ctx, agent, "Where is A-1?")
            except Exception as exc:
                seen.append(_described(exc))
            await ctx.wait_for_input("next")  # suspends: the resumed task replays the run
            return "handled"

        return app

    assert app_with().run("track", task_id="t1").status is tether.Status.AWAITING_INPUT
    assert seen == [expected]
    fresh = app_with()
    fresh.send_input("t1", "next", True)
    assert fresh.resume("t1").output == "handled"
    assert seen == [expected, expected]  # replayed from the record, raised as it was raised live
    assert ran == ["lookup"]
