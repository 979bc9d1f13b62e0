"""One life of a LangGraph graph that is SIGKILLed at chosen points and resumed by the next process,
run on TetherSaver or on LangGraph's own SqliteSaver (the reference), to compare what each keeps.

``python -m tests.integrations._lg_resume_child SAVER DB WORK ACTION``: SAVER is ``tether`` (DB a
store URL) or ``sqlite`` (DB a file for SqliteSaver); WORK a folder for the run's records; ACTION
``start``, ``continue`` (``invoke(None)``) or ``resume:VALUE`` (``Command(resume=VALUE)``).

The graph: ``fast`` and ``slow`` run in parallel (``slow`` dies once fast's write is stored); ``ask``
interrupts for a human, and dies once after it was answered; ``Send`` fans out three ``work``
tasks (``work 2`` dies once the other two's writes are stored); ``tally`` ends it. Each node notes each
time it runs in WORK/runs.log; each kill point fires once (a marker file). Prints the state it ends in.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command, Send, interrupt

CONFIG: dict[str, Any] = {"configurable": {"thread_id": "crash"}}


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def open_saver(kind: str, db: str) -> BaseCheckpointSaver[Any]:
    if kind == "tether":
        from tether.integrations.langgraph import TetherSaver

        return TetherSaver(db)
    from langgraph.checkpoint.sqlite import SqliteSaver

    return SqliteSaver(sqlite3.connect(db, check_same_thread=False))


def build(saver: BaseCheckpointSaver[Any], work: Path, reader: Callable[[], BaseCheckpointSaver[Any]]) -> Any:
    def note(what: str) -> None:
        with open(work / "runs.log", "a") as f:
            f.write(what + "\n")

    def die_once(point: str) -> None:
        marker = work / f"killed-{point}"
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)

    def stored(values: set[str]) -> None:
        """Wait until another reader of the database sees ``values`` written to ``log`` as pending writes."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            tup = reader().get_tuple(CONFIG)
            if tup is not None and values <= {v for _, c, v in tup.pending_writes if c == "log" for v in v}:
                return
            time.sleep(0.01)
        raise TimeoutError(f"{values} never stored")

    def fast(state: State) -> dict[str, Any]:
        note("fast")
        return {"log": ["fast"]}

    def slow(state: State) -> dict[str, Any]:
        note("slow")
        stored({"fast"})
        die_once("slow")
        return {"log": ["slow"]}

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "go on?", "seen": len(state["log"])})
        note(f"ask:{answer}")
        die_once("ask")
        return {"log": [f"ask:{answer}"]}

    def fan(state: State) -> list[Send]:
        return [Send("work", {"log": [f"item {n}"]}) for n in range(3)]

    def do_work(state: State) -> dict[str, Any]:
        item = state["log"][-1]
        note(f"work:{item}")
        if item == "item 2":
            stored({"done item 0", "done item 1"})
            die_once("work")
        return {"log": [f"done {item}"]}

    def tally(state: State) -> dict[str, Any]:
        note("tally")
        return {"log": [f"tally {len(state['log'])}"]}

    builder = StateGraph(State)
    builder.add_node("fast", fast)
    builder.add_node("slow", slow)
    builder.add_node("ask", ask)
    builder.add_node("work", do_work)
    builder.add_node("tally", tally)
    builder.add_edge(START, "fast")
    builder.add_edge(START, "slow")
    builder.add_edge(["fast", "slow"], "ask")
    builder.add_conditional_edges("ask", fan, ["work"])
    builder.add_edge("work", "tally")
    return builder.compile(checkpointer=saver)


def main(kind: str, db: str, work: Path, action: str) -> None:
    readers: list[BaseCheckpointSaver[Any]] = []  # a second saver on the database, opened once when needed

    def reader() -> BaseCheckpointSaver[Any]:
        if not readers:
            readers.append(open_saver(kind, db))
        return readers[0]

    graph = build(open_saver(kind, db), work, reader)
    if action == "start":
        graph.invoke({"log": []}, CONFIG)
    elif action == "continue":
        graph.invoke(None, CONFIG)
    else:
        graph.invoke(Command(resume=action.removeprefix("resume:")), CONFIG)
    state = graph.get_state(CONFIG)
    interrupts = [i.value for i in state.interrupts]
    print(json.dumps({"log": state.values.get("log"), "next": list(state.next), "interrupts": interrupts}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4])
