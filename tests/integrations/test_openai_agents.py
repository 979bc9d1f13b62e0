"""The OpenAI Agents SDK adapter: TetherSession (the SDK's Session protocol) and durable runs."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, SessionSettings, function_tool, handoff, set_tracing_disabled
from agents.memory import Session as SdkSession
from agents.memory import is_openai_responses_compaction_aware_session
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import tether
from tests._forkserver import ForkServer, ForkServers
from tests.integrations._crash import CHILD_IMPORTS, sigkill_then_resume
from tests.integrations.conftest import CHILD_ENV, HERE
from tether.integrations.openai_agents import (
    TetherSession,
    approval_key,
    approvals,
    durable_agent,
    run,
    run_streamed,
)

set_tracing_disabled(True)

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is order A-1?"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": '{"id": "A-1"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "lost"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It is lost.", "annotations": []}],
    },
    {"role": "user", "content": [{"type": "input_text", "text": "Refund it."}]},
]


def items(n: int, prefix: str = "m") -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"{prefix}{i}"} for i in range(n)]


# ----------------------------------------------------------------------------- the session


def test_session_protocol_verbatim_limit_pop_clear(store_url: str) -> None:
    app = tether.App(store_url)
    session = TetherSession("s1", app, user_id="ada")
    assert isinstance(session, SdkSession)

    async def scenario() -> None:
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items(ITEMS)
        assert await session.get_items() == ITEMS  # verbatim, in order
        assert await session.get_items(limit=2) == ITEMS[-2:]  # the newest, oldest first
        assert await session.get_items(limit=0) == []
        limited = TetherSession("s1", app, session_settings=SessionSettings(limit=3))
        assert await limited.get_items() == ITEMS[-3:]
        assert await limited.get_items(limit=1) == ITEMS[-1:]  # an explicit limit wins
        assert await session.pop_item() == ITEMS[-1]
        assert await session.pop_item() == ITEMS[-2]
        assert await session.get_items() == ITEMS[:-2]
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items(items(1))
        assert await session.get_items() == items(1)

    asyncio.run(scenario())
    # The same database: tether's own API sees the items, in the Responses shape they came in.
    stored = app.session("s1").messages()
    assert [m.original for m in stored] == items(1)
    assert app.session("s1").user_id == "ada"


@pytest.mark.parametrize("method", ["get_items", "add_items", "pop_item", "clear_session"])
def test_session_io_leaves_the_event_loop_free(store_url: str, method: str) -> None:
    """Outside a task the session's store I/O runs in a thread, as the SDK's own sessions do: the
    loop serves other coroutines while the store answers. Each operation's store work here waits
    for a coroutine of the same loop; run on the loop, it would wait for good (10 s, then fail)."""
    app = tether.App(store_url)
    session = TetherSession("s-loop", app)
    asyncio.run(session.add_items(items(2)))
    conversation = session.tether_session
    released = threading.Event()
    underneath = {"get_items": "compacted", "add_items": "add_many", "pop_item": "pop", "clear_session": "clear"}
    original = getattr(conversation, underneath[method])

    def held(*args: Any, **kwargs: Any) -> Any:
        assert released.wait(10), f"{method} held the event loop: the other coroutine never ran"
        return original(*args, **kwargs)

    setattr(conversation, underneath[method], held)

    async def other() -> None:
        released.set()

    async def both() -> None:
        operation = getattr(session, method)
        await asyncio.gather(operation(items(1, "x")) if method == "add_items" else operation(), other())

    asyncio.run(both())
    delattr(conversation, underneath[method])
    expected = {"get_items": 2, "add_items": 3, "pop_item": 1, "clear_session": 0}[method]
    assert len(asyncio.run(session.get_items())) == expected
    app.close()


def test_runner_keeps_history_in_the_session(store_url: str) -> None:
    """Two runs of an agent on one TetherSession: the second model call sees the first turn."""
    app = tether.App(store_url)
    model = ScriptedModel([[assistant_message("Paris.")], [assistant_message("About 2 million.")]])
    agent = Agent(name="Geo", model=model)

    async def scenario() -> None:
        session = TetherSession("geo", app)
        await Runner.run(agent, "Capital of France?", session=session)
        await Runner.run(agent, "How many people live there?", session=TetherSession("geo", app))

    asyncio.run(scenario())
    assert model.last_call is not None
    texts = [json.dumps(item) for item in model.last_call.input]
    assert "Capital of France?" in texts[0] and "Paris." in texts[1] and "How many" in texts[2]
    assert [m.role for m in app.session("geo").messages()] == ["user", "assistant", "user", "assistant"]


def test_concurrent_add_items_stay_contiguous_and_pops_never_repeat(tmp_path: Path) -> None:
    """Threads with a session object each: every batch lands contiguous, every item pops once."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    tether.App(url).session("race")
    start = threading.Barrier(4)

    def adder(name: str) -> None:
        session = TetherSession("race", tether.App(url))
        start.wait()
        for i in range(15):
            asyncio.run(session.add_items([{"role": "user", "content": f"{name}:{i}:{j}"} for j in range(4)]))

    threads = [threading.Thread(target=adder, args=(n,)) for n in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    contents = [item["content"] for item in asyncio.run(TetherSession("race", tether.App(url)).get_items())]
    assert len(contents) == 4 * 15 * 4
    for k in range(0, len(contents), 4):  # batches never interleave
        batch = contents[k : k + 4]
        assert [c.rpartition(":")[0] for c in batch] == [batch[0].rpartition(":")[0]] * 4, batch
        assert [c.rpartition(":")[2] for c in batch] == ["0", "1", "2", "3"]

    popped: dict[str, list[Any]] = {}
    start = threading.Barrier(4)

    def popper(name: str) -> None:
        session = TetherSession("race", tether.App(url))
        mine = popped.setdefault(name, [])
        start.wait()
        while (item := asyncio.run(session.pop_item())) is not None:
            mine.append(item["content"])

    threads = [threading.Thread(target=popper, args=(n,)) for n in "wxyz"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [c for mine in popped.values() for c in mine]
    assert sorted(everything) == sorted(contents)  # each item popped exactly once
    for mine in popped.values():  # each popper saw the newest first
        assert mine == sorted(mine, key=contents.index, reverse=True)


def test_compaction_keeps_originals(store_url: str) -> None:
    app = tether.App(store_url)
    session = TetherSession("long", app, keep_last=2, compact_when_tokens_over=200)
    assert hasattr(session, "run_compaction")

    async def scenario() -> None:
        for i in range(6):
            await session.add_items([{"role": "user", "content": f"Question {i}."}, _answer(f"Answer {i}.")])
        await session.run_compaction({"response_id": "r", "force": False})  # under the threshold: nothing
        assert len(await session.get_items()) == 12
        await session.run_compaction({"response_id": "r", "force": True})
        compacted = await session.get_items()
        assert compacted[0]["role"] == "system" and "Question 0" in compacted[0]["content"]
        # keep_last=2 turns: a user message is a turn, and so is an assistant message
        assert compacted[1:] == [{"role": "user", "content": "Question 5."}, _answer("Answer 5.")]
        for i in range(6, 12):  # past the threshold: the SDK's call after a turn compacts
            await session.add_items([{"role": "user", "content": f"Question {i} " + "words " * 40}])
        await session.run_compaction({"response_id": "r2"})
        assert len(await session.get_items()) == 3
        session.undo_compaction()  # back to the first compaction
        assert (await session.get_items())[1:3] == [{"role": "user", "content": "Question 5."}, _answer("Answer 5.")]
        session.undo_compaction()  # and to every item, as they were added
        assert len(await session.get_items()) == 18
        assert session.undo_compaction() is None

    asyncio.run(scenario())
    assert len(app.session("long").messages()) == 18  # the originals stay stored


# What the SDK's Session contract promises: the items as added, in order, verbatim — a developer
# message added after a user message stays after it, a tool output whose call is elsewhere stays.
AS_ADDED: list[dict[str, Any]] = [
    {"role": "user", "content": "Where is order A-1?"},
    {"role": "developer", "content": "Answer in one sentence."},
    {"type": "function_call_output", "call_id": "call_from_an_earlier_run", "output": "lost"},
    {"type": "function_call", "call_id": "call_9", "name": "lookup", "arguments": "{}", "status": "completed"},
    {"role": "system", "content": "Orders ship from Leeds.", "source": "ops"},
    {"role": "assistant", "content": "It is lost."},
]


def test_get_items_are_the_items_as_added(store_url: str) -> None:
    app = tether.App(store_url)
    session = TetherSession("as-added", app)

    async def scenario() -> None:
        await session.add_items(AS_ADDED[:3])
        await session.add_items(AS_ADDED[3:])
        assert await session.get_items() == AS_ADDED
        assert await session.get_items(limit=4) == AS_ADDED[-4:]
        assert await session.pop_item() == AS_ADDED[-1]
        assert await session.pop_item() == AS_ADDED[-2]
        assert await session.get_items() == AS_ADDED[:-2]

    asyncio.run(scenario())
    reader = app if store_url == "memory://" else tether.App(store_url)
    assert asyncio.run(TetherSession("as-added", reader).get_items()) == AS_ADDED[:-2]

    @app.task
    async def in_task(ctx: tether.AsyncTaskContext) -> list[Any]:
        session = TetherSession.in_task(ctx)
        await session.add_items(AS_ADDED)
        return await session.get_items()

    assert app.run(in_task, task_id="in-task").output == AS_ADDED  # the task's conversation too
    assert asyncio.run(TetherSession("in-task", reader).get_items()) == AS_ADDED


def test_the_sdks_session_wrappers_keep_their_items_in_a_tether_session(store_url: str) -> None:
    """The SDK's EncryptedSession stores envelopes (no Responses type, no role) in the session beneath
    it: TetherSession keeps them verbatim, so it works as that session."""
    pytest.importorskip("cryptography")
    from agents.extensions.memory.encrypt_session import EncryptedSession

    app = tether.App(store_url)
    beneath = TetherSession("sealed", app)
    sealed = EncryptedSession("sealed", beneath, encryption_key="a key of the test's")

    async def scenario() -> list[Any]:
        await sealed.add_items(AS_ADDED)
        assert await sealed.get_items() == AS_ADDED
        assert await sealed.pop_item() == AS_ADDED[-1]
        return await beneath.get_items()

    envelopes = asyncio.run(scenario())
    assert len(envelopes) == len(AS_ADDED) - 1 and all(e["__enc__"] == 1 for e in envelopes)
    assert [m.original for m in app.session("sealed").messages()] == envelopes
    with pytest.raises(tether.InvalidInputError, match="has no 'type'"):  # a message without its role is not one
        asyncio.run(beneath.add_items([{"content": "hi"}]))


def test_compaction_puts_the_summary_in_the_place_of_what_it_folded(store_url: str) -> None:
    """After ``run_compaction``, ``get_items`` is the compacted history (the SDK's contract): the summary
    where the folded items were, system and developer items kept in their places, the rest as added."""
    app = tether.App(store_url)
    session = TetherSession("folded", app, keep_last=1, compact_when_tokens_over=10**9)
    first = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Question 1."}]
    later = [_answer("Answer 1."), {"role": "system", "content": "Tools are slow today."},
             {"role": "user", "content": "Question 2."}]

    async def scenario() -> list[Any]:
        await session.add_items(first + later)
        await session.run_compaction({"response_id": "r1", "force": True})
        return await session.get_items()

    items = asyncio.run(scenario())
    assert items[0] == first[0]
    assert items[1]["role"] == "system" and "Question 1" in items[1]["content"]
    assert items[2:] == later[1:]  # the newest turn and the system item, as added
    assert [m.original for m in app.session("folded").messages()] == first + later  # originals stay


def test_only_a_session_that_compacts_on_its_own_has_the_sdks_compaction_hook(store_url: str) -> None:
    """The SDK digests every input item before each model call for a session with ``run_compaction``:
    a session made without ``compact_when_tokens_over`` would never compact when the SDK calls it,
    so it has no such hook (and ``compact()`` compacts it on demand); one made with it has the hook,
    inside a task too."""
    app = tether.App(store_url)
    plain = TetherSession("plain", app, keep_last=1)
    assert not is_openai_responses_compaction_aware_session(plain)
    assert is_openai_responses_compaction_aware_session(TetherSession("auto", app, compact_when_tokens_over=500))
    asyncio.run(plain.add_items([{"role": "user", "content": f"Question {i}."} for i in range(4)]))
    assert plain.compact() is not None
    assert asyncio.run(plain.get_items())[0]["role"] == "system"  # the summary, in the place of what it folded

    @app.task
    async def chat(ctx: tether.AsyncTaskContext) -> list[bool]:
        return [
            is_openai_responses_compaction_aware_session(TetherSession.in_task(ctx)),
            is_openai_responses_compaction_aware_session(TetherSession.in_task(ctx, compact_when_tokens_over=500)),
        ]

    assert app.run(chat, task_id="hooks").output == [False, True]


def _answer(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "id": f"msg_{abs(hash(text))}",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def test_task_session_refuses_unrecorded_operations() -> None:
    app = tether.App("memory://")

    @app.task
    async def task(ctx: tether.AsyncTaskContext) -> str:
        session = TetherSession.in_task(ctx)
        await session.add_items(items(2))
        try:
            await session.pop_item()
        except tether.TetherError as exc:
            return str(exc)
        return "popped"

    assert "not a recorded operation" in app.run(task, task_id="t").output
    assert len(app.session("t").messages()) == 2


# ----------------------------------------------------------------------------- durable runs


class Script:
    """A scripted model that counts the calls it answers: two parallel lookups, then an answer."""

    def __init__(self) -> None:
        self.calls = 0

    def model(self) -> ScriptedModel:
        return ScriptedModel([ModelStep.respond(self.answer) for _ in range(10)])

    def answer(self, call: Any) -> Any:
        self.calls += 1
        outputs = [i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            return [
                function_call("lookup", {"q": "order"}, call_id="c1"),
                function_call("lookup", {"q": "parcel"}, call_id="c2"),
            ]
        return [assistant_message(" / ".join(o["output"] for o in outputs))]


def test_durable_run_records_model_and_tools(store_url: str) -> None:
    app = tether.App(store_url)
    script = Script()
    keys: list[str] = []

    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        keys.append(tether.current_call().key)
        return f"{q}: ok"

    agent = Agent(name="Support", model=script.model(), tools=[lookup])

    @app.task
    async def support(ctx: tether.AsyncTaskContext, question: str) -> str:
        result = await run(ctx, agent, question, session=TetherSession.in_task(ctx))
        return str(result.final_output)

    done = app.run(support, "Where?", task_id="t1")
    assert done.output == "order: ok / parcel: ok"
    assert script.calls == 2
    state = app.state("t1")
    assert [(c.tool, c.status) for c in state.calls] == [
        ("openai_agents.model", "completed"),
        ("lookup", "completed"),
        ("lookup", "completed"),
        ("openai_agents.model", "completed"),
    ]
    assert sorted(keys) == sorted([state.calls[1].key, state.calls[2].key])  # tether's keys, in any run order
    assert state.calls[1].args == {"arguments": '{"q":"order"}', "call_id": "c1"}
    assert state.calls[3].result["output"][0]["content"][0]["text"] == "order: ok / parcel: ok"
    assert app.replay("t1").clean
    roles = [m.role for m in app.session("t1").messages()]
    assert roles == ["user", "assistant", "assistant", "tool", "tool", "assistant"]
    # Running it again returns the finished task: nothing is asked or run again.
    assert app.run(support, "Where?", task_id="t1").output == "order: ok / parcel: ok"
    assert script.calls == 2 and len(keys) == 2


def test_a_durable_agent_run_again_is_not_wrapped_twice(store_url: str) -> None:
    """``run`` of an agent ``durable_agent`` already made: its model wraps the original model once and
    its tools are recorded once, so each turn and each tool run is one recorded call (not a call
    recorded inside another, which a replay cannot follow)."""
    app = tether.App(store_url)
    script = Script()

    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"{q}: ok"

    model = script.model()
    agent = Agent(name="Support", model=model, tools=[lookup])

    @app.task
    async def support(ctx: tether.AsyncTaskContext, question: str) -> str:
        durable = durable_agent(ctx, agent)
        assert durable_agent(ctx, durable).model.inner is model  # type: ignore[union-attr]
        return str((await run(ctx, durable, question)).final_output)

    assert app.run(support, "Where?", task_id="t1").output == "order: ok / parcel: ok"
    assert [c.tool for c in app.state("t1").calls] == ["openai_agents.model", "lookup", "lookup", "openai_agents.model"]
    assert script.calls == 2
    assert app.replay("t1").clean


def _freed(ref: weakref.ref[Any], within: float = 5.0) -> bool:
    """Whether what ``ref`` names is freed within ``within`` seconds (collecting as it waits): a
    thread of the app may let go of it a moment after the run returns, which is no leak; a leak
    fails here with what still holds it."""
    deadline = time.monotonic() + within
    while True:
        gc.collect()
        held = ref()
        if held is None:
            return True
        if time.monotonic() > deadline:
            holders = [type(r).__name__ for r in gc.get_referrers(held) if r is not sys._getframe()]
            raise AssertionError(f"{held!r} is still held, by {holders}")
        del held
        time.sleep(0.05)


def test_what_the_sdk_keeps_of_a_finished_run_keeps_no_task_context() -> None:
    """A run's result (its ``last_agent``, the durable copy) and the model's own record of the calls it
    answered (their tools, durable copies too) outlive the run; the task's context, with the run's
    record and its whole conversation, does not stay in memory with them. The copy, used again
    after the run, says so."""
    app = tether.App("memory://")
    script = Script()

    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"{q}: ok"

    agent = Agent(name="Support", model=script.model(), tools=[lookup])
    contexts: list[weakref.ref[tether.AsyncTaskContext]] = []
    results: list[Any] = []

    @app.task
    async def support(ctx: tether.AsyncTaskContext, question: str) -> str:
        contexts.append(weakref.ref(ctx))
        result = await run(ctx, agent, question, session=TetherSession.in_task(ctx))
        results.append(result)
        return str(result.final_output)

    assert app.run(support, "Where?", task_id="t1").output == "order: ok / parcel: ok"
    assert _freed(contexts[0])
    with pytest.raises(tether.TetherError, match="used after that task's run ended"):
        asyncio.run(Runner.run(results[0].last_agent, "Again?"))


def test_a_resumed_run_replays_recorded_turns(store_url: str) -> None:
    """The run stops in its second tool (an error that is not retried stops the task here); the
    retry answers the first model turn and the first tool from their records."""
    app = tether.App(store_url)
    script = Script()
    ran: list[str] = []
    broken = {"parcel"}

    @function_tool(failure_error_function=None)
    def lookup(q: str) -> str:
        """Look something up."""
        ran.append(q)
        if q in broken:
            raise RuntimeError("the parcel service is down")
        return f"{q}: ok"

    agent = Agent(name="Support", model=script.model(), tools=[lookup])

    @app.task
    async def support(ctx: tether.AsyncTaskContext, question: str) -> str:
        return str((await run(ctx, agent, question)).final_output)

    failed = app.run(support, "Where?", task_id="t2")
    assert failed.status is tether.Status.FAILED, failed
    state = app.state("t2")
    assert state.failure is not None and "parcel service is down" in (state.failure.message or ""), state.failure
    assert script.calls == 1 and sorted(ran) == ["order", "parcel"]
    broken.clear()
    assert app.retry("t2").output == "order: ok / parcel: ok"
    assert script.calls == 2  # the first turn came from the record
    assert sorted(ran) == ["order", "parcel", "parcel"]  # the lookup that finished did not run again


class Counted:
    """Scripted models, one per agent, that count the calls each answers."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def model(self, name: str, respond: Any) -> ScriptedModel:
        def answer(call: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return respond([i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"])

        return ScriptedModel([ModelStep.respond(answer) for _ in range(10)])


@pytest.mark.parametrize("how", ["agent", "handoff()"])
def test_a_handoff_is_recorded_and_replayed(store_url: str, how: str) -> None:
    """A handoff, to an ``Agent`` or through a ``handoff()`` object: the agent handed to answers and
    runs its tools as recorded calls, so a retried run asks no model again and refunds once."""
    app = tether.App(store_url)
    models, refunded = Counted(), []

    @function_tool
    def refund(order: str) -> str:
        """Refund an order."""
        refunded.append(order)
        return f"refunded {order}"

    billing = Agent(
        name="Billing",
        model=models.model(
            "billing",
            lambda outs: [assistant_message("Refunded.")]
            if any(o["call_id"] == "r1" for o in outs)
            else [function_call("refund", {"order": "A-1"}, call_id="r1")],
        ),
        tools=[refund],
    )
    triage = Agent(
        name="Triage",
        model=models.model("triage", lambda outs: [function_call("transfer_to_billing", {}, call_id="h1")]),
        handoffs=[billing if how == "agent" else handoff(billing)],
    )
    crash = {"after_run": True}

    @app.task
    async def support(ctx: tether.AsyncTaskContext, question: str) -> str:
        result = await run(ctx, triage, question)
        if crash["after_run"]:
            raise RuntimeError("the process died after the run")
        return f"{result.last_agent.name}: {result.final_output}"

    assert app.run(support, "Refund A-1", task_id="t").status is tether.Status.FAILED
    assert (models.calls, refunded) == ({"triage": 1, "billing": 2}, ["A-1"])
    crash["after_run"] = False
    assert app.retry("t").output == "Billing: Refunded."
    assert (models.calls, refunded) == ({"triage": 1, "billing": 2}, ["A-1"])  # all from the record
    calls = [(c.tool, c.args.get("agent")) for c in app.state("t").calls]
    assert calls == [
        ("openai_agents.model", "Triage"),
        ("openai_agents.model", "Billing"),
        ("refund", None),
        ("openai_agents.model", "Billing"),
    ]
    assert app.replay("t").clean


def test_an_agent_used_as_a_tool_is_recorded_and_replayed(store_url: str) -> None:
    """``agent.as_tool``: as it is, one recorded call (its output), not run again once finished;
    built from ``durable_agent(ctx, agent)``, it runs live and its own turns and tools are recorded
    calls — a run stopped inside it resumes without asking its model again for a turn it answered."""
    app = tether.App(store_url)
    models, tracked = Counted(), []
    broken = {"tracker": True}

    @function_tool(failure_error_function=None)
    def track(order: str) -> str:
        """Track a parcel."""
        tracked.append(order)
        if broken["tracker"]:
            raise RuntimeError("the tracker is down")
        return "lost"

    research = Agent(
        name="Research",
        model=models.model(
            "research",
            lambda outs: [assistant_message(f"The parcel is {outs[0]['output']}.")]
            if outs
            else [function_call("track", {"order": "A-1"}, call_id="k1")],
        ),
        tools=[track],
    )

    def triage_answer(outs: list[dict[str, Any]]) -> Any:
        if outs:
            return [assistant_message(f"Answer: {outs[0]['output']}")]
        return [function_call("research", {"input": "where is A-1?"}, call_id="r1")]

    triage_model = models.model("triage", triage_answer)

    @app.task
    async def whole(ctx: tether.AsyncTaskContext, question: str) -> str:
        tool = research.as_tool("research", "Research a question.", failure_error_function=None)
        return str((await run(ctx, Agent(name="Triage", model=triage_model, tools=[tool]), question)).final_output)

    @app.task
    async def inside(ctx: tether.AsyncTaskContext, question: str) -> str:
        tool = durable_agent(ctx, research).as_tool("research", "Research a question.", failure_error_function=None)
        return str((await run(ctx, Agent(name="Triage", model=triage_model, tools=[tool]), question)).final_output)

    # As it is: the agent's run is one call; stopped inside it, the retry runs it again from its start.
    assert app.run(whole, "Where?", task_id="whole").status is tether.Status.FAILED
    assert (models.calls, tracked) == ({"triage": 1, "research": 1}, ["A-1"])
    broken["tracker"] = False
    assert app.retry("whole").output == "Answer: The parcel is lost."
    assert (models.calls, tracked) == ({"triage": 2, "research": 3}, ["A-1", "A-1"])
    assert [c.tool for c in app.state("whole").calls] == ["openai_agents.model", "research", "openai_agents.model"]
    assert app.replay("whole").clean

    # Durable inside: its first turn comes from the record; only the turn after the tool is asked.
    models.calls.clear()
    tracked.clear()
    broken["tracker"] = True
    assert app.run(inside, "Where?", task_id="inside").status is tether.Status.FAILED
    assert (models.calls, tracked) == ({"triage": 1, "research": 1}, ["A-1"])
    broken["tracker"] = False
    assert app.retry("inside").output == "Answer: The parcel is lost."
    assert (models.calls, tracked) == ({"triage": 2, "research": 2}, ["A-1", "A-1"])
    assert [(c.tool, c.args.get("agent")) for c in app.state("inside").calls] == [
        ("openai_agents.model", "Triage"),
        ("openai_agents.model", "Research"),
        ("track", None),
        ("openai_agents.model", "Research"),
        ("openai_agents.model", "Triage"),
    ]
    assert app.replay("inside").clean


def test_approval_waits_as_a_tether_input(store_url: str) -> None:
    app = tether.App(store_url)
    refunds: list[str] = []

    @function_tool(needs_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        refunds.append(tether.current_call().key)
        return f"refunded {order_id}"

    def answer(call: Any) -> Any:
        outputs = [i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            return [function_call("refund", {"order_id": "A-1"}, call_id="call_r")]
        return [assistant_message(f"Result: {outputs[-1]['output']}")]

    calls = {"n": 0}

    def counted(call: Any) -> Any:
        calls["n"] += 1
        return answer(call)

    agent = Agent(name="Refunds", model=ScriptedModel([ModelStep.respond(counted) for _ in range(10)]), tools=[refund])

    @app.task
    async def support(ctx: tether.AsyncTaskContext) -> str:
        return str((await run(ctx, agent, "Refund A-1")).final_output)

    first = app.run(support, task_id="approve-1")
    assert first.status is tether.Status.AWAITING_INPUT
    state = app.state("approve-1")
    assert state.waiting is not None and state.waiting.key == "approve:call_r"
    assert "refund" in (state.waiting.prompt or "")
    assert refunds == [] and calls["n"] == 1
    other = app if store_url == "memory://" else tether.App(store_url)  # the answer may come from anywhere
    other.send_input("approve-1", "approve:call_r", True)
    done = app.resume("approve-1")
    assert done.output == "Result: refunded A-1"
    assert len(refunds) == 1 and calls["n"] == 2  # the first turn was not asked again
    assert app.replay("approve-1").clean

    rejected = app.run(support, task_id="approve-2")
    assert rejected.status is tether.Status.AWAITING_INPUT
    app.send_input("approve-2", "approve:call_r", {"approved": False, "message": "Not this time."})
    assert app.resume("approve-2").output == "Result: Not this time."
    assert len(refunds) == 1


def test_streamed_run_with_an_approval(store_url: str) -> None:
    """run_streamed: live turns stream their events, recorded turns come back as one completed
    event, an approval waits as a tether input between the streams, and nothing runs twice."""
    app = tether.App(store_url)
    looked: list[str] = []
    asked = {"n": 0}

    def answer(call: Any) -> Any:
        asked["n"] += 1
        outputs = [i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            return [function_call("lookup", {"q": "parcel"}, call_id="c1")]
        return [assistant_message("Found: " + outputs[0]["output"])]

    @function_tool(needs_approval=True)
    def lookup(q: str) -> str:
        """Look something up."""
        looked.append(tether.current_call().key)
        return f"{q}: ok"

    agent = Agent(name="Support", model=ScriptedModel([ModelStep.respond(answer) for _ in range(5)]), tools=[lookup])
    seen: list[list[str]] = []

    @app.task
    async def chat(ctx: tether.AsyncTaskContext, question: str) -> str:
        result = run_streamed(ctx, agent, question, session=TetherSession.in_task(ctx))
        seen.append([e.data.type async for e in result.stream_events() if e.type == "raw_response_event"])
        while (state := await approvals(ctx, result)) is not None:
            result = run_streamed(ctx, agent, state, session=TetherSession.in_task(ctx))
            seen.append([e.data.type async for e in result.stream_events() if e.type == "raw_response_event"])
        return str(result.final_output)

    first = app.run(chat, "Where?", task_id="s1")
    assert first.status is tether.Status.AWAITING_INPUT and asked["n"] == 1 and looked == []
    assert len(seen[0]) > 1 and seen[0][-1] == "response.completed"  # the live turn streamed its events
    seen.clear()
    app.send_input("s1", "approve:c1", True)
    done = app.resume("s1")
    assert done.output == "Found: parcel: ok"
    assert seen[0] == ["response.completed"]  # the first turn, from its record
    assert len(seen[1]) > 1  # the second turn, live
    assert asked["n"] == 2 and len(looked) == 1
    assert [c.tool for c in app.state("s1").calls] == [
        "openai_agents.model_stream",
        "lookup",
        "openai_agents.model_stream",
    ]
    assert app.replay("s1").clean


def test_approval_key_names_the_call() -> None:
    from agents.items import ToolApprovalItem

    agent = Agent(name="a")
    raw = {"type": "function_call", "call_id": "call_9", "name": "refund", "arguments": "{}"}
    assert approval_key(ToolApprovalItem(agent, raw)) == "approve:call_9"


# ----------------------------------------------------------------------------- real processes


@pytest.mark.crash
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["run", "streamed"])
def test_sigkill_anywhere_then_resume(tmp_path: Path, make_url: Any, fork_servers: ForkServers, mode: str) -> None:
    """A child SIGKILLs itself after chosen commits of a run (model turns, parallel tools, a refund)
    or inside the refund; fresh children resume it (see tests/integrations/_crash.py for what is
    checked) — with Runner.run, and with Runner.run_streamed."""
    extra = ("streamed",) if mode == "streamed" else ()
    sigkill_then_resume("_agents_child.py", fork_servers, tmp_path, make_url, extra=extra)


@pytest.mark.crash
@pytest.mark.timeout(600)
def test_sigkill_anywhere_in_a_team_then_resume(tmp_path: Path, make_url: Any, fork_servers: ForkServers) -> None:
    """The same work done by three agents: Support asks a Shipping agent used as a tool (built with
    ``durable_agent(...).as_tool``) beside a function tool, then hands off (``handoff()``) to a
    Refunds agent that refunds and answers. Killed anywhere, resumed: no agent's turn is asked twice,
    no finished tool runs again, the refund happens once, the record replays cleanly."""
    turns = ["turn 0", "shipping", "turn 2", "refunds 0", "refunds 1"]
    sigkill_then_resume("_agents_child.py", fork_servers, tmp_path, make_url, extra=("team",), model_turns=turns)


def _child(
    server: ForkServer, url: str, session: str, name: str, mode: str, count: int, gate: Path
) -> subprocess.CompletedProcess[str]:
    """``_agents_session_child.py`` in a process of its own, forked from a server with the SDK imported."""
    script = HERE / "_agents_session_child.py"
    return server.run(script, url, session, name, mode, str(count), str(gate), timeout=120)


def _race(servers: tuple[ForkServer, ForkServer], url: str, tmp: Path, mode: str, count: int) -> None:
    """Two processes (one forked from each server) on one session, let go together once both are ready."""
    gate = tmp / f"go-{mode}"
    done: dict[str, subprocess.CompletedProcess[str]] = {}

    def run(server: ForkServer, name: str) -> None:
        done[name] = _child(server, url, "shared", name, mode, count, gate)

    threads = [threading.Thread(target=run, args=(server, name)) for server, name in zip(servers, "ab", strict=True)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not all((tmp / f"ready-{n}").exists() for n in ("a", "b")):
        assert time.monotonic() < deadline and all(t.is_alive() for t in threads), f"children did not start: {done}"
        time.sleep(0.01)
    gate.touch()
    for thread in threads:
        thread.join()
    for name in ("a", "b"):
        assert done[name].returncode == 0, done[name].stderr
        (tmp / f"ready-{name}").unlink()


@pytest.mark.crash
def test_two_processes_one_session(tmp_path: Path, make_url: Any, fork_servers: ForkServers) -> None:
    servers = fork_servers(CHILD_IMPORTS["_agents_child.py"], CHILD_ENV)
    url = make_url(tmp_path)
    tether.App(url).session("shared")
    _race(servers, url, tmp_path, "add", 20)
    stored = asyncio.run(TetherSession("shared", tether.App(url)).get_items())
    contents = [item["content"] for item in stored]
    assert sorted(contents) == sorted(f"{n}:{i}:{j}" for n in "ab" for i in range(20) for j in range(3))
    for k in range(0, len(contents), 3):  # every batch contiguous
        assert len({c.rpartition(":")[0] for c in contents[k : k + 3]}) == 1, contents[k : k + 3]
    _race(servers, url, tmp_path, "pop", 0)
    popped = [json.loads((tmp_path / f"go-pop.{n}.popped").read_text()) for n in ("a", "b")]
    everything = [item["content"] for mine in popped for item in mine]
    assert sorted(everything) == sorted(contents)  # every item popped exactly once, by one process
    assert asyncio.run(TetherSession("shared", tether.App(url)).get_items()) == []


@pytest.mark.crash
def test_items_survive_a_process_that_exits_right_after_add_items(
    tmp_path: Path, make_url: Any, fork_servers: ForkServers
) -> None:
    server, _ = fork_servers(CHILD_IMPORTS["_agents_child.py"], CHILD_ENV)
    url = make_url(tmp_path)
    child = _child(server, url, "quick", "a", "add-exit", 5, tmp_path / "unused")
    assert child.returncode == 0, child.stderr
    assert asyncio.run(TetherSession("quick", tether.App(url)).get_items()) == items(5, "a:")


def test_a_model_named_by_the_agent_is_resolved_by_the_runs_model_provider(store_url: str) -> None:
    """As ``Runner.run`` does: ``run_config=RunConfig(model_provider=...)`` names ``model="house"``
    (tether's run ignored it and asked OpenAI, which needs a key; found by a review)."""
    from agents import RunConfig
    from agents.models.interface import ModelProvider

    class House(ModelProvider):
        def get_model(self, model_name: str | None) -> Any:
            return ScriptedModel([[assistant_message(f"answered by {model_name}")]])

    agent = Agent(name="A", model="house")
    plain = asyncio.run(Runner.run(agent, "hi", run_config=RunConfig(model_provider=House())))
    app = tether.App(store_url)

    @app.task
    async def ask(ctx: tether.AsyncTaskContext) -> str:
        result = await run(ctx, agent, "hi", run_config=RunConfig(model_provider=House()))
        return str(result.final_output)

    done = app.run(ask, task_id="p1")
    assert done.status is tether.Status.COMPLETED, done.failure
    assert done.output == plain.final_output == "answered by house"
