"""TetherSaver against LangGraph's own savers: the same calls and the same graphs on TetherSaver,
InMemorySaver and SqliteSaver, and what the user sees compared — state, history, interrupts, errors,
pending writes, which nodes ran — with the ids each run makes up replaced by their order of appearance."""

from __future__ import annotations

import json
import operator
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langgraph.checkpoint.sqlite")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.func import entrypoint, task
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, RetryPolicy, Send, interrupt

from tests._forkserver import ForkServers
from tests.integrations.conftest import CHILD_ENV, HERE
from tether import TaskLog
from tether.integrations.langgraph import TetherSaver

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


# ----------------------------------------------------------------------------- graphs that already agreed
# Guards: each of these ran the same on every saver before the fixes above. They pin what a user
# sees where a saver that stores deltas, folds a log and caches views could plausibly differ.


def errors_then_resume(saver: Saver) -> Any:
    """Two parallel nodes, one fails: the other's writes are kept (``__error__`` beside them) and it
    is not run again when the thread is resumed."""
    ran: list[str] = []
    failing = [True]

    def fine(state: Log) -> dict[str, Any]:
        ran.append("fine")
        return {"log": ["fine"]}

    def fine_kept() -> bool:
        found = saver.get_tuple(CONFIG)
        return found is not None and any(w[1:] == ("log", ["fine"]) for w in found.pending_writes or ())

    def flaky(state: Log) -> dict[str, Any]:
        ran.append("flaky")
        if failing[0]:
            # Fails once the other node's writes are stored: a failure before they were (the two run
            # in parallel; a loaded machine chose either order) lost them, and the node ran again.
            deadline = time.monotonic() + 30
            while not fine_kept() and time.monotonic() < deadline:
                time.sleep(0.005)
            raise ValueError("boom")
        return {"log": ["flaky"]}

    builder = StateGraph(Log)
    builder.add_node("fine", fine)
    builder.add_node("flaky", flaky, retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=False))
    builder.add_node("join", lambda s: {"log": ["join"]})
    builder.add_edge(START, "fine")
    builder.add_edge(START, "flaky")
    builder.add_edge(["fine", "flaky"], "join")
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(ValueError, match="boom"):
        graph.invoke({"log": [], "n": 0}, CONFIG)
    failed = observe(graph, CONFIG)
    failing[0] = False
    graph.invoke(None, CONFIG)
    return failed, observe(graph, CONFIG), sorted(ran)


def interrupts_in_sends(saver: Saver) -> Any:
    """``Send`` fans out three tasks that each ``interrupt()``: answered one by id, then the rest."""

    def worker(state: Log) -> dict[str, Any]:
        n = state["n"]
        return {"log": [f"{n}:{interrupt(f'q{n}')}"]}

    builder = StateGraph(Log)
    builder.add_node("worker", worker)
    builder.add_conditional_edges(START, lambda s: [Send("worker", {"log": [], "n": i}) for i in range(3)], ["worker"])
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"log": [], "n": 0}, CONFIG)
    first = observe(graph, CONFIG)
    pending = sorted(graph.get_state(CONFIG).interrupts, key=lambda i: str(i.value))
    graph.invoke(Command(resume={pending[0].id: "x"}), CONFIG)
    second = observe(graph, CONFIG)
    graph.invoke(Command(resume={i.id: f"y{i.value}" for i in graph.get_state(CONFIG).interrupts}), CONFIG)
    return first, second, observe(graph, CONFIG)


def interrupts_twice_in_a_subgraph(saver: Saver) -> Any:
    """A subgraph node that asks twice (``__resume__`` writes replaced by the newest), then the parent
    goes on."""

    def ask(state: Log) -> dict[str, Any]:
        return {"log": [interrupt("first"), interrupt("second")]}

    inner = StateGraph(Log)
    inner.add_node("before", lambda s: {"log": ["before"]})
    inner.add_node("ask", ask)
    inner.add_edge(START, "before")
    inner.add_edge("before", "ask")
    builder = StateGraph(Log)
    builder.add_node("inner", inner.compile())
    builder.add_node("after", lambda s: {"log": ["after"]})
    builder.add_edge(START, "inner")
    builder.add_edge("inner", "after")
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"log": [], "n": 0}, CONFIG)
    graph.invoke(Command(resume="A"), CONFIG)
    between = observe(graph, CONFIG)
    graph.invoke(Command(resume="B"), CONFIG)
    return between, observe(graph, CONFIG)


def functional_tasks_are_not_run_again(saver: Saver) -> Any:
    """``@entrypoint`` with ``@task`` calls, then an interrupt: on resume the tasks' results come from
    their stored writes."""
    ran: list[int] = []

    @task
    def double(x: int) -> int:
        ran.append(x)
        return x * 2

    @entrypoint(checkpointer=saver)
    def flow(xs: list[int]) -> dict[str, Any]:
        results = [f.result() for f in [double(x) for x in xs]]
        answer = interrupt({"results": results})
        return {"results": results, "answer": answer, "more": double(100).result()}

    flow.invoke([1, 2, 3], CONFIG)
    waiting = observe(flow, CONFIG)
    done = flow.invoke(Command(resume="yes"), CONFIG)
    return waiting, done, observe(flow, CONFIG), sorted(ran)


def _extend(state: list[Any], writes: list[list[Any]]) -> list[Any]:
    return [*state, *(item for write in writes for item in write)]


class Items(TypedDict):
    items: Annotated[list[Any], DeltaChannel(_extend, snapshot_frequency=3)]
    n: int


def delta_channel_and_time_travel(saver: Saver) -> Any:
    """A ``DeltaChannel`` (values rebuilt from ancestors' writes) over five runs, a replay from a past
    checkpoint and an ``update_state`` fork."""
    builder = StateGraph(Items)
    builder.add_node("a", lambda s: {"items": [f"a{len(s['items'])}"]})
    builder.add_node("b", lambda s: {"items": [f"b{len(s['items'])}"], "n": s["n"] + 1})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    graph = builder.compile(checkpointer=saver)
    for i in range(5):
        graph.invoke({"items": [i], "n": i}, CONFIG)
    history = list(graph.get_state_history(CONFIG))
    graph.invoke(None, history[7].config)
    graph.invoke(None, graph.update_state(history[4].config, {"items": ["edited"]}, as_node="a"))
    return observe(graph, CONFIG)


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]


def durability_modes(saver: Saver) -> Any:
    """The same interrupted chat in each durability mode: what was saved, and the history."""
    seen = {}
    for mode in ("exit", "async", "sync"):
        builder = StateGraph(Chat)
        builder.add_node(
            "bot", lambda s: {"messages": [AIMessage(f"re {len(s['messages'])}", id=f"ai{len(s['messages'])}")]}
        )
        builder.add_node("human", lambda s: {"messages": [HumanMessage(interrupt("your turn"), id="h2")]})
        builder.add_edge(START, "bot")
        builder.add_edge("bot", "human")
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": mode}}
        graph.invoke({"messages": [HumanMessage("hi", id="h1")]}, config, durability=mode)
        graph.invoke(Command(resume="more"), config, durability=mode)
        seen[mode] = observe(graph, config)
    return seen


def history_pages(saver: Saver) -> Any:
    """``get_state_history`` with ``filter``, ``before`` and ``limit``."""
    builder = StateGraph(Log)
    builder.add_node("a", lambda s: {"log": ["a"]})
    builder.add_node("b", lambda s: {"log": ["b"]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    graph = builder.compile(checkpointer=saver)
    for i in range(3):
        graph.invoke({"log": [str(i)], "n": i}, CONFIG)
    history = list(graph.get_state_history(CONFIG))
    pages = [
        graph.get_state_history(CONFIG, filter={"source": "input"}),
        graph.get_state_history(CONFIG, filter={"step": 2}),
        graph.get_state_history(CONFIG, before=history[3].config, limit=2),
        graph.get_state_history(CONFIG, limit=1),
    ]
    return [[snapshot(s) for s in page] for page in pages]


@pytest.mark.parametrize(
    "scenario",
    [
        errors_then_resume,
        interrupts_in_sends,
        interrupts_twice_in_a_subgraph,
        functional_tasks_are_not_run_again,
        delta_channel_and_time_travel,
        durability_modes,
        history_pages,
    ],
)
def test_a_graph_sees_the_same_on_every_saver(
    savers: dict[str, Callable[[], Saver]], scenario: Callable[[Saver], Any]
) -> None:
    same_everywhere(savers, scenario)


# What _lg_resume_child.py imports (LangGraph, its SqliteSaver, TetherSaver and the stores, and the
# tracers LangChain imports lazily at a graph's first run), done once in its fork servers instead of
# in each of its ten lives (2-4 s each on two busy cores).
LG_CHILD_IMPORTS = (
    "langgraph.checkpoint.base",
    "langgraph.checkpoint.sqlite",
    "langgraph.graph",
    "langgraph.types",
    "langchain_core.tracers.context",
    "langchain_core.tracers.run_collector",
    "langchain_core.tracers.stdout",
    "tether.integrations.langgraph",
    "tether.store.postgres",
    "tether.store.sqlite",
)


@pytest.mark.crash
def test_sigkill_at_each_step_then_resume_as_langgraphs_own_saver_does(
    durable_url: str, tmp_path: Path, fork_servers: ForkServers
) -> None:
    """A graph killed (SIGKILL) beside a finished parallel node, after an interrupt was answered and
    in a ``Send`` task whose siblings finished, each time resumed by a fresh process on the same
    database: the same states, and the same nodes run again, on TetherSaver as on SqliteSaver. Each
    life is a process forked from a server with the imports done (tests/_forkserver.py), from each
    of two servers in turn, so a life never hashes with the seed of the one before it."""
    lives = ["start", "continue", "resume:yes", "resume:yes", "continue"]
    servers = fork_servers(LG_CHILD_IMPORTS, CHILD_ENV)

    def run(kind: str, db: str, work: Path) -> tuple[list[Any], Counter[str]]:
        work.mkdir()
        ends = []
        for life, action in enumerate(lives):
            child = servers[life % 2].run(HERE / "_lg_resume_child.py", kind, db, str(work), action, timeout=120)
            assert child.returncode in (0, -9), child.stderr
            ends.append(json.loads(child.stdout) if child.returncode == 0 else "killed")
        return ends, Counter((work / "runs.log").read_text().splitlines())

    reference = run("sqlite", str(tmp_path / "langgraph.db"), tmp_path / "reference")
    assert reference[0][-1]["next"] == [] and reference[1]["work:item 2"] == 2
    assert run("tether", durable_url, tmp_path / "tether") == reference
