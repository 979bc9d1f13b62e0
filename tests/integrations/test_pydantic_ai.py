"""The Pydantic AI adapter: message history in a tether session, and durable runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, ModelRetry, RunContext, SkipModelRequest
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.test import TestModel

import tether
from tests._forkserver import ForkServers
from tests.integrations._crash import CHILD_IMPORTS, sigkill_then_resume
from tests.integrations.conftest import CHILD_ENV
from tether.integrations.pydantic_ai import TetherDurability, TetherHistory, run


def sync(agent: Agent[Any, Any], prompt: str, **options: Any) -> Any:
    """``agent.run_sync`` without the event loop it leaves open (a ResourceWarning, an error here)."""
    return asyncio.run(agent.run(prompt, **options))


class Lookups:
    """A FunctionModel script that counts its requests: two parallel lookups, then an answer."""

    def __init__(self) -> None:
        self.requests = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests += 1
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(
                parts=[
                    TextPart("Looking."),
                    ToolCallPart("lookup", {"q": "order"}, tool_call_id="c1"),
                    ToolCallPart("lookup", {"q": "parcel"}, tool_call_id="c2"),
                ]
            )
        return ModelResponse(parts=[TextPart(" / ".join(str(r.content) for r in returns))])


def test_history_round_trip_is_lossless(store_url: str) -> None:
    app = tether.App(store_url)
    agent = Agent(FunctionModel(Lookups()), system_prompt="Be brief.")

    @agent.tool_plain
    def lookup(q: str) -> dict[str, Any]:
        return {"q": q, "found": True}

    history = TetherHistory("chat", app, user_id="ada")
    first = sync(agent, "Where is my parcel?", message_history=history.window())
    history.add(first.new_messages())
    assert history.messages() == first.all_messages()  # equal, part by part, timestamps and all
    second = sync(agent, "And the order?", message_history=history.window())
    history.add(second.new_messages())
    assert history.messages() == second.all_messages()
    # Another process (a new App on the same database) reads the same messages.
    reopened = TetherHistory("chat", tether.App(store_url)) if store_url != "memory://" else history
    assert ModelMessagesTypeAdapter.dump_json(reopened.messages()) == ModelMessagesTypeAdapter.dump_json(
        second.all_messages()
    )
    # tether sees them in its own terms: roles, text, tool calls with their results.
    stored = app.session("chat").messages()
    assert [m.role for m in stored][:4] == ["system", "assistant", "tool", "assistant"]
    assert [c.name for c in stored[1].tool_calls] == ["lookup", "lookup"]
    assert stored[2].answers == ("c1",) and stored[0].content == "Be brief.\nWhere is my parcel?"


def test_window_and_compaction_keep_the_system_prompt_and_the_originals(store_url: str) -> None:
    app = tether.App(store_url)
    agent = Agent(TestModel(custom_output_text="Fine."), system_prompt="Be brief.")
    history = TetherHistory("long", app)
    for i in range(8):
        result = sync(agent, f"Question {i}.", message_history=history.window(8_000))
        history.add(result.new_messages())
    everything = history.messages()
    assert len(everything) == 16
    summary = history.compact(keep_last=2)
    assert summary is not None and "Question 1" in summary.text  # the first is the system message
    window = history.window(8_000, keep_last=2)
    assert isinstance(window[0], ModelRequest) and isinstance(window[0].parts[0], SystemPromptPart)
    assert window[0] == everything[0]  # the first request, with the system prompt, kept verbatim
    assert isinstance(window[1], ModelRequest)
    assert isinstance(window[1].parts[0], UserPromptPart)
    assert str(window[1].parts[0].content).startswith("Summary of the earlier conversation")
    assert window[2:] == everything[-2:]
    assert history.messages() == everything  # originals stay stored
    # The window is a history an agent runs on.
    result = sync(agent, "Question 8.", message_history=window)
    history.add(result.new_messages())
    assert len(history.messages()) == 18
    # A tight window keeps whole turns: never a tool result without its call.
    tools_agent = Agent(FunctionModel(Lookups()))

    @tools_agent.tool_plain
    def lookup(q: str) -> str:
        return q * 200

    calls = TetherHistory("calls", app)
    calls.add(sync(tools_agent, "Go.").all_messages())
    tight = calls.window(10, keep_last=1)
    assert [type(m).__name__ for m in tight] == ["ModelResponse"]  # the final answer alone: a whole turn
    assert calls.window(10, keep_last=2)[0].parts[1] == ToolCallPart("lookup", {"q": "order"}, tool_call_id="c1")


def test_durable_run_records_model_requests_and_tools(store_url: str) -> None:
    app = tether.App(store_url)
    script = Lookups()
    keys: list[str] = []
    agent = Agent(FunctionModel(script), name="support")

    @agent.tool_plain
    def lookup(q: str) -> str:
        keys.append(tether.current_call().key)
        return f"{q}: ok"

    @app.task
    async def ask(ctx: tether.AsyncTaskContext, question: str) -> str:
        return str((await run(ctx, agent, question)).output)

    done = app.run(ask, "Where?", task_id="t1")
    assert done.output == "order: ok / parcel: ok"
    assert script.requests == 2
    state = app.state("t1")
    assert [(c.tool, c.status) for c in state.calls] == [
        ("pydantic_ai.model", "completed"),
        ("lookup", "completed"),
        ("lookup", "completed"),
        ("pydantic_ai.model", "completed"),
    ]
    assert state.calls[0].args == {"agent": "support", "messages": 1}
    assert state.calls[1].args == {"args": {"q": "order"}, "call_id": "c1"}
    assert sorted(keys) == sorted([state.calls[1].key, state.calls[2].key])  # the two tools run concurrently
    assert app.replay("t1").clean
    assert [m.role for m in app.session("t1").messages()] == ["user", "assistant", "tool", "assistant"]
    assert app.run(ask, "Where?", task_id="t1").output == "order: ok / parcel: ok"
    assert script.requests == 2 and len(keys) == 2


def test_a_retried_run_answers_recorded_requests_and_tools_from_the_record(store_url: str) -> None:
    app = tether.App(store_url)
    script = Lookups()
    ran: list[str] = []
    broken = {"parcel"}
    agent = Agent(FunctionModel(script))

    @agent.tool_plain
    def lookup(q: str) -> str:
        ran.append(q)
        if q in broken:
            raise RuntimeError("the parcel service is down")
        return f"{q}: ok"

    @app.task
    async def ask(ctx: tether.AsyncTaskContext) -> str:
        return str((await run(ctx, agent, "Where?")).output)

    failed = app.run(ask, task_id="t2")
    assert failed.status is tether.Status.FAILED
    # The two lookups run concurrently: under load, the failure may stop the run before "order" starts.
    assert script.requests == 1 and "parcel" in ran and set(ran) <= {"order", "parcel"}
    broken.clear()
    assert app.retry("t2").output == "order: ok / parcel: ok"
    assert script.requests == 2  # the first request came from the record
    # "order" ran once in all: a lookup that finished in the first run did not run again.
    assert (ran.count("order"), ran.count("parcel")) == (1, 2)
    assert len(app.session("t2").messages()) == 4  # the run's messages were added once


def test_model_retry_is_recorded_as_the_tools_answer() -> None:
    app = tether.App("memory://")
    attempts: list[int] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart) and last.outcome == "retried":
            return ModelResponse(parts=[ToolCallPart("pick", {"n": 2}, tool_call_id="c2")])
        if isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"picked {last.content}")])
        return ModelResponse(parts=[ToolCallPart("pick", {"n": 1}, tool_call_id="c1")])

    agent = Agent(FunctionModel(script))

    @agent.tool_plain
    def pick(n: int) -> int:
        attempts.append(n)
        if n == 1:
            raise ModelRetry("pick an even number")
        return n

    @app.task
    async def task(ctx: tether.AsyncTaskContext) -> str:
        result = await agent.run("Pick.", capabilities=[TetherDurability(ctx)])
        return str(result.output)

    assert app.run(task, task_id="r").output == "picked 2"
    assert attempts == [1, 2]
    retried = app.state("r").calls[1].result["__tether_model_retry__"]
    assert retried["parts"][0]["content"] == "pick an even number"
    assert app.replay("r").clean  # the replay raised the recorded retry, and the model's next answer matched


class StreamedLookup:
    """A streaming FunctionModel script that counts its requests: a lookup, then an answer in pieces."""

    def __init__(self) -> None:
        self.requests = 0

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        self.requests += 1
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            yield {0: DeltaToolCall(name="lookup", json_args='{"q": "order"}', tool_call_id="c1")}
            return
        for piece in ("It ", "is ", str(returns[0].content)):
            yield piece


def test_streamed_runs_record_and_replay(store_url: str) -> None:
    """``agent.run_stream`` and ``agent.iter`` with ``node.stream`` inside a task, with
    ``TetherDurability``: each streamed model response and each tool call is a recorded call; a
    retried task streams the recorded responses (whole, not in the pieces the model sent) without
    asking the model again or running a finished tool again."""
    app = tether.App(store_url)
    script = StreamedLookup()
    ran: list[str] = []
    agent = Agent(FunctionModel(stream_function=script), name="streamer")

    @agent.tool_plain
    def lookup(q: str) -> str:
        ran.append(q)
        return f"{q}: ok"

    crash = {"after_streaming": True}

    @app.task
    async def with_run_stream(ctx: tether.AsyncTaskContext, question: str) -> str:
        history = TetherHistory.in_task(ctx)
        pieces = []
        async with agent.run_stream(
            question, message_history=history.window(), capabilities=[TetherDurability(ctx)]
        ) as streamed:
            async for piece in streamed.stream_text(delta=True):
                pieces.append(piece)
            output = await streamed.get_output()
        if crash["after_streaming"]:
            raise RuntimeError("the process died after streaming")
        history.add(streamed.new_messages())
        return f"{output} | {''.join(pieces)}"

    @app.task
    async def with_iter(ctx: tether.AsyncTaskContext, question: str) -> str:
        seen = []
        async with agent.iter(question, capabilities=[TetherDurability(ctx)]) as agent_run:
            async for node in agent_run:
                if Agent.is_model_request_node(node) or Agent.is_call_tools_node(node):
                    async with node.stream(agent_run.ctx) as events:
                        seen.extend([type(e).__name__ async for e in events])
        if crash["after_streaming"]:
            raise RuntimeError("the process died after streaming")
        assert agent_run.result is not None and "FunctionToolResultEvent" in seen
        return str(agent_run.result.output)

    expected_calls = [("pydantic_ai.model", "completed"), ("lookup", "completed"), ("pydantic_ai.model", "completed")]
    for task, task_id, output in (
        (with_run_stream, "streamed", "It is order: ok | It is order: ok"),
        (with_iter, "iterated", "It is order: ok"),
    ):
        script.requests, crash["after_streaming"] = 0, True
        ran.clear()
        assert app.run(task, "Where?", task_id=task_id).status is tether.Status.FAILED
        assert (script.requests, ran) == (2, ["order"])
        crash["after_streaming"] = False
        assert app.retry(task_id).output == output
        assert (script.requests, ran) == (2, ["order"])  # from the record: no model request, no tool run
        state = app.state(task_id)
        assert [(c.tool, c.status) for c in state.calls] == expected_calls
        assert state.calls[1].args == {"args": {"q": "order"}, "call_id": "c1"}
        assert app.replay(task_id).clean
    assert [m.role for m in app.session("streamed").messages()] == ["user", "assistant", "tool", "assistant"]


def test_approval_waits_as_a_tether_input(store_url: str) -> None:
    app = tether.App(store_url)
    refunds: list[str] = []
    requests = {"n": 0}

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests["n"] += 1
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("refund", {"order_id": "A-1"}, tool_call_id="c9")])
        return ModelResponse(parts=[TextPart(f"Result: {returns[-1].content}")])

    agent = Agent(FunctionModel(script), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: str) -> str:
        refunds.append(tether.current_call().key)
        return f"refunded {order_id}"

    @app.task
    async def support(ctx: tether.AsyncTaskContext) -> str:
        return str((await run(ctx, agent, "Refund A-1")).output)

    first = app.run(support, task_id="p1")
    assert first.status is tether.Status.AWAITING_INPUT
    state = app.state("p1")
    assert state.waiting is not None and state.waiting.key == "approve:c9" and "refund" in (state.waiting.prompt or "")
    assert refunds == [] and requests["n"] == 1
    app.send_input("p1", "approve:c9", True)
    assert app.resume("p1").output == "Result: refunded A-1"
    assert len(refunds) == 1 and requests["n"] == 2  # the first request came from its record
    assert app.replay("p1").clean
    roles = [m.role for m in app.session("p1").messages()]
    assert roles == ["user", "assistant", "tool", "assistant"]  # the conversation, each message once

    app.run(support, task_id="p2")
    app.send_input("p2", "approve:c9", {"approved": False, "message": "Not today."})
    assert app.resume("p2").output == "Result: Not today."
    assert len(refunds) == 1


@pytest.mark.crash
@pytest.mark.timeout(600)
def test_sigkill_anywhere_then_resume(tmp_path: Path, make_url: Any, fork_servers: ForkServers) -> None:
    """A child SIGKILLs itself after chosen commits of a run or inside the refund; fresh children
    resume it (see tests/integrations/_crash.py for what is checked). Model responses carry the
    time they were made, so they are compared without it."""

    def result_of(call: tether.ToolCall) -> Any:
        if call.tool != "pydantic_ai.model":
            return call.result
        return [(p.get("part_kind"), p.get("content"), p.get("args")) for p in call.result["parts"]]

    sigkill_then_resume("_pydantic_ai_child.py", fork_servers, tmp_path, make_url, result_of)


@pytest.mark.crash
@pytest.mark.timeout(600)
def test_sigkill_anywhere_in_a_streamed_run_then_resume(
    tmp_path: Path, make_url: Any, fork_servers: ForkServers
) -> None:
    """The same, with the model streaming its responses and the task driving the agent with
    ``agent.iter`` and ``node.stream``: a resumed run streams what the record holds and asks the
    model only for the turns it has not answered."""

    def result_of(call: tether.ToolCall) -> Any:
        if call.tool != "pydantic_ai.model":
            return call.result
        return [(p.get("part_kind"), p.get("content"), p.get("args")) for p in call.result["parts"]]

    sigkill_then_resume("_pydantic_ai_child.py", fork_servers, tmp_path, make_url, result_of, extra=("stream",))


RETRIED = """
import os, sys
from pathlib import Path
import tether
from pydantic_ai import Agent, RunContext, ModelRetry
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart, RetryPromptPart
from pydantic_ai.models.function import FunctionModel
from tether.integrations.pydantic_ai import run

URL, WORK = sys.argv[1], Path(sys.argv[2])

def model(messages, info):
    parts = [p for m in messages for p in m.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))]
    if parts and isinstance(parts[-1], ToolReturnPart) and getattr(parts[-1], "outcome", "success") == "success":
        return ModelResponse(parts=[TextPart(f"Done: {parts[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("t", {"x": 1}, tool_call_id=f"c{len(parts)}")])

agent = Agent(FunctionModel(model), name="a", retries=3)

@agent.tool
def t(ctx: RunContext, x: int) -> str:
    with open(WORK / "seen", "a") as seen:
        seen.write(f"{ctx.retry}\\n")
    if os.environ.get("CRASH") and len((WORK / "seen").read_text().split()) == 2:
        os._exit(9)  # killed in the tool's second run, after its first asked for a retry
    if ctx.retry < 1:
        raise ModelRetry("try again")
    return f"ok after {ctx.retry} retries"

app = tether.App(URL)

@app.task
async def task(ctx: tether.AsyncTaskContext, q: str) -> str:
    return str((await run(ctx, agent, q)).output)

handle = app.run(task, "go", task_id="r1")
print(handle.status.value, [c.tool for c in app.log.load("r1").calls])
"""


def test_a_retry_the_tool_asked_for_counts_after_a_resume_as_it_did_live(
    store_url: str, tmp_path: Path, fork_servers: ForkServers
) -> None:
    """Replayed, the tool's ModelRetry is raised as the tool raised it, so Pydantic AI counts it
    against the tool's retries: the resumed run's tool sees ctx.retry=1, as an unbroken run's does,
    and the model is not asked an extra turn (it saw 0, retried again; found by a review)."""
    import os
    import sys

    if store_url == "memory://":
        pytest.skip("the run is a process of its own: a memory store would not outlive it")
    script = tmp_path / "retried.py"
    script.write_text(RETRIED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tether.__file__).parents[1]), *sys.path])}
    # Each run a process of its own, forked from a server that has imported Pydantic AI (the resume
    # from the other server, so it hashes as a fresh process would: tests/_forkserver.py).
    first_life, next_life = fork_servers(CHILD_IMPORTS["_pydantic_ai_child.py"], CHILD_ENV)
    killed = first_life.run(script, store_url, str(tmp_path), env={**env, "CRASH": "1"})
    assert killed.returncode == 9, killed.stderr
    resumed = next_life.run(script, store_url, str(tmp_path), env=env)
    assert resumed.returncode == 0, resumed.stderr
    calls = "['pydantic_ai.model', 't', 'pydantic_ai.model', 't', 'pydantic_ai.model']"
    assert resumed.stdout.strip() == f"completed {calls}"
    assert (tmp_path / "seen").read_text().split() == ["0", "1", "1"]  # the killed run's 1, then the resume's


@pytest.mark.parametrize("kind", ["failed", "deferred", "approval"])
def test_a_tool_that_steers_the_run_does_so_durably(store_url: str, kind: str) -> None:
    """ToolFailed (the tool's answer to the model), CallDeferred and ApprovalRequired are Pydantic
    AI's own signals: recorded as the tool's answer and raised again on replay, so the run ends as
    plain Pydantic AI's does (the durable call failed, and the task with it; found by a review)."""

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        answered = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart | RetryPromptPart)]
        if not answered:
            return ModelResponse(parts=[ToolCallPart("t", {"x": 1}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart(f"saw: {answered[-1].content}")])

    def make() -> Agent[None, Any]:
        agent: Agent[None, Any] = Agent(FunctionModel(model), name="a", output_type=[str, DeferredToolRequests])

        @agent.tool
        def t(ctx: RunContext[None], x: int) -> str:
            if kind == "failed":
                raise ToolFailed("no such order")
            if kind == "deferred":
                raise CallDeferred({"queue": "ops"})
            if not ctx.tool_call_approved:
                raise ApprovalRequired({"why": "refund"})
            return "ok"

        return agent

    plain = asyncio.run(make().run("go")).output
    app = tether.App(store_url)
    agent = make()

    @app.task(name="steered")
    async def steered(ctx: tether.AsyncTaskContext) -> str:
        return repr((await agent.run("go", capabilities=[TetherDurability(ctx)])).output)

    done = app.run(steered, task_id="s1")
    assert done.status is tether.Status.COMPLETED, done.failure
    assert done.output == repr(plain)
    assert app.replay("s1").clean  # replayed, the recorded signal is raised again: the same output


def test_a_replayed_response_keeps_the_model_id_the_live_one_had(store_url: str) -> None:
    """Pydantic AI stamps each response with the id of the model that served it (``model_id``, by
    which it routes later requests) once the request hook returns, from the attempt the model made;
    a replayed response, made without one, had none (found comparing a resumed run's messages)."""
    agent = Agent(TestModel(custom_output_text="Paris."), name="geo")
    ids: list[list[str | None]] = []

    def define(app: tether.App) -> Any:
        @app.task(name="ask")
        async def ask(ctx: tether.AsyncTaskContext) -> str:
            result = await agent.run("Capital of France?", capabilities=[TetherDurability(ctx)])
            ids.append([m.model_id for m in result.all_messages() if isinstance(m, ModelResponse)])
            await ctx.wait_for_input("go on")
            return str(result.output)

        return ask

    app = tether.App(store_url)
    assert app.run(define(app), task_id="m1").status is tether.Status.AWAITING_INPUT
    again = app if store_url == "memory://" else tether.App(store_url)
    if again is not app:
        define(again)
    again.send_input("m1", "go on", True)
    assert again.resume("m1").output == "Paris."
    assert ids == [["test:test"], ["test:test"]]


class ProviderDownError(Exception):
    """A model's own exception, which the code around the run catches."""


def test_a_model_requests_exception_is_raised_as_itself_live_and_as_its_type_on_replay(store_url: str) -> None:
    """The model raises (a provider error, after its own retries): the code around the run catches
    it by its type, live as in a plain run (tether's ToolError went there instead), and again when
    the run is replayed after the task waited: a ``tether.ToolError`` that is a ``ProviderDownError``."""
    requests: list[int] = []
    caught: list[BaseException] = []

    def down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        requests.append(1)
        raise ProviderDownError("503 from the provider")

    agent = Agent(FunctionModel(down), name="geo")

    def define(app: tether.App) -> Any:
        @app.task(name="ask")
        async def ask(ctx: tether.AsyncTaskContext) -> str:
            try:
                return str((await agent.run("Capital?", capabilities=[TetherDurability(ctx)])).output)
            except ProviderDownError as exc:
                caught.append(exc)
                return str(await ctx.wait_for_input("answer", prompt=str(exc)))

        return ask

    app = tether.App(store_url)
    assert app.run(define(app), task_id="d1").status is tether.Status.AWAITING_INPUT
    assert type(caught[0]) is ProviderDownError
    again = app if store_url == "memory://" else tether.App(store_url)
    if again is not app:
        define(again)
    again.send_input("d1", "answer", "Paris, from a person")
    assert again.resume("d1").output == "Paris, from a person"
    assert requests == [1]  # replayed: the model was not asked again
    assert isinstance(caught[1], ProviderDownError) and isinstance(caught[1], tether.ToolError)
    assert str(caught[1]) == "503 from the provider" and caught[1].error_type == "ProviderDownError"
    assert again.replay("d1").clean


@dataclass
class Cache(AbstractCapability[Any]):
    """Answers every model request from a cache (``SkipModelRequest``, raised inside the durable call)."""

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        raise SkipModelRequest(ModelResponse(parts=[TextPart("Paris, from the cache.")]))


def test_a_model_request_a_hook_skips_answers_with_the_hooks_response(store_url: str) -> None:
    """A capability's ``before_model_request`` answers in the model's place (``SkipModelRequest``),
    as a plain run takes it; the durable request recorded that as the model failing, and the task
    failed. Now the hook's response is the request's record."""

    def never(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("the cache answers every request")

    agent = Agent(FunctionModel(never), name="geo", capabilities=[Cache()])
    assert sync(agent, "Capital?").output == "Paris, from the cache."
    app = tether.App(store_url)

    @app.task(name="ask")
    async def ask(ctx: tether.AsyncTaskContext) -> str:
        return str((await agent.run("Capital?", capabilities=[TetherDurability(ctx)])).output)

    done = app.run(ask, task_id="c1")
    assert done.status is tether.Status.COMPLETED, done.failure
    assert done.output == "Paris, from the cache."
    assert app.replay("c1").clean


def test_each_text_is_stored_once(store_url: str) -> None:
    """A message's text is the session message's content and is not stored again in the Pydantic AI
    JSON beside it; the messages come back equal (texts with newlines, a request of several parts)."""
    app = tether.App(store_url)
    try:
        agent = Agent(FunctionModel(Lookups()), system_prompt="Be brief.\nVery brief.")

        @agent.tool_plain
        def lookup(q: str) -> str:
            return f"found {q}\nin the warehouse"

        history = TetherHistory("once", app)
        result = sync(agent, "Where is\nmy parcel?", message_history=history.window())
        history.add(result.new_messages())
        assert history.messages() == result.all_messages()
        stored = [(m.content, orjson.dumps(m.meta).decode()) for m in app.session("once").messages()]
        assert [content is not None and "\n" in content for content, _ in stored] == [True, False, True, True]
        for _, meta in stored:
            assert not any(text in meta for text in ("Very brief", "my parcel?", "warehouse", "Looking."))
    finally:
        app.close()


class MixedCalls:
    """A FunctionModel script whose first response mixes text, tool calls with arguments as a dict and
    one with its arguments as a JSON string (as some providers send them), then answers."""

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
            return ModelResponse(
                parts=[
                    TextPart("Looking."),
                    ToolCallPart("lookup", {"q": "order-7"}, tool_call_id="c1"),
                    ToolCallPart("lookup", '{"q": "parcel-8"}', tool_call_id="c2"),
                    ToolCallPart("lookup", {"q": "box-9"}, tool_call_id="c3"),
                ]
            )
        return ModelResponse(parts=[TextPart("Done.")])


def test_each_tool_call_is_stored_once_and_empty_fields_not_at_all(store_url: str) -> None:
    """A tool call's name, id and arguments are the session message's tool_calls and are not stored
    again in the Pydantic AI JSON beside them (but for arguments given as a JSON string, which stay
    as they came); fields at an empty default (usage counts of 0, None) are not stored; the messages
    come back equal, and the durable run's recorded responses leave the same fields out."""
    app = tether.App(store_url)
    try:
        agent = Agent(FunctionModel(MixedCalls()))

        @agent.tool_plain
        def lookup(q: str) -> str:
            return f"found {q}"

        history = TetherHistory("calls", app)
        result = sync(agent, "Where is it?", message_history=history.window())
        history.add(result.new_messages())
        assert history.messages() == result.all_messages()
        asked = app.session("calls").messages()[1]
        assert [(c.id, c.arguments) for c in asked.tool_calls] == [
            ("c1", {"q": "order-7"}),
            ("c2", {"q": "parcel-8"}),
            ("c3", {"q": "box-9"}),
        ]
        meta = orjson.dumps(asked.meta).decode()
        assert "order-7" not in meta and "box-9" not in meta and '"c1"' not in meta
        assert '{\\"q\\": \\"parcel-8\\"}' in meta  # the JSON string, verbatim
        assert "cache_read_tokens" not in meta and "provider_name" not in meta and "input_tokens" in meta

        @app.task
        async def ask(ctx: tether.AsyncTaskContext) -> str:
            return (await run(ctx, agent, "Where is it?")).output

        assert app.run(ask, task_id="t1").output == "Done."
        recorded = [c.result for c in app.state("t1").calls if c.tool == "pydantic_ai.model"]
        assert len(recorded) == 2 and all("cache_read_tokens" not in orjson.dumps(r).decode() for r in recorded)
        assert app.replay("t1").clean
    finally:
        app.close()


def test_a_history_stored_whole_reads_as_before(store_url: str) -> None:
    """A message stored with its Pydantic AI JSON whole (every field, the texts and calls inside)
    comes back as it was."""
    app = tether.App(store_url)
    try:
        response = ModelResponse(parts=[TextPart("Looking."), ToolCallPart("lookup", {"q": "x"}, tool_call_id="c1")])
        whole = ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]
        app.session("whole").add(
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "x"}}],
                "pydantic_ai": whole,
            }
        )
        assert TetherHistory("whole", app).messages() == [response]
    finally:
        app.close()
