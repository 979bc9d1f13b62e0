"""LangGraph's standard agent on TetherSaver: a ``Send`` (one per tool call, each carrying the whole
state) stored as what it adds, and thread snapshots, so a process that has not read a thread reads
its snapshot and a bounded tail of events, and whatever the snapshot did not keep (history, an
older checkpoint, a fork from one) is read from the whole stream, as a full fold gives it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("langgraph.prebuilt")

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.prebuilt import create_react_agent
from langgraph.types import Send

import tether.integrations._langgraph_log as thread_log
from tether import TaskLog
from tether.integrations._langgraph_compact import SNAPSHOT_SCHEMA
from tether.integrations._langgraph_log import stream_id
from tether.integrations.langgraph import TetherSaver
from tether.log.snapshots import snapshot_row
from tether.store import EventRow, SnapshotRow, TaskRow

TEXT = "The user asked to move the meeting to Tuesday afternoon and to invite the design team. " * 5
CONFIG: dict[str, Any] = {"configurable": {"thread_id": "agent"}}
NEVER = 10**9  # a snapshot_every no test reaches: the saver as it was before snapshots


class Model(BaseChatModel):
    """Three tool calls for a user message, then an answer."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        n = len(messages)
        if isinstance(messages[-1], HumanMessage):
            calls = [
                {"name": t, "args": {"q": f"{t} {n}"}, "id": f"call-{n}-{t}"} for t in ("search", "lookup", "fetch")
            ]
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage(content="", tool_calls=calls, id=f"ai-{n}"))]
            )
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=TEXT, id=f"ai-{n}"))])

    def bind_tools(self, tools: Any, **kw: Any) -> Any:
        return self

    @property
    def _llm_type(self) -> str:
        return "test"


@tool
def search(q: str) -> str:
    """Search for q."""
    return f"{q}: {TEXT}"


@tool
def lookup(q: str) -> str:
    """Look q up."""
    return f"{q}: {TEXT}"


@tool
def fetch(q: str) -> str:
    """Fetch q."""
    return f"{q}: {TEXT}"


def agent(saver: TetherSaver, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # moved to langchain.agents; still LangGraph's own agent
        return create_react_agent(Model(), [search, lookup, fetch], checkpointer=saver, **kw)


def turns(graph: Any, start: int, n: int) -> None:
    for k in range(start, start + n):
        graph.invoke({"messages": [HumanMessage(content=f"question {k}", id=f"user-{k}")]}, CONFIG)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[TaskLog]:
    opened = TaskLog(f"sqlite:///{tmp_path / 'threads.db'}")
    yield opened
    opened.store.close()


def fresh(log: TaskLog, **kw: Any) -> TetherSaver:
    """A saver that has read nothing (a new process, as far as the thread is concerned)."""
    return TetherSaver(TaskLog(log.store), **kw)


def counted(saver: TetherSaver) -> list[int]:
    """How many events each of the saver's store reads returns, from now on."""
    store, returned = saver.log.store, []
    read_events, read_latest = store.read_events, store.read_latest

    def events(tenant: str, task_id: str, **kw: Any) -> Any:
        rows = read_events(tenant, task_id, **kw)
        returned.append(len(rows))
        return rows

    def latest(tenant: str, task_id: str) -> Any:
        store.read_events = read_events  # type: ignore[method-assign]  # a backend may read through it
        try:
            snap, rows = read_latest(tenant, task_id)
        finally:
            store.read_events = events  # type: ignore[method-assign]
        returned.append(len(rows))
        return snap, rows

    store.read_events, store.read_latest = events, latest  # type: ignore[method-assign]
    return returned


def same(a: Any, b: Any) -> None:
    """Two tuples of one checkpoint, equal in everything LangGraph reads."""
    assert a.checkpoint == b.checkpoint
    assert a.metadata == b.metadata and a.parent_config == b.parent_config
    assert a.pending_writes == b.pending_writes


def writes_sizes(log: TaskLog) -> list[int]:
    rows = log.store.read_events(log.tenant, stream_id("agent"))
    return [len(r.data) for r in rows if r.type == "WritesSaved"]


def test_the_agents_sends_are_stored_as_what_they_add(log: TaskLog) -> None:
    saver = TetherSaver(log)
    graph = agent(saver)
    turns(graph, 0, 2)
    early = max(writes_sizes(log))
    turns(graph, 2, 8)
    # The model's writes (its answer and three Sends, each carrying the whole state) are as large at
    # turn 10 as at turn 2: each Send stores the one message it adds to the conversation.
    assert max(writes_sizes(log)) <= early + 200, (early, max(writes_sizes(log)))
    assert len(graph.get_state(CONFIG).values["messages"]) == 60


def test_pending_sends_read_back_and_run_in_another_process(log: TaskLog) -> None:
    saver = TetherSaver(log)
    turns(agent(saver), 0, 2)
    turns(agent(saver, interrupt_before=["tools"]), 2, 1)  # stops with the three tool calls sent, not run
    reader = fresh(log)
    state = agent(reader, interrupt_before=["tools"]).get_state(CONFIG)
    assert state.next == ("tools", "tools", "tools")
    sends = reader.get_tuple(CONFIG).checkpoint["channel_values"]["__pregel_tasks"]
    assert [type(s) for s in sends] == [Send] * 3
    assert [s.arg["state"]["messages"] for s in sends] == [state.values["messages"]] * 3
    agent(reader).invoke(None, CONFIG)
    messages = agent(fresh(log)).get_state(CONFIG).values["messages"]
    assert len(messages) == 18 and [m.id for m in messages[-1:]] == ["ai-17"]


def test_a_cold_read_is_a_snapshot_and_a_bounded_tail(store_url: str) -> None:
    log = TaskLog(store_url)
    try:
        writer = TetherSaver(log, snapshot_every=12)
        graph = agent(writer)
        for n in (2, 5):
            turns(graph, 0 if n == 2 else 2, n - (0 if n == 2 else 2))
            expected = writer.get_tuple(CONFIG)
            reader = fresh(log, snapshot_every=12)
            returned = counted(reader)
            same(reader.get_tuple(CONFIG), expected)
            assert len(returned) == 1 and returned[0] <= 12, returned  # however long the thread (22, 56 events)
            snap = log.store.get_snapshot(log.tenant, stream_id("agent"), at_most=NEVER)
            assert snap is not None and snap.schema == SNAPSHOT_SCHEMA and type(snap.data) is bytes
            agent(reader).invoke({"messages": [HumanMessage(content="and then?", id=f"more-{n}")]}, CONFIG)
            same(fresh(log).get_tuple(CONFIG), reader.get_tuple(CONFIG))
            writer = reader  # the next turns are written by the saver that read the snapshot
            graph = agent(writer)
    finally:
        log.store.close()


def test_what_a_snapshot_did_not_keep_is_read_from_the_whole_thread(log: TaskLog) -> None:
    writer = TetherSaver(log, snapshot_every=8)
    turns(agent(writer), 0, 4)
    whole = list(writer.list(CONFIG))
    reader = fresh(log)
    assert reader.get_tuple(CONFIG) is not None and reader._threads["agent"].view.partial
    old = whole[len(whole) // 2]
    same(reader.get_tuple(old.config), old)  # an older checkpoint than the snapshot kept
    listed = list(fresh(log).list(CONFIG))
    assert [t.config for t in listed] == [t.config for t in whole]
    for a, b in zip(listed, whole, strict=True):
        same(a, b)
    # Time travel from a saver that read the snapshot: a fork from the older checkpoint.
    forker = fresh(log)
    forked = agent(forker).update_state(old.config, {"messages": [HumanMessage(content="instead", id="fork")]})
    agent(forker).invoke(None, forked)
    head = fresh(log).get_tuple(CONFIG)
    same(head, next(iter(fresh(log).list(CONFIG, limit=1))))  # a listing folds the whole thread
    assert head.parent_config is not None and head.checkpoint["id"] > whole[0].checkpoint["id"]
    assert "fork" in [m.id for m in head.checkpoint["channel_values"]["messages"]]


def test_savers_from_a_snapshot_and_from_the_whole_history_share_a_thread(log: TaskLog) -> None:
    long_lived = TetherSaver(log, snapshot_every=8)
    turns(agent(long_lived), 0, 2)
    for k in range(2, 8, 2):
        turns(agent(fresh(log, snapshot_every=8)), k, 1)  # a new process each time, from the snapshot
        turns(agent(long_lived), k + 1, 1)  # and one that has read everything since the start
    messages = agent(fresh(log)).get_state(CONFIG).values["messages"]
    assert [m.id for m in messages if isinstance(m, HumanMessage)] == [f"user-{k}" for k in range(8)]
    assert len(messages) == 48 and len({m.id for m in messages}) == 48
    same(fresh(log).get_tuple(CONFIG), long_lived.get_tuple(CONFIG))


def test_a_thread_written_before_deltas_and_snapshots_still_reads(log: TaskLog, monkeypatch: Any) -> None:
    with monkeypatch.context() as old_tether:
        old_tether.setattr(thread_log, "_SEND", [])  # a Send's bytes stored whole, as tether stored them
        saver = TetherSaver(log, snapshot_every=NEVER)
        turns(agent(saver), 0, 2)
        turns(agent(saver, interrupt_before=["tools"]), 2, 1)
        before = TetherSaver(log, snapshot_every=NEVER).get_tuple(CONFIG)
    assert log.store.get_snapshot(log.tenant, stream_id("agent"), at_most=NEVER) is None
    reader = fresh(log, snapshot_every=8)
    same(reader.get_tuple(CONFIG), before)
    sends = reader.get_tuple(CONFIG).checkpoint["channel_values"]["__pregel_tasks"]
    assert [type(s) for s in sends] == [Send] * 3
    graph = agent(reader)
    graph.invoke(None, CONFIG)
    turns(graph, 3, 2)  # the new tether's events after the old ones, and its first snapshot
    assert log.store.get_snapshot(log.tenant, stream_id("agent"), at_most=NEVER) is not None
    same(fresh(log).get_tuple(CONFIG), reader.get_tuple(CONFIG))
    assert len(reader.get_tuple(CONFIG).checkpoint["channel_values"]["messages"]) == 30


def test_a_damaged_snapshot_is_passed_over(log: TaskLog) -> None:
    writer = TetherSaver(log, snapshot_every=8)
    turns(agent(writer), 0, 3)
    snap = log.store.get_snapshot(log.tenant, stream_id("agent"), at_most=NEVER)
    assert snap is not None
    log.store.put_snapshot(log.tenant, stream_id("agent"), snapshot_row(snap.seq, SNAPSHOT_SCHEMA, '{"lists": 1}'))
    reader = fresh(log)
    same(reader.get_tuple(CONFIG), writer.get_tuple(CONFIG))
    assert not reader._threads["agent"].view.partial  # folded from the events


def test_a_snapshot_damaged_in_its_items_is_passed_over(log: TaskLog) -> None:
    writer = TetherSaver(log, snapshot_every=8)
    turns(agent(writer), 0, 3)
    stream = stream_id("agent")
    snap = log.store.get_snapshot(log.tenant, stream, at_most=NEVER)
    assert snap is not None and snap.schema == SNAPSHOT_SCHEMA and isinstance(snap.data, bytes)
    intact = fresh(log)
    intact.get_tuple(CONFIG)
    assert intact._threads["agent"].view.partial  # read from the snapshot
    data = snap.data
    flipped = data[:-10] + bytes([data[-10] ^ 0x20]) + data[-9:]  # a byte of a message, under the old checksum
    cut = data[:-10]  # items shorter than its table says, under a checksum of what is there
    damaged_ones = [
        SnapshotRow(snap.seq, snap.schema, snap.checksum, flipped),
        snapshot_row(snap.seq, snap.schema, cut),
    ]
    for damaged in damaged_ones:
        log.store.put_snapshot(log.tenant, stream, damaged)
        reader = fresh(log)
        same(reader.get_tuple(CONFIG), writer.get_tuple(CONFIG))
        assert not reader._threads["agent"].view.partial  # folded from the events


def test_a_thread_deleted_and_started_again_is_not_read_from_the_old_snapshot(log: TaskLog) -> None:
    writer = TetherSaver(log, snapshot_every=8)
    turns(agent(writer), 0, 3)
    old = log.store.get_snapshot(log.tenant, stream_id("agent"), at_most=NEVER)
    assert old is not None
    writer.delete_thread("agent")
    turns(agent(writer), 10, 1)  # the same id again: 11 events, fewer than the old snapshot's seq
    messages = agent(fresh(log)).get_state(CONFIG).values["messages"]
    assert [m.id for m in messages if isinstance(m, HumanMessage)] == ["user-10"]
    # A saver that wrote the old thread and stored its snapshot as the new thread began (a race
    # with the deletion): the snapshot names the thread it was taken of, and is passed over.
    log.store.put_snapshot(log.tenant, stream_id("agent"), old)
    messages = agent(fresh(log)).get_state(CONFIG).values["messages"]
    assert [m.id for m in messages if isinstance(m, HumanMessage)] == ["user-10"]


@pytest.mark.parametrize("schema", [1, 2])
def test_a_thread_snapshot_of_an_earlier_schema_still_reads(log: TaskLog, schema: int) -> None:
    # A thread as tether stored it when snapshots were of schema 1 (each item inline the first time
    # it was named) or 2 (JSON text, the msgpack items one base64 text): two turns and their
    # snapshot, from tests/fixtures/langgraph_thread_v1.json and _v2.json, written by that code.
    fixture = Path(__file__).parent.parent / "fixtures" / f"langgraph_thread_v{schema}.json"
    stored = orjson.loads(fixture.read_bytes())
    rows = [EventRow(e["seq"], e["type"], e["schema"], e["at"], e["data"]) for e in stored["events"]]
    stream, at = stream_id(stored["thread_id"]), rows[0].at
    row = TaskRow(stream, log.tenant, thread_log.THREAD_TYPE, "open", None, None, at, at, 1)
    log.store.create_task(log.tenant, row, rows[0])
    log.store.append(log.tenant, stream, rows[1:], 1)
    snapshot = orjson.loads(stored["snapshot"]["data"])
    snapshot["created_at"] = at  # the thread it names: its row's, as the saver that took it wrote it
    snap = snapshot_row(stored["snapshot"]["seq"], schema, orjson.dumps(snapshot).decode())
    log.store.put_snapshot(log.tenant, stream, snap)
    reader = fresh(log, snapshot_every=8)
    returned = counted(reader)
    read = reader.get_tuple(CONFIG)
    assert reader._threads["agent"].view.partial and returned == [len(rows) - snap.seq]  # from the snapshot
    folded = fresh(log)
    folded._refold(folded._thread("agent"))  # the whole stream, as without a snapshot
    same(read, folded.get_tuple(CONFIG))
    assert [m.id for m in read.checkpoint["channel_values"]["messages"]][-1] == "ai-11"
    turns(agent(reader), 2, 1)  # written from the old snapshot's view; the next snapshot is of today's schema
    messages = agent(fresh(log)).get_state(CONFIG).values["messages"]
    assert len(messages) == 18 and messages[-1].id == "ai-17"
    assert log.store.get_snapshot(log.tenant, stream, at_most=NEVER).schema == SNAPSHOT_SCHEMA


class Tagging(JsonPlusSerializer):
    """A serializer of its own that does more than msgpack: it marks each message it reads."""

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        value = super().loads_typed(data)
        if isinstance(value, BaseMessage):
            value.additional_kwargs["read_by"] = "tagging"
        return value


def test_a_serializer_of_its_own_reads_each_item_itself(log: TaskLog) -> None:
    # LangGraph's own serializer reads a snapshot's messages in one call (an array of them); any
    # other is handed each item alone, as it was stored.
    turns(agent(TetherSaver(log, serde=Tagging(), snapshot_every=8)), 0, 3)
    reader = TetherSaver(TaskLog(log.store), serde=Tagging())
    messages = reader.get_tuple(CONFIG).checkpoint["channel_values"]["messages"]
    assert reader._threads["agent"].view.partial and len(messages) == 18
    assert all(m.additional_kwargs.get("read_by") == "tagging" for m in messages)


def test_one_call_decoding_is_offered_only_where_it_decodes_as_each_item_alone() -> None:
    """The installed JsonPlusSerializer decodes a list of items in one call as it decodes each alone
    (else register_plain_msgpack would leave it out); a serializer that revives what it unpacked
    (decoding a list otherwise than its items) is not registered."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from tether.integrations import _langgraph_log
    from tether.integrations.langgraph import _SAMPLES

    assert JsonPlusSerializer in _langgraph_log._PLAIN_MSGPACK

    class Reviving(JsonPlusSerializer):
        def loads_typed(self, data: tuple[str, bytes]) -> object:
            value = super().loads_typed(data)
            return ("revived", value) if not isinstance(value, list) else value

    assert not _langgraph_log.register_plain_msgpack(Reviving, _SAMPLES)
    assert Reviving not in _langgraph_log._PLAIN_MSGPACK
