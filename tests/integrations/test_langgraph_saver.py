"""TetherSaver's own rules, beyond LangGraph's suite: writers that race, caches that go stale,
values that are not appends, metadata JSON cannot hold."""

from __future__ import annotations

import base64
import operator
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tether import TaskLog
from tether.integrations._langgraph_log import CheckpointSaved, stream_id
from tether.integrations.langgraph import TetherSaver


def put(saver: TetherSaver, thread: str, parent: str | None, messages: list[Any], **meta: Any) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": messages}
    cp["channel_versions"] = {"messages": len(messages)}
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if parent:
        conf["checkpoint_id"] = parent
    stored = saver.put({"configurable": conf}, cp, {"source": "loop", "step": len(messages), **meta}, {"messages": 1})
    return str(stored["configurable"]["checkpoint_id"])


def stored_kinds(saver: TetherSaver, thread: str) -> list[str]:
    rows = saver.log.store.read_events(saver.log.tenant, stream_id(thread))
    events = [saver.log.decode(r).event for r in rows]
    return [e.values["messages"][0] for e in events if isinstance(e, CheckpointSaved)]


def latest(saver: TetherSaver, thread: str) -> Any:
    tup = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    assert tup is not None
    return tup


def test_a_stale_writer_rereads_and_appends(store_url: str) -> None:
    log = TaskLog(store_url)
    a, b = TetherSaver(log), TetherSaver(TaskLog(log.store))
    first = put(a, "t", None, [HumanMessage("hi", id="1")])
    assert latest(b, "t").checkpoint["id"] == first  # b has read the thread
    second = put(a, "t", first, [HumanMessage("hi", id="1"), AIMessage("a", id="2")])
    third = put(b, "t", first, [HumanMessage("hi", id="1"), AIMessage("b", id="3")])  # b is one behind
    ids = {t.checkpoint["id"] for t in a.list({"configurable": {"thread_id": "t"}})}
    assert ids == {first, second, third}
    assert [m.content for m in latest(a, "t").checkpoint["channel_values"]["messages"]] == ["hi", "b"]
    assert stored_kinds(a, "t") == ["l", "a", "a"]


def test_a_thread_deleted_elsewhere_is_forgotten(store_url: str) -> None:
    log = TaskLog(store_url)
    a, b = TetherSaver(log), TetherSaver(TaskLog(log.store))
    first = put(a, "t", None, [HumanMessage("hi", id="1")])
    put(a, "t", first, [HumanMessage("hi", id="1"), AIMessage("x", id="2")])
    assert latest(b, "t") is not None
    a.delete_thread("t")
    assert b.get_tuple({"configurable": {"thread_id": "t"}}) is None
    again = put(b, "t", None, [HumanMessage("new", id="9")])
    assert latest(a, "t").checkpoint["id"] == again
    assert [m.content for m in latest(a, "t").checkpoint["channel_values"]["messages"]] == ["new"]


def test_a_list_that_is_not_an_append_is_stored_whole(store_url: str) -> None:
    saver = TetherSaver(store_url)
    one = put(saver, "t", None, [HumanMessage("a", id="1"), AIMessage("b", id="2")])
    two = put(saver, "t", one, [HumanMessage("a, edited", id="1"), AIMessage("b", id="2")])
    put(saver, "t", two, [HumanMessage("a, edited", id="1")])
    assert stored_kinds(saver, "t") == ["l", "l", "l"]
    fresh = TetherSaver(TaskLog(saver.log.store))
    history = [[m.content for m in t.checkpoint["channel_values"]["messages"]] for t in fresh.list(None)]
    assert history == [["a, edited"], ["a, edited", "b"], ["a", "b"]]


def test_items_equal_but_stored_otherwise_are_not_taken_for_the_start(store_url: str) -> None:
    """``1 == 1.0 == True``: a list whose first items equal the stored ones but are another type is
    not an append to them (its delta would bring the old items back); each value reads back as put."""
    saver = TetherSaver(store_url)
    one = put(saver, "t", None, [1, 0])
    two = put(saver, "t", one, [1.0, 0.0, 2.5])
    three = put(saver, "t", two, [True, False, 2.5, 3])
    put(saver, "t", three, [True, False, 2.5, 3, 4])  # a true append still stores the delta alone
    assert stored_kinds(saver, "t") == ["l", "l", "l", "a"]
    fresh = TetherSaver(TaskLog(saver.log.store))
    values = [t.checkpoint["channel_values"]["messages"] for t in fresh.list(None)]
    assert [[type(v).__name__ for v in value] for value in values] == [
        ["bool", "bool", "float", "int", "int"],
        ["bool", "bool", "float", "int"],
        ["float", "float", "float"],
        ["int", "int"],
    ]


def test_values_returned_are_lists_of_their_own(store_url: str) -> None:
    saver = TetherSaver(store_url)
    put(saver, "t", None, [HumanMessage("a", id="1")])
    latest(saver, "t").checkpoint["channel_values"]["messages"].append("garbage")
    assert len(latest(saver, "t").checkpoint["channel_values"]["messages"]) == 1


def test_metadata_json_cannot_hold_round_trips(store_url: str) -> None:
    saver = TetherSaver(store_url)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    put(saver, "t", None, [], when=when)
    assert latest(TetherSaver(TaskLog(saver.log.store)), "t").metadata["when"] == when


def test_a_small_cache_still_reads_everything(store_url: str) -> None:
    saver = TetherSaver(store_url, cache_size=1)
    for thread in ("a", "b", "c"):
        parent = None
        for n in range(1, 4):
            parent = put(saver, thread, parent, [HumanMessage(str(i), id=f"{thread}{i}") for i in range(n)])
    listed = list(saver.list(None))
    assert len(listed) == 9
    assert all(len(t.checkpoint["channel_values"]["messages"]) == t.metadata["step"] for t in listed)


def test_delta_channel_history_matches_langgraphs_own_walk(store_url: str) -> None:
    import asyncio

    from langchain_core.messages import HumanMessage as Human
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.types import Command

    from tests.integrations._lg_graph import build

    saver = TetherSaver(store_url)
    graph = build(saver)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "delta"}}
    graph.invoke({"messages": [Human(content="hello", id="human-hello")], "notes": 0}, cfg)
    for k in range(3):
        graph.invoke(Command(resume=f"user {k}"), cfg)
    channels = ["messages", "notes", "branch:to:agent", "absent"]
    for tup in saver.list({"configurable": {"thread_id": "delta", "checkpoint_ns": ""}}):
        ours = saver.get_delta_channel_history(config=tup.config, channels=channels)
        walked = BaseCheckpointSaver.get_delta_channel_history(saver, config=tup.config, channels=channels)
        assert ours == walked
    latest_config = saver.get_tuple(cfg).config  # type: ignore[union-attr]
    assert asyncio.run(saver.aget_delta_channel_history(config=latest_config, channels=channels)) == (
        saver.get_delta_channel_history(config=latest_config, channels=channels)
    )
    assert saver.get_delta_channel_history(config=latest_config, channels=[]) == {}


class Inner(TypedDict):
    n: int
    out: Annotated[list[int], operator.add]


class Outer(TypedDict):
    out: Annotated[list[int], operator.add]


def test_parallel_subgraphs_in_one_process(store_url: str) -> None:
    """Send fans out to five subgraph runs at once: their checkpoints and writes race inside one saver."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    inner = StateGraph(Inner)
    inner.add_node("double", lambda s: {"out": [s["n"] * 2]})
    inner.add_node("triple", lambda s: {"out": [s["n"] * 3]})
    inner.add_edge(START, "double")
    inner.add_edge("double", "triple")
    inner.add_edge("triple", END)
    outer = StateGraph(Outer)
    outer.add_node("work", inner.compile())
    outer.add_conditional_edges(START, lambda s: [Send("work", {"n": n, "out": []}) for n in range(5)], ["work"])
    saver = TetherSaver(store_url)
    graph = outer.compile(checkpointer=saver)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "fan"}}
    result = graph.invoke({"out": []}, cfg)
    assert sorted(result["out"]) == sorted([n * 2 for n in range(5)] + [n * 3 for n in range(5)])
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list({"configurable": {"thread_id": "fan"}})}
    assert len([ns for ns in namespaces if ns.startswith("work:")]) == 5
    fresh = outer.compile(checkpointer=TetherSaver(TaskLog(saver.log.store)))
    assert sorted(fresh.get_state(cfg).values["out"]) == sorted(result["out"])


def test_an_encrypting_serializer(store_url: str) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class Xor:  # a stand-in cipher: the saver must only ever store what the serializer gives it
        def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
            return "xor", bytes(b ^ 0x5A for b in plaintext)

        def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
            assert ciphername == "xor"
            return bytes(b ^ 0x5A for b in ciphertext)

    serde = EncryptedSerializer(Xor(), JsonPlusSerializer())
    saver = TetherSaver(store_url, serde=serde)
    first = put(saver, "t", None, [HumanMessage("secret", id="1")])
    put(saver, "t", first, [HumanMessage("secret", id="1"), AIMessage("more", id="2")])
    rows = saver.log.store.read_events(saver.log.tenant, stream_id("t"))
    stored = b"".join(r.data if isinstance(r.data, bytes) else r.data.encode() for r in rows)
    assert b"secret" not in stored and base64.b64encode(b"secret")[:6] not in stored
    fresh = TetherSaver(TaskLog(saver.log.store), serde=serde)
    assert [m.content for m in latest(fresh, "t").checkpoint["channel_values"]["messages"]] == ["secret", "more"]


def test_each_listed_value_is_a_list_of_its_own(store_url: str) -> None:
    """Reading a history newest first hands out each checkpoint's messages uncopied when they are a
    slice of the newer one's: still every list is the caller's own — changing one changes no other
    tuple, and no later read."""
    saver = TetherSaver(TaskLog(store_url))
    messages: list[Any] = []
    parent = None
    for i in range(6):
        messages = [*messages, HumanMessage(f"m{i}", id=str(i))]
        parent = put(saver, "t", parent, messages)
    config = {"configurable": {"thread_id": "t"}}
    lists = [t.checkpoint["channel_values"]["messages"] for t in saver.list(config)]
    assert [len(x) for x in lists] == [6, 5, 4, 3, 2, 1]
    assert len({id(x) for x in lists}) == len(lists)
    for changed in lists:
        changed.append(AIMessage("extra"))
        changed[0] = AIMessage("replaced")
    again = [[m.content for m in t.checkpoint["channel_values"]["messages"]] for t in saver.list(config)]
    assert again == [[f"m{i}" for i in range(n)] for n in range(6, 0, -1)]
    assert [m.content for m in latest(saver, "t").checkpoint["channel_values"]["messages"]] == [
        f"m{i}" for i in range(6)
    ]
