"""TetherSaver's own rules, beyond LangGraph's suite: writers that race, caches that go stale,
values that are not appends, metadata JSON cannot hold."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

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
