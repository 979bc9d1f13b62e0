"""TetherSaver against LangGraph's own savers: the same calls and the same graphs on TetherSaver,
InMemorySaver and SqliteSaver, and what the user sees compared — state, history, interrupts, errors,
pending writes, which nodes ran — with the ids each run makes up replaced by their order of appearance."""

from __future__ import annotations

import operator
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langgraph.checkpoint.sqlite")

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph

from tether import TaskLog
from tether.integrations.langgraph import TetherSaver

ROOT = Path(__file__).resolve().parents[2]
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")

Saver = BaseCheckpointSaver[Any]


@pytest.fixture
def savers(store_url: str, tmp_path: Path) -> Iterator[dict[str, Callable[[], Saver]]]:
    """A fresh saver of each kind per call: TetherSaver (on every backend) and LangGraph's two."""
    made: list[Any] = []

    def sqlite_saver() -> Saver:
        conn = sqlite3.connect(tmp_path / f"lg-{len(made)}.db", check_same_thread=False)
        made.append(conn)
        return SqliteSaver(conn)

    def tether_saver() -> Saver:
        log = TaskLog(store_url)
        made.append(log.store)
        return TetherSaver(log, tenant=f"t{len(made)}")

    yield {"memory": InMemorySaver, "sqlite": sqlite_saver, "tether": tether_saver}
    for thing in made:
        thing.close()


def same_everywhere(savers: dict[str, Callable[[], Saver]], scenario: Callable[[Saver], Any]) -> Any:
    """Run ``scenario`` on a saver of each kind; what it returns (ids made uniform) must be the same."""
    seen = {name: _uniform(scenario(make())) for name, make in savers.items()}
    assert seen["tether"] == seen["memory"], "TetherSaver differs from InMemorySaver"
    assert seen["tether"] == seen["sqlite"], "TetherSaver differs from SqliteSaver"
    return seen["tether"]


def _uniform(value: Any) -> str:
    """``value``'s repr, each id replaced by the order it first appears in."""
    ids: dict[str, str] = {}
    return _ID.sub(lambda m: ids.setdefault(m.group(0), f"<id{len(ids)}>"), repr(value))


def snapshot(s: Any) -> dict[str, Any]:
    """What a user sees of a ``StateSnapshot``: values, next, tasks (errors, interrupts, results,
    subgraph states), metadata, configs."""
    tasks = [
        (t.name, t.path, repr(t.error) if t.error else None, [i.value for i in t.interrupts], t.result)
        + ((snapshot(t.state),) if hasattr(t.state, "next") else (t.state,))
        for t in s.tasks
    ]
    metadata = {k: v for k, v in (s.metadata or {}).items() if k != "run_id"}
    return {
        "values": s.values,
        "next": s.next,
        "tasks": tasks,
        "metadata": metadata,
        "interrupts": [i.value for i in s.interrupts],
        "config": s.config,
        "parent": s.parent_config,
    }


def observe(graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": snapshot(graph.get_state(config, subgraphs=True)),
        "history": [snapshot(s) for s in graph.get_state_history(config)],
    }


class Log(TypedDict):
    log: Annotated[list[str], operator.add]
    n: int


CONFIG: dict[str, Any] = {"configurable": {"thread_id": "1"}}


# ----------------------------------------------------------------------------- what each fix changed


def test_a_checkpoint_named_by_id_comes_back_under_the_callers_config(
    savers: dict[str, Callable[[], Saver]],
) -> None:
    """``get_tuple`` with a ``checkpoint_id`` answers with the config it was asked with, as LangGraph's
    savers do (so ``get_state`` of a past checkpoint keeps the caller's keys)."""

    def scenario(saver: Saver) -> Any:
        builder = StateGraph(Log)
        builder.add_node("a", lambda s: {"log": ["a"]})
        builder.add_edge(START, "a")
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"log": [], "n": 0}, CONFIG)
        first = list(graph.get_state_history(CONFIG))[-1].config["configurable"]["checkpoint_id"]
        asked = {"configurable": {"thread_id": "1", "checkpoint_id": first, "user": "u-1"}}
        return saver.get_tuple(asked).config, graph.get_state(asked).config  # type: ignore[union-attr]

    seen = same_everywhere(savers, scenario)
    assert "'user': 'u-1'" in seen


def test_copying_a_pruned_thread_keeps_the_targets_own_checkpoints(store_url: str) -> None:
    """A pruned thread's history starts with a ``ThreadCompacted`` event; copied as it was into a thread
    with checkpoints of its own, it made every reader drop those."""
    saver = TetherSaver(store_url)
    parents: dict[str, str | None] = {"source": None, "target": None}
    for k in range(3):
        for thread in parents:
            cp = empty_checkpoint()
            cp["channel_values"] = {"n": f"{thread} {k}"}
            cp["channel_versions"] = {"n": k + 1}
            conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
            if parents[thread]:
                conf["checkpoint_id"] = parents[thread]
            stored = saver.put({"configurable": conf}, cp, {"step": k}, {"n": k + 1})
            parents[thread] = stored["configurable"]["checkpoint_id"]
    saver.prune(["source"])
    saver.copy_thread("source", "target")
    target = {"configurable": {"thread_id": "target"}}
    for reader in (saver, TetherSaver(TaskLog(saver.log.store))):
        values = [t.checkpoint["channel_values"]["n"] for t in reader.list(target)]
        assert values == ["target 2", "source 2", "target 1", "target 0"]


def another(saver: Saver) -> Saver:
    """The same database as another process sees it: a TetherSaver of its own (nothing cached), or
    LangGraph's saver itself (it caches nothing)."""
    return TetherSaver(TaskLog(saver.log.store)) if isinstance(saver, TetherSaver) else saver


def put_messages(saver: Saver, thread: str, parent: str | None, contents: list[str]) -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [HumanMessage(c, id=c) for c in contents]}
    cp["channel_versions"] = {"messages": len(contents)}
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if parent:
        conf["checkpoint_id"] = parent
    stored = saver.put({"configurable": conf}, cp, {"step": len(contents)}, {"messages": len(contents)})
    return str(stored["configurable"]["checkpoint_id"])


def test_a_write_after_the_thread_was_deleted_and_started_again_elsewhere(
    savers: dict[str, Callable[[], Saver]],
) -> None:
    """A run that loaded a thread puts its next checkpoint after another process deleted the thread
    and started it again: the checkpoint is stored whole, as LangGraph's savers store it. TetherSaver
    appended it as a delta against the thread it had cached (the new thread had reached the same
    version), and every read of the thread then raised."""

    def scenario(saver: Saver) -> Any:
        elsewhere = another(saver)
        one = put_messages(saver, "t", None, ["hi"])
        two = put_messages(saver, "t", one, ["hi", "there"])
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None
        elsewhere.delete_thread("t")  # another process starts the conversation over
        put_messages(elsewhere, "t", put_messages(elsewhere, "t", None, ["new"]), ["new", "start"])
        put_messages(saver, "t", two, ["hi", "there", "late"])  # the first run's next step lands
        return [
            ([m.content for m in t.checkpoint["channel_values"]["messages"]], t.metadata["step"])
            for t in another(saver).list({"configurable": {"thread_id": "t"}})
        ]

    seen = same_everywhere(savers, scenario)
    assert "'late'" in seen
