"""Exactly-once LangGraph tools (``TetherToolNode``): each tool call's answer is recorded under the key
``langgraph:{thread}:{namespace}:{tool call id}``, handed to the tool, and given back instead of
running the tool again — in-process, and across processes SIGKILLed at the tool's effect, at a
sibling tool and at the next model call, on SQLite and PostgreSQL, sync and async."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

import tether
from tests._forkserver import ForkServer, ForkServers
from tests.integrations.conftest import CHILD_ENV, HERE
from tether.integrations.langgraph import TetherSaver, TetherToolNode, tool_key

CHILD = HERE / "_lg_tools_child.py"
CHILD_IMPORTS = (
    "langchain_core.language_models.fake_chat_models",
    "langchain_core.tools",
    "langgraph.prebuilt",
    "langgraph.graph",
    "tether",
    "tether.integrations.langgraph",
    "tether.store.postgres",
    "tether.store.sqlite",
)
CONFIG: dict[str, Any] = {"configurable": {"thread_id": "t1"}}


def asking(*calls: tuple[str, dict[str, Any], str]) -> dict[str, Any]:
    """A state whose last message asks for ``calls`` (name, args, id)."""
    tool_calls = [{"name": name, "args": args, "id": call_id} for name, args, call_id in calls]
    return {"messages": [AIMessage("", tool_calls=tool_calls)]}


def graph_of(node: TetherToolNode, saver: TetherSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node).add_edge(START, "tools")
    return builder.compile(checkpointer=saver)


@pytest.fixture
def app() -> Any:
    app = tether.App("memory://")
    yield app
    app.close()


def test_each_call_runs_once_with_its_key_and_parallel_calls_have_their_own(app: Any) -> None:
    ran: list[tuple[str, str]] = []

    @tool
    def charge(amount: int) -> str:
        """Charge."""
        ran.append((tool_key(), str(amount)))
        return f"charged {amount}"

    saver = TetherSaver(app)
    graph = graph_of(TetherToolNode([charge], app), saver)
    ask = asking(("charge", {"amount": 1}, "c1"), ("charge", {"amount": 2}, "c2"))
    first = graph.invoke(ask, CONFIG)["messages"][-2:]
    again = graph.invoke(ask, CONFIG)["messages"][-2:]  # the same calls asked again: their answers
    assert [m.content for m in first] == [m.content for m in again] == ["charged 1", "charged 2"]
    assert sorted(ran) == [("langgraph:t1:tools:c1", "1"), ("langgraph:t1:tools:c2", "2")]
    other = graph.invoke(ask, {"configurable": {"thread_id": "t2"}})  # another thread: other keys
    assert other["messages"][-1].content == "charged 2" and len(ran) == 4
    assert app.ledger.get("langgraph:t1:tools:c1").status == "done"
    saver.close()


def test_async_tools_and_a_command_answer_are_recorded(app: Any) -> None:
    ran: list[str] = []

    @tool
    async def book(room: str) -> str:
        """Book a room."""
        ran.append(tool_key())
        return f"booked {room}"

    @tool
    def handoff(tool_call_id: str = "") -> Command:
        """Hand off."""
        ran.append(tool_key())
        return Command(update={"messages": [ToolMessage("handed off", tool_call_id="c2")]})

    saver = TetherSaver(app)
    graph = graph_of(TetherToolNode([book, handoff], app), saver)
    ask = asking(("book", {"room": "7"}, "c1"), ("handoff", {}, "c2"))

    async def twice() -> list[list[str]]:
        runs = [await graph.ainvoke(ask, CONFIG) for _ in range(2)]
        return [[str(m.content) for m in run["messages"][-2:]] for run in runs]

    first, second = asyncio.run(twice())
    assert first == second and sorted(first) == ["booked 7", "handed off"]
    assert sorted(ran) == ["langgraph:t1:tools:c1", "langgraph:t1:tools:c2"]
    saver.close()


def test_an_error_answer_is_not_recorded_and_the_call_runs_again(app: Any) -> None:
    tries: list[str] = []

    @tool
    def flaky(n: int) -> str:
        """Fails the first time."""
        tries.append(tool_key())
        if len(tries) == 1:
            raise ValueError("service down")
        return "ok"

    saver = TetherSaver(app)
    graph = graph_of(TetherToolNode([flaky], app, handle_tool_errors=True), saver)
    ask = asking(("flaky", {"n": 1}, "c1"))
    failed = graph.invoke(ask, CONFIG)["messages"][-1]
    assert failed.status == "error" and "service down" in failed.content
    assert app.ledger.get("langgraph:t1:tools:c1") is None
    assert graph.invoke(ask, CONFIG)["messages"][-1].content == "ok"
    assert graph.invoke(ask, CONFIG)["messages"][-1].content == "ok" and len(tries) == 2
    saver.close()


def test_a_wrap_of_yours_runs_inside_the_recorded_call(app: Any) -> None:
    attempts: list[int] = []

    @tool
    def fragile(n: int) -> str:
        """Fails twice."""
        attempts.append(n)
        if len(attempts) < 3:
            raise ConnectionError("reset")
        return "done"

    def retry(request: Any, execute: Any) -> Any:
        for _ in range(3):
            answer = execute(request)
            if answer.status != "error":
                return answer
        return answer

    saver = TetherSaver(app)
    graph = graph_of(TetherToolNode([fragile], app, wrap_tool_call=retry, handle_tool_errors=True), saver)
    ask = asking(("fragile", {"n": 1}, "c1"))
    assert graph.invoke(ask, CONFIG)["messages"][-1].content == "done"
    assert graph.invoke(ask, CONFIG)["messages"][-1].content == "done" and len(attempts) == 3
    saver.close()


def test_a_call_that_died_in_its_effect_follows_on_unknown(app: Any) -> None:
    @tool
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    app.engine.store.ledger_begin(app.tenant, "langgraph:t1:tools:c1", 0.0)  # started, no answer: a crash
    saver = TetherSaver(app)
    graph = graph_of(TetherToolNode([pay], app, on_unknown="raise", handle_tool_errors=False), saver)
    with pytest.raises(tether.OutcomeUnknownError):
        graph.invoke(asking(("pay", {"amount": 5}, "c1")), CONFIG)
    graph = graph_of(TetherToolNode([pay], app, on_unknown=lambda key: "reconciled"), saver)
    with pytest.raises(tether.TetherError, match="could not be read back"):  # not an answer of the node's
        graph.invoke(asking(("pay", {"amount": 5}, "c1")), {"configurable": {"thread_id": "t1"}})
    saver.close()


def test_wrong_arguments_are_refused_clearly() -> None:
    with pytest.raises(tether.InvalidInputError, match="only known inside a tool"):
        tool_key()
    with pytest.raises(tether.ConfigurationError, match=r"TetherToolNode takes a store URL.*not int 42"):
        TetherToolNode([], 42)
    with pytest.raises(tether.InvalidInputError, match="on_unknown"):
        TetherToolNode([], "memory://", on_unknown="sometimes")


# ----------------------------------------------------------------------------- SIGKILL and resume


@pytest.fixture
def children(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    return fork_servers(CHILD_IMPORTS, CHILD_ENV)


def life(server: ForkServer, url: str, work: Path, thread: str, kill_at: str, how: tuple[str, str]) -> Any:
    return server.run(CHILD, url, str(work), thread, kill_at, *how, timeout=120)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# The messages an uninterrupted run of _lg_tools_child.py ends with.
EXPECTED = [
    ["human", "refund A-1"],
    ["ai", ""],
    ["tool", '{"order": "A-1", "total": 4999}'],
    ["tool", "A-1 shipped"],
    ["tool", "refunded 4999 for A-1"],
    ["ai", 'Done: A-1 shipped; refunded 4999 for A-1; {"order": "A-1", "total": 4999}'],
]


@pytest.mark.crash
@pytest.mark.parametrize(
    "how", [("sync", "sync"), ("async", "async"), ("sync", "exit")], ids=["invoke-sync", "ainvoke-async", "invoke-exit"]
)
def test_sigkill_at_the_effect_a_sibling_and_the_next_model_call_then_resume(
    durable_url: str, how: tuple[str, str], tmp_path: Path, children: tuple[ForkServer, ForkServer]
) -> None:
    """``invoke`` with ``durability="sync"``, ``ainvoke`` with LangGraph's default ("async") and
    ``invoke`` with "exit" (nothing stored until the run ends: a killed run starts over, and its
    recorded tool calls are not run again; on SQLite only, the backend does not change what it
    keeps); each kill point is a thread of its own in one database, resumed by a fresh process."""
    if how[1] == "exit" and "postgresql" in durable_url:
        pytest.skip("exit durability stores nothing mid-run on any backend: SQLite shows it")
    for point in ("effect:1", "sibling:1", "model:2"):
        thread = point.replace(":", "-")
        work = tmp_path / thread
        work.mkdir()
        killed = life(children[0], durable_url, work, thread, point, how)
        assert killed.returncode == -signal.SIGKILL and (work / "killed").exists(), point + killed.stderr
        resumed = life(children[1], durable_url, work, thread, "none:0", how)
        assert resumed.returncode == 0, point + resumed.stderr
        assert json.loads(resumed.stdout.splitlines()[-1]) == EXPECTED, point
        executions = lines(work / "tools.log")
        keys = {f"{name} langgraph:{thread}:tools:call-{name}" for name in ("lookup", "shipping", "refund")}
        assert set(executions) == keys, point
        assert os.listdir(work / "effects") == [f"langgraph_{thread}_tools_call-refund"], point  # one effect
        repeated = sorted(line for line in set(executions) if executions.count(line) > 1)
        # Only a call killed inside its own effect runs again (its key says it may have happened).
        assert repeated == ([f"refund langgraph:{thread}:tools:call-refund"] if point == "effect:1" else []), point
        turns = lines(work / "model.log")
        if how[1] == "sync":  # every finished step is stored before the next starts: no turn asked twice
            assert turns == ["turn 1", "turn 2"], point
        else:  # the newest steps' checkpoints may be lost: a model turn asked again, its tools recorded
            assert set(turns) == {"turn 1", "turn 2"} and turns[-1] == "turn 2", point
