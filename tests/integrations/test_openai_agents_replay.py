"""A durable run is, to the model, the plain SDK's run, live and replayed: the model is sent the
same items.

Each test runs the agent with plain ``Runner.run`` first, for reference; then as a tether task
whose run stops at the model turn after the tool (the model is down), in one app; then it resumes
the task from the same database in a fresh app, where what was recorded comes from the record.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import tether
from tether.integrations.openai_agents import run, run_streamed

set_tracing_disabled(True)


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
