"""A real StateGraph on TetherSaver: a chat loop (add_messages), interrupt() for human input inside a
subgraph, time travel, a process SIGKILLed mid-run and resumed, two processes on one thread."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.types import Command

from tests._forkserver import ForkServer, ForkServers
from tests.integrations._lg_graph import answer, build, expected, run
from tether import TaskLog
from tether.integrations._langgraph_log import CheckpointSaved, WritesSaved, decode_item, stream_id
from tether.integrations.langgraph import TetherSaver

ROOT = Path(__file__).resolve().parents[2]


def config(thread: str, **more: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, **more}}


def contents(graph: Any, cfg: dict[str, Any]) -> list[str]:
    return [m.content for m in graph.get_state(cfg).values["messages"]]


def test_chat_with_interrupts_and_a_subgraph(store_url: str) -> None:
    saver = TetherSaver(store_url)
    graph = build(saver)
    cfg = config("chat")
    graph.invoke({"messages": [HumanMessage(content="hello", id="human-hello")], "notes": 0}, cfg)
    state = graph.get_state(cfg, subgraphs=True)
    assert state.next == ("review",)
    assert state.tasks[0].interrupts[0].value == {"question": "your turn", "seen": 2}
    for k in range(4):
        graph.invoke(Command(resume=f"user {k}"), cfg)
    graph.invoke(Command(resume="stop"), cfg)
    state = graph.get_state(cfg)
    assert [m.content for m in state.values["messages"]] == expected(4)
    assert state.values["notes"] == 5 and state.next == ()
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(config("chat"))}
    assert "" in namespaces and any(ns.startswith("review:") for ns in namespaces)
    # A second saver (another process, as far as the store can tell) reads the same conversation.
    assert contents(build(TetherSaver(saver.log)), cfg) == expected(4)


def _stored_messages(saver: TetherSaver, thread: str) -> Counter[str]:
    """How many times each message's content is stored in the thread's events (checkpoints and writes)."""
    counts: Counter[str] = Counter()

    def walk(spec: list[Any]) -> None:
        kind = spec[0]
        if kind == "d":
            for inner in spec[1].values():
                walk(inner)
            return
        items = [spec[1]] if kind == "f" else spec[1] if kind in ("l", "a") else []
        for item in items:
            if isinstance(item, str) and item.startswith("#"):
                continue  # a reference to an item stored before
            value = decode_item(saver.serde, item)
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, BaseMessage):
                    counts[str(v.content)] += 1

    for row in saver.log.store.read_events(saver.log.tenant, stream_id(thread)):
        event = saver.log.decode(row).event
        if isinstance(event, CheckpointSaved):
            for spec in event.values.values():
                walk(spec)
        elif isinstance(event, WritesSaved):
            for _, _, spec in event.writes:
                walk(spec)
    return counts


def test_each_message_is_stored_once(store_url: str) -> None:
    saver = TetherSaver(store_url)
    graph = build(saver)
    cfg = config("once")
    graph.invoke({"messages": [HumanMessage(content="hello", id="human-hello")], "notes": 0}, cfg)
    for k in range(10):
        graph.invoke(Command(resume=f"user {k}"), cfg)
    final = contents(graph, cfg)
    assert len(final) == 22
    # Across every checkpoint and write, of the graph and of each turn's subgraph: each message once.
    assert _stored_messages(saver, "once") == Counter(final)
    # The bytes per turn do not grow with the conversation.
    sizes = [len(r.data) for r in saver.log.store.read_events(saver.log.tenant, stream_id("once"))]
    per_turn = len(sizes) // 11
    assert sum(sizes[-per_turn:]) < 1.2 * sum(sizes[per_turn : 2 * per_turn])


def test_time_travel_history_update_and_replay_from_an_earlier_checkpoint(store_url: str) -> None:
    graph = build(TetherSaver(store_url))
    cfg = config("travel")
    graph.invoke({"messages": [HumanMessage(content="hello", id="human-hello")], "notes": 0}, cfg)
    for k in range(3):
        graph.invoke(Command(resume=f"user {k}"), cfg)
    final = contents(graph, cfg)
    history = list(graph.get_state_history(cfg))
    assert history[0].values["messages"] == graph.get_state(cfg).values["messages"]
    for snap in history:  # every earlier state is a prefix of the conversation
        got = [m.content for m in snap.values.get("messages", [])]
        assert got == final[: len(got)]
    # The checkpoint right after "user 1" came in, before the agent answered it.
    before = next(s for s in history if s.next == ("agent",) and s.values["messages"][-1].content == "user 1")

    # Invoking from it runs the agent again from there: a new branch, the old one kept.
    graph.invoke(None, before.config)
    assert contents(graph, cfg) == [*final[:5], answer(3)]
    assert len(list(graph.get_state_history(cfg))) > len(history)

    # update_state on it replaces the human message (by id): a list that is not an append.
    edit = HumanMessage(content="user 1, edited", id="human-user 1")
    edited = graph.update_state(before.config, {"messages": [edit]})
    graph.invoke(None, edited)
    assert contents(graph, cfg) == [*final[:4], "user 1, edited", answer(3)]
    # The original branch is intact.
    assert [m.content for m in graph.get_state(history[0].config).values["messages"]] == final


def test_tenants_do_not_see_each_other(store_url: str) -> None:
    log = TaskLog(store_url, tenant="acme")
    acme, other = TetherSaver(log), TetherSaver(TaskLog(log.store, tenant="globex"))
    graph = build(acme)
    graph.invoke({"messages": [HumanMessage(content="hello", id="human-hello")], "notes": 0}, config("t"))
    assert acme.get_tuple(config("t")) is not None
    assert other.get_tuple(config("t")) is None
    assert list(other.list(None)) == []


def test_async_graph(store_url: str) -> None:
    import asyncio

    graph = build(TetherSaver(store_url))
    cfg = config("async")

    async def talk() -> list[str]:
        await graph.ainvoke({"messages": [HumanMessage(content="hello", id="human-hello")], "notes": 0}, cfg)
        for k in range(2):
            await graph.ainvoke(Command(resume=f"user {k}"), cfg)
        await graph.ainvoke(Command(resume="stop"), cfg)
        state = await graph.aget_state(cfg)
        return [m.content for m in state.values["messages"]]

    assert asyncio.run(talk()) == expected(2)


# The children below are forked from servers that have imported LangGraph and tether (tests/_forkserver.py).
CHILD_IMPORTS = (
    "langchain_core.language_models.fake_chat_models",
    "langchain_core.messages",
    "langgraph.graph",
    "langgraph.types",
    "tether",
    "tether.integrations.langgraph",
    "tether.store.postgres",
    "tether.store.sqlite",
)


@pytest.fixture
def children(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    return fork_servers(CHILD_IMPORTS, {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])})


@pytest.mark.crash
def test_sigkill_mid_run_then_resume_loses_nothing(
    durable_url: str, tmp_path: Path, children: tuple[ForkServer, ForkServer]
) -> None:
    turns = 30  # turns enough after "turn 7" that the kill lands mid-run however late it comes
    for life, kill_after in enumerate(("turn 3", "turn 7")):  # the second process resumes what the first left
        lines = tmp_path / f"stdout-{life}"
        os.mkfifo(lines)
        args = (durable_url, "killed", str(turns), "0.03")
        proc = children[life].start(ROOT / "tests" / "integrations" / "_lg_graph.py", *args, stdout=lines)
        with open(lines) as stdout:
            for line in stdout:
                if line.strip() == kill_after:
                    break
            time.sleep(0.045)  # somewhere inside the next turn's agent step
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
    run(durable_url, "killed", turns)  # resumes from what tether holds
    graph = build(TetherSaver(durable_url))
    assert contents(graph, config("killed")) == expected(turns)


@pytest.mark.crash
def test_two_processes_on_one_thread_lose_no_write(
    durable_url: str, tmp_path: Path, children: tuple[ForkServer, ForkServer]
) -> None:
    gate, count = tmp_path / "go", 15
    writer = ROOT / "tests" / "integrations" / "_lg_writer.py"
    procs = [
        server.start(writer, durable_url, "shared", name, str(count), str(gate))
        for server, name in zip(children, ("p1", "p2"), strict=True)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in ("p1", "p2")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "writers did not start"
        time.sleep(0.01)
    gate.touch()
    saved: list[str] = []
    for proc in procs:
        done = proc.result()
        assert done.returncode == 0, done.stderr
        saved += json.loads(done.stdout.strip().splitlines()[-1])
    saver = TetherSaver(durable_url)
    listed = {t.config["configurable"]["checkpoint_id"]: t for t in saver.list(config("shared"))}
    assert len(saved) == len(set(saved)) == 2 * count * 3  # input, start and node checkpoints per turn
    assert set(saved) == set(listed)  # every checkpoint either process wrote is there, whole
    for tup in listed.values():
        for m in tup.checkpoint["channel_values"].get("messages", []):
            assert isinstance(m, AIMessage)
    every = {m.id for t in listed.values() for m in t.checkpoint["channel_values"].get("messages", [])}
    assert {f"{n}-{i}" for n in ("p1", "p2") for i in range(count)} <= every
