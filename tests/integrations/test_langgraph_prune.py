"""``prune(keep_latest)`` frees the pruned checkpoints' bytes: their rows are deleted, the kept
checkpoints restated whole, and the thread reads (and goes on) exactly as before."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.types import Command

from tests.integrations import _lg_graph as chat
from tether import TaskLog
from tether.integrations._langgraph_log import stream_id
from tether.integrations.langgraph import TetherSaver
from tether.store import open_store

TURNS = 30


def stored(saver: TetherSaver, thread: str) -> tuple[int, int]:
    """How many event rows the thread's stream holds, and their bytes."""
    rows = saver.log.store.read_events(saver.log.tenant, stream_id(thread))
    return len(rows), sum(len(r.data) for r in rows)


def seen(graph: Any, config: dict[str, Any]) -> tuple[Any, ...]:
    state = graph.get_state(config, subgraphs=True)
    messages = [(type(m).__name__, m.content, m.id) for m in state.values["messages"]]
    interrupts = [(i.value, i.id) for t in state.tasks for i in t.interrupts]
    return messages, state.values["notes"], state.next, interrupts, state.config["configurable"]["checkpoint_id"]


def talk(graph: Any, config: dict[str, Any], turns: range) -> None:
    for k in turns:
        graph.invoke(Command(resume=f"user {k}"), config)


def test_prune_deletes_the_pruned_rows_and_the_thread_goes_on(durable_url: str) -> None:
    saver = TetherSaver(durable_url)
    graph = chat.build(saver)
    config: dict[str, Any] = {"configurable": {"thread_id": "long"}}
    graph.invoke({"messages": [chat.HumanMessage(content="hello", id="human-hello")], "notes": 0}, config)
    talk(graph, config, range(TURNS))
    other = TetherSaver(TaskLog(saver.log.store))  # a saver that read the thread before the prune
    before, other_before = seen(graph, config), seen(chat.build(other), config)
    assert before == other_before
    rows, size = stored(saver, "long")
    newest: dict[str, str] = {}
    for t in saver.list(config):
        ns, cid = t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]
        newest[ns] = max(newest.get(ns, cid), cid)

    saver.prune(["long"])

    rows_after, size_after = stored(saver, "long")
    assert rows_after < rows / 10, (rows, rows_after)  # one checkpoint per namespace and its writes
    assert size_after < size / 3, (size, size_after)  # the conversation once, without its history
    listed = {(c := t.config["configurable"])["checkpoint_ns"]: c["checkpoint_id"] for t in saver.list(config)}
    assert listed == newest and len(newest) > 2  # each namespace's newest (each subgraph run has its own)
    assert seen(graph, config) == before  # the kept checkpoint loads as it was, with its interrupt
    assert seen(chat.build(other), config) == before  # a reader whose cache predates the prune starts over
    assert seen(chat.build(TetherSaver(durable_url)), config) == before  # and a fresh one
    talk(graph, config, range(TURNS, TURNS + 2))  # the thread goes on from the kept checkpoint
    graph.invoke(Command(resume="stop"), config)
    assert [m.content for m in graph.get_state(config).values["messages"]] == chat.expected(TURNS + 2)
    saver.prune(["long"])  # twice: the second compacts what the first left and the turns since
    assert [m.content for m in graph.get_state(config).values["messages"]] == chat.expected(TURNS + 2)


def test_prune_lets_sqlite_reuse_the_space_and_vacuum_shrink_the_file(tmp_path: Any) -> None:
    """On SQLite the deleted rows' pages go on the file's free list: later writes reuse them, and
    ``VACUUM`` gives them back to the file system."""
    path = str(tmp_path / "t.db")
    saver = TetherSaver(f"sqlite:///{path}")
    graph = chat.build(saver)
    config: dict[str, Any] = {"configurable": {"thread_id": "long"}}
    graph.invoke({"messages": [chat.HumanMessage(content="hello", id="human-hello")], "notes": 0}, config)
    talk(graph, config, range(TURNS))
    before = seen(graph, config)

    def pages(of: str = path) -> tuple[int, int]:
        with sqlite3.connect(of) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            count = conn.execute("PRAGMA page_count").fetchone()[0]
            return count, conn.execute("PRAGMA freelist_count").fetchone()[0]

    # The pages of the schema alone (its tables and indexes, one page each at least), which no
    # prune frees: the halves below are of the pages the thread's records hold.
    empty = str(tmp_path / "empty.db")
    open_store(f"sqlite:///{empty}").close()
    schema = pages(empty)[0]
    total, free = pages()
    saver.prune(["long"])
    total_after, free_after = pages()
    held, held_after = total - free - schema, total_after - free_after - schema
    assert held_after < held / 2, (schema, total, free, total_after, free_after)  # pages freed
    saver.close()
    saver.log.store.close()
    size = os.path.getsize(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the database is in WAL mode: the file changes at the checkpoint
    conn.close()
    page = size // total_after
    assert os.path.getsize(path) - schema * page < (size - schema * page) / 2, (size, os.path.getsize(path))
    assert seen(chat.build(TetherSaver(f"sqlite:///{path}")), config) == before
