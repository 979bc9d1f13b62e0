"""A durable run's function tools are, to the SDK and to the code, the tools a plain run has: a
tool's timeout is an outcome the record keeps; the copies ``durable_agent`` makes answer what the
SDK's ``FunctionTool`` answers (``__wrapped__``, the arguments an approval policy sees); a tool's
invoker gets the context it declares; and tether's own errors in a tool's call stop the run as
they stop any task, never answered to the model as a tool's failure.

As in ``test_openai_agents_replay``, a test runs the agent with plain ``Runner.run`` first, for
reference, then as a tether task, resumed from the same database in a fresh app.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, FunctionTool, RunContextWrapper, Runner, function_tool, set_tracing_disabled
from agents.exceptions import ToolTimeoutError, UserError
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

import tether
from tests.integrations.test_openai_agents_replay import Turns, _described, _stop_then_resume
from tether.integrations.openai_agents import durable_agent, run, run_streamed
from tether.runtime.leases import acquire

set_tracing_disabled(True)

# ----------------------------------------------------------------------------- timeouts

TIMEOUTS: dict[str, dict[str, Any]] = {
    "default message": {},
    "timeout_error_function": {"timeout_error_function": lambda ctx, error: f"gave up after {error.timeout_seconds}s"},
}


def _slow_the_first_time(ran: list[str], **options: Any) -> FunctionTool:
    """A tool with a 0.2 s timeout that takes 30 s the first time it runs and answers at once after."""

    @function_tool(timeout=0.2, **options)
    async def lookup() -> str:
        """Look the parcel up."""
        ran.append("lookup")
        if len(ran) == 1:
            await asyncio.sleep(30)
        return "found"

    return lookup


@pytest.mark.parametrize("options", sorted(TIMEOUTS))
def test_a_tool_timeout_is_recorded_and_replayed_as_it_happened(durable_url: str, options: str) -> None:
    """A tool times out (the SDK answers the model, by default or through ``timeout_error_function``):
    the model gets the answer plain ``Runner.run`` sends, live and after a resume in a fresh app, and
    the resumed run does not run the tool again. Before, the SDK's timeout cancelled tether's call of
    the tool and left it with no outcome, so the resumed run ran the tool again; it finished, and the
    next model turn no longer matched the record: the resume raised NonDeterminismError."""
    ran: list[str] = []

    def make_agent(turns: Turns) -> Agent[Any]:
        return Agent(name="Tracker", model=turns.model(), tools=[_slow_the_first_time(ran, **TIMEOUTS[options])])

    plain = Turns()
    asyncio.run(Runner.run(make_agent(plain), "Where is A-1?"))
    assert "timed out" in json.dumps(plain.inputs[-1]) or "gave up" in json.dumps(plain.inputs[-1])
    ran.clear()
    live, resumed, _ = _stop_then_resume(durable_url, make_agent)
    assert live.inputs == plain.inputs
    assert resumed.inputs == plain.inputs[1:]
    assert ran == ["lookup"]  # timed out once, live; its outcome came from the record after


def test_a_tool_timeout_that_raises_replays_as_raised(durable_url: str) -> None:
    """With ``timeout_behavior="raise_exception"`` the run raises the SDK's ``ToolTimeoutError``, as a
    plain run does; the task catches it, waits, and is resumed in a fresh app: the replayed call
    raises it again and the tool is not run again."""
    ran: list[str] = []

    def make_agent() -> Agent[Any]:
        tool = _slow_the_first_time(ran, timeout_behavior="raise_exception")
        return Agent(name="Tracker", model=Turns().model(), tools=[tool])

    with pytest.raises(ToolTimeoutError) as plain:
        asyncio.run(Runner.run(make_agent(), "Where is A-1?"))
    ran.clear()
    seen: list[tuple[str, str]] = []

    def app_with() -> tether.App:
        app = tether.App(durable_url)
        agent = make_agent()

        @app.task(name="track")
        async def track(ctx: tether.AsyncTaskContext) -> str:
            try:
                await run(ctx, agent, "Where is A-1?")
            except Exception as exc:
                seen.append(_described(exc)[:2])
            await ctx.wait_for_input("next")  # suspends: the resumed task replays the run
            return "handled"

        return app

    assert app_with().run("track", task_id="t1").status is tether.Status.AWAITING_INPUT
    fresh = app_with()
    fresh.send_input("t1", "next", True)
    assert fresh.resume("t1").output == "handled"
    assert seen == [_described(plain.value)[:2]] * 2
    assert ran == ["lookup"]


# ----------------------------------------------------------------------------- the copies


def _inside_a_task(check: Callable[[tether.AsyncTaskContext], Any]) -> Any:
    app = tether.App("memory://")

    @app.task(name="check")
    async def task(ctx: tether.AsyncTaskContext) -> Any:
        return check(ctx)

    return app.run("check").output


def test_a_durable_tool_unwraps_to_the_function_it_was_made_from() -> None:
    """``durable_agent(ctx, agent).tools[i].__wrapped__`` is the function the tool was made from, as
    it is on the SDK's own tool; a tool made from no function has none, as on the SDK's. Before,
    the durable copy raised AttributeError for both."""

    def lookup(order_id: str) -> str:
        """Look an order up."""
        return order_id

    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        return arguments

    made = function_tool(lookup)
    bare = FunctionTool(name="bare", description="", params_json_schema={"type": "object"}, on_invoke_tool=invoke)
    agent = Agent(name="Clerk", tools=[made, bare])

    def check(ctx: tether.AsyncTaskContext) -> list[bool]:
        durable_made, durable_bare = durable_agent(ctx, agent).tools
        assert durable_made is not made
        assert isinstance(durable_made, FunctionTool) and isinstance(durable_bare, FunctionTool)
        with pytest.raises(AttributeError):
            durable_bare.__wrapped__  # noqa: B018 - as on the SDK's tool
        return [durable_made.__wrapped__ is lookup, made.__wrapped__ is lookup]

    assert _inside_a_task(check) == [True, True]


async def _approve_nothing(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
    ASKED.append(params)
    return False


ASKED: list[dict[str, Any]] = []


def test_an_approval_policy_is_asked_as_a_plain_run_asks_it() -> None:
    """A tool whose arguments validation changes (a default the model left out) is held for a
    person's approval by a plain run without asking its ``needs_approval`` policy (the policy would
    judge arguments the tool does not get). A durable run holds it too. Before, the durable copy's
    invoker was not the SDK's, so the SDK asked the policy, which let the refund through unapproved."""
    ran: list[str] = []

    @function_tool(needs_approval=_approve_nothing, strict_mode=False)
    def refund(order_id: str, amount: int = 100) -> str:
        """Refund an order."""
        ran.append(order_id)
        return f"refunded {amount}"

    def turn(call: Any) -> Any:
        if not any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in call.input):
            return [function_call("refund", {"order_id": "A-1"}, call_id="c1")]
        return [assistant_message("Done.")]

    def make_agent() -> Agent[Any]:
        return Agent(name="Refunds", model=ScriptedModel([ModelStep.respond(turn) for _ in range(2)]), tools=[refund])

    ASKED.clear()
    plain = asyncio.run(Runner.run(make_agent(), "Refund A-1"))
    assert len(plain.interruptions) == 1 and ASKED == [] and ran == []
    app = tether.App("memory://")
    agent = make_agent()

    @app.task(name="refunds")
    async def refunds(ctx: tether.AsyncTaskContext) -> str:
        return str((await run(ctx, agent, "Refund A-1")).final_output)

    assert app.run("refunds", task_id="t1").status is tether.Status.AWAITING_INPUT
    assert app.state("t1").waiting.key == "approve:c1"
    assert ASKED == [] and ran == []


class Kind:
    """A third-party tool whose invoker names the context it takes (the SDK hands a narrower
    ``RunContextWrapper`` to an invoker that declares one, so it never serializes tool metadata)."""

    @staticmethod
    async def wrapper(context: RunContextWrapper[Any], arguments: str) -> str:
        return type(context).__name__

    @staticmethod
    async def tool_context(context: ToolContext[Any], arguments: str) -> str:
        return type(context).__name__


@pytest.mark.parametrize("invoker", ["wrapper", "tool_context"])
def test_a_tool_invoker_gets_the_context_it_declares(durable_url: str, invoker: str) -> None:
    """An invoker declaring ``RunContextWrapper`` gets one (a ``ToolContext`` one gets a ToolContext),
    as in a plain run: the model is sent the same output, live and resumed. Before, every invoker
    got the ``ToolContext`` tether's wrapper received."""

    def make_agent(turns: Turns) -> Agent[Any]:
        tool = FunctionTool(
            name="lookup",
            description="Look the parcel up.",
            params_json_schema={"type": "object", "properties": {}, "required": [], "additionalProperties": False},
            on_invoke_tool=getattr(Kind, invoker),
        )
        return Agent(name="Tracker", model=turns.model(), tools=[tool])

    plain = Turns()
    asyncio.run(Runner.run(make_agent(plain), "Where is A-1?"))
    expected = "RunContextWrapper" if invoker == "wrapper" else "ToolContext"
    assert expected in json.dumps(plain.inputs[-1])
    live, resumed, _ = _stop_then_resume(durable_url, make_agent)
    assert live.inputs == plain.inputs
    assert resumed.inputs == plain.inputs[1:]


# ----------------------------------------------------------------------------- tether's errors


def _answering(inputs: list[Any], tool: str, call_input: dict[str, Any]) -> ScriptedModel:
    """A model that calls ``tool`` first, then repeats the tool's output."""

    def turn(call: Any) -> Any:
        inputs.append(call.input)
        outputs = [i["output"] for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            return [function_call(tool, call_input, call_id="c1")]
        return [assistant_message(f"Done: {outputs[0]}")]

    return ScriptedModel([ModelStep.respond(turn) for _ in range(4)])


def _refuse_next_write(app: tether.App) -> None:
    """The store refuses the app's next append (the write of what is under way), as if it were down."""
    original = app.store.append

    def append(*args: Any, **kwargs: Any) -> Any:
        app.store.append = original  # type: ignore[method-assign]
        raise tether.StoreUnavailableError("the database went away")

    app.store.append = append  # type: ignore[method-assign]


def _tracking_app(
    url: str, inputs: list[Any], fault: Callable[[tether.App], None], *, streamed: bool = False
) -> tuple[tether.App, list[str], list[str]]:
    """An app whose task runs an agent with a ``lookup`` tool that calls ``fault(app)`` the first
    time it runs; the tool's runs, and what ``run`` raised in the task."""
    app = tether.App(url)
    ran: list[str] = []
    raised: list[str] = []

    @function_tool
    def lookup() -> str:
        """Look the parcel up."""
        ran.append("lookup")
        if len(ran) == 1:
            fault(app)
        return "lost"

    agent = Agent(name="Tracker", model=_answering(inputs, "lookup", {}), tools=[lookup])

    @app.task(name="track")
    async def track(ctx: tether.AsyncTaskContext) -> str:
        try:
            if streamed:
                result = run_streamed(ctx, agent, "Where is A-1?")
                async for _ in result.stream_events():
                    pass
            else:
                result = await run(ctx, agent, "Where is A-1?")
        except Exception as exc:
            raised.append(type(exc).__name__)
            raise
        return str(result.final_output)

    return app, ran, raised


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_a_store_outage_in_a_tools_call_stops_the_run(durable_url: str, streamed: bool) -> None:
    """The store refuses the write of a tool's result: ``run`` raises tether's StoreUnavailableError,
    the task is left running as any task's run leaves it (no failure recorded), and a resume in a
    fresh app finishes it (the tool runs again under its key: its result was never recorded).
    Before, the SDK wrapped the error in a UserError ('Error running tool lookup: ...') and the
    task was failed with it."""
    inputs: list[Any] = []
    app, ran, raised = _tracking_app(durable_url, inputs, _refuse_next_write, streamed=streamed)
    with pytest.raises(tether.StoreUnavailableError):
        app.run("track", task_id="t1")
    assert raised == ["StoreUnavailableError"]
    state = app.state("t1")
    assert state.status is tether.Status.RUNNING and state.failure is None
    assert [(c.tool, c.status) for c in state.calls][1:] == [("lookup", "intended")]
    fresh, ran_again, _ = _tracking_app(durable_url, inputs, lambda app: None, streamed=streamed)
    assert fresh.resume("t1").output == "Done: lost"
    assert ran == ["lookup"] and ran_again == ["lookup"]


def test_a_lease_taken_during_a_tools_call_stops_the_run(durable_url: str) -> None:
    """Another worker takes the task's lease while a tool runs: the write of the tool's result is
    refused and ``run`` raises tether's LeaseLostError, with nothing written and the model not
    asked again. Before, ``run`` raised the SDK's UserError wrapping it, which the task's code
    could catch as a tool's failure."""
    inputs: list[Any] = []

    def steal(app: tether.App) -> None:
        thief = tether.App(durable_url)
        acquire(thief.store, thief.tenant, "t1", "another-worker", 60, force=True)

    app, _, raised = _tracking_app(durable_url, inputs, steal)
    with pytest.raises(tether.LeaseLostError):
        app.run("track", task_id="t1")
    assert raised == ["LeaseLostError"]
    assert len(inputs) == 1
    assert [c.status for c in app.state("t1").calls] == ["completed", "intended"]


@pytest.mark.parametrize("how", ["cancel", "request_cancel"])
def test_a_cancel_during_a_tools_call_stops_the_run_at_its_next_step(durable_url: str, how: str) -> None:
    """``app.cancel`` (or ``request_cancel``) in another process while a tool runs: the tool's call is
    under way, so its lease is not taken (cut off, the tool's effect would be done with no result
    recorded, to be run again or left uncompensated). The tool's result is recorded, the run stops
    at its next step — the model is not asked again — and the task is cancelled; ``cancel`` returns
    once the run has carried it out. tether's Cancelled is no ``Exception`` for the SDK to answer:
    the task's code catches nothing."""
    inputs: list[Any] = []
    handles: list[tether.TaskHandle] = []
    threads: list[threading.Thread] = []

    def cancel(app: tether.App) -> None:
        other, _, _ = _tracking_app(durable_url, [], lambda app: None)
        thread = threading.Thread(target=lambda: handles.append(getattr(other, how)("t1")))
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 30
        while other.state("t1").cancel_reason is None:  # the request is recorded before the tool returns
            assert time.monotonic() < deadline, "the cancel was never recorded"
            time.sleep(0.01)

    app, ran, raised = _tracking_app(durable_url, inputs, cancel)
    assert app.run("track", task_id="t1").status is tether.Status.CANCELLED
    threads[0].join(30)
    assert [h.status for h in handles] == [tether.Status.CANCELLED if how == "cancel" else tether.Status.RUNNING]
    assert raised == [] and ran == ["lookup"] and len(inputs) == 1
    calls = app.state("t1").calls
    # The model asked once, the tool's result recorded, nothing after it.
    assert [(c.tool, c.status) for c in calls] == [("openai_agents.model", "completed"), ("lookup", "completed")]


def _team_app(
    url: str, outer: list[Any], *, instructions: str, fault: Callable[[tether.App], None], down: bool = False
) -> tether.App:
    """A task whose agent asks a durable Shipping agent used as a tool; ``fault(app)`` runs as
    Shipping's model answers; ``down``: the Triage turn after the tool fails."""
    app = tether.App(url)

    def triage_turn(call: Any) -> Any:
        outer.append(call.input)
        outputs = [i["output"] for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            return [function_call("shipping", {"input": "where is A-1?"}, call_id="c1")]
        if down:
            raise ConnectionError("the model is down")
        return [assistant_message(f"Done: {outputs[0]}")]

    def shipping_turn(call: Any) -> Any:
        fault(app)
        return [assistant_message("A-1 is in Leipzig")]

    triage = Agent(name="Triage", model=ScriptedModel([ModelStep.respond(triage_turn) for _ in range(2)]))
    shipping = Agent(
        name="Shipping", instructions=instructions, model=ScriptedModel([ModelStep.respond(shipping_turn)])
    )

    @app.task(name="team")
    async def team(ctx: tether.AsyncTaskContext) -> str:
        asked = durable_agent(ctx, shipping).as_tool("shipping", "Where a parcel is.")
        return str((await run(ctx, triage.clone(tools=[asked]), "Where is A-1?")).final_output)

    return app


def test_a_store_outage_inside_an_agent_used_as_a_tool_stops_the_run(durable_url: str) -> None:
    """The store refuses the record of a durable agent's turn while it works as another agent's tool:
    the run stops with StoreUnavailableError and the task is left running; a resume finishes it with
    that agent's answer. Before, the SDK's failure function answered the tool with 'An error occurred
    while running the tool' and the run went on to complete the task with it."""
    outer: list[Any] = []
    refused: list[bool] = []

    def refuse_once(app: tether.App) -> None:
        if not refused:
            refused.append(True)
            _refuse_next_write(app)

    with pytest.raises(tether.StoreUnavailableError):
        _team_app(durable_url, outer, instructions="v1", fault=refuse_once).run("team", task_id="t1")
    assert len(outer) == 1  # the model was not told of an error
    assert tether.App(durable_url).state("t1").status is tether.Status.RUNNING
    done = _team_app(durable_url, outer, instructions="v1", fault=lambda app: None).resume("t1")
    assert done.output == "Done: A-1 is in Leipzig"


def test_a_divergence_inside_an_agent_used_as_a_tool_is_reported_where_it_is(durable_url: str) -> None:
    """The code of a durable agent used as a tool changed (its instructions) since its turn was
    recorded: the resumed run raises NonDeterminismError naming that agent's turn, and writes
    nothing. Before, the SDK answered the tool with 'An error occurred' and the run went on, to
    diverge at the next turn of the agent that called it (or, past the record, to run on live)."""
    outer: list[Any] = []
    stopped = _team_app(durable_url, outer, instructions="v1", fault=lambda app: None, down=True).run(
        "team", task_id="t1"
    )
    assert stopped.status is tether.Status.FAILED
    version = tether.App(durable_url).state("t1").version
    changed = _team_app(durable_url, outer, instructions="v2", fault=lambda app: None)
    with pytest.raises(tether.NonDeterminismError) as diverged:
        changed.retry("t1")
    assert "call #2 openai_agents.model" in str(diverged.value) and "Shipping" in str(diverged.value)
    # The retry's request only: a run refused before its code goes live writes no status change.
    assert tether.App(durable_url).state("t1").version == version + 1
    assert UserError.__name__ not in str(diverged.value)
