"""Peers benchmark: tether against LangGraph's SqliteSaver per chat step and DBOS per step.

Run: ``python bench/peers.py`` (``--quick`` for a short run). Needs the peers, which are not
tether's dependencies: ``pip install -e '.[bench]'``; without them it says so and skips that
peer. Prints a table, then one line of JSON. Everything on SQLite files in one temporary folder.

* chat step: one ~500-byte message appended durably, measured over the last ``--steps``/5 steps
  of a ``--steps``-step chat. tether: ``session.add``. LangGraph: ``graph.invoke`` of a
  one-node ``MessagesState`` graph with ``SqliteSaver`` (each step checkpoints the state).
  Threshold: tether >= 50x faster (a step appends its message; a checkpoint writes the whole chat).
* workflow step: a step whose output (~500 bytes) is recorded, over a task/workflow of
  ``--calls`` steps. tether, both kinds of call: ``ctx.call`` of a side-effecting tool (two
  commits: intent and result) and of a readonly one (one commit). DBOS: a ``@DBOS.step()`` in a
  ``@DBOS.workflow()`` (DBOS has one kind of step). Threshold: tether >= 5x faster, for both.

The thresholds decide the JSON's ``pass``; each is a ratio of two figures from the same run, so
a shared machine's load falls on both sides of it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

import orjson

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from _common import MESSAGE, recorded_call

import tether


def tether_chat(folder: str, steps: int) -> float:
    """Seconds per ``session.add`` over the last fifth of a chat of ``steps`` messages."""
    app = tether.App(f"sqlite:///{os.path.join(folder, 'chat.db')}")
    session = app.session("chat")
    tail = max(1, steps // 5)
    for i in range(steps - tail):
        session.add("user" if i % 2 == 0 else "assistant", MESSAGE)
    start = time.perf_counter()
    for i in range(tail):
        session.add("user" if i % 2 == 0 else "assistant", MESSAGE)
    elapsed = time.perf_counter() - start
    app.close()
    return elapsed / tail


def langgraph_chat(folder: str, steps: int) -> float | None:
    """Seconds per ``graph.invoke`` (one message in, one out, checkpointed) over the last fifth."""
    try:
        import sqlite3

        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import START, MessagesState, StateGraph
    except ImportError as exc:
        print(f"LangGraph skipped: {exc} (pip install -e '.[bench]')")
        return None

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(MESSAGE)]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    conn = sqlite3.connect(os.path.join(folder, "langgraph.db"), check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    config = {"configurable": {"thread_id": "chat"}}
    turns = steps // 2  # each invoke appends two messages
    tail = max(1, turns // 5)
    for _ in range(turns - tail):
        graph.invoke({"messages": [HumanMessage(MESSAGE)]}, config)
    start = time.perf_counter()
    for _ in range(tail):
        graph.invoke({"messages": [HumanMessage(MESSAGE)]}, config)
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / (tail * 2)  # per message, like tether's


def dbos_step(folder: str, calls: int) -> float | None:
    """Seconds per DBOS step returning ~500 bytes, over a workflow of ``calls`` steps."""
    try:
        from dbos import DBOS, DBOSConfig
    except ImportError as exc:
        print(f"DBOS skipped: {exc} (pip install -e '.[bench]')")
        return None

    @DBOS.step()
    def search(i: int) -> str:
        return MESSAGE

    elapsed = 0.0

    @DBOS.workflow()
    def many(count: int) -> None:
        nonlocal elapsed
        start = time.perf_counter()
        for i in range(count):
            search(i)
        elapsed = time.perf_counter() - start

    config: DBOSConfig = {
        "name": "tether-bench",
        "system_database_url": f"sqlite:///{os.path.join(folder, 'dbos.sqlite')}",
        "run_admin_server": False,
        "log_level": "WARNING",  # its launch and shutdown notes
    }
    DBOS(config=config)
    DBOS.launch()
    try:
        many(calls)
    finally:
        DBOS.destroy(destroy_registry=True)
    return elapsed / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the shortest run through every path, for the test suite: its figures mean nothing",
    )
    parser.add_argument("--steps", type=int, default=None, help="messages in the chat")
    parser.add_argument("--calls", type=int, default=None, help="steps in the workflow")
    args = parser.parse_args()
    steps = args.steps or (10 if args.smoke else 200 if args.quick else 1000)
    calls = args.calls or (5 if args.smoke else 200 if args.quick else 1000)
    rounds = 1 if args.smoke else 2  # of each call figure, the fastest counts
    folder = tempfile.mkdtemp(prefix="tether-bench-")
    ours_chat = tether_chat(folder, steps)
    theirs_chat = langgraph_chat(folder, steps)
    ours: dict[str, float] = {}  # "<kind>_<durability>" -> seconds per call
    for durability in ("normal", "full"):
        for kind, readonly in (("side_effecting", False), ("readonly", True)):
            ours[f"{kind}_{durability}"] = min(
                recorded_call(f"sqlite:///{os.path.join(folder, f'{kind}{durability}{r}.db')}?durability={durability}",
                              calls, readonly=readonly, result=MESSAGE)
                for r in range(rounds))
    theirs_step = dbos_step(folder, calls)
    result: dict[str, Any] = {
        "chat_steps": steps,
        "workflow_steps": calls,
        "tether_chat_step_ms": ours_chat * 1000,
        "langgraph_chat_step_ms": theirs_chat * 1000 if theirs_chat else None,
        **{f"tether_{key}_ms": value * 1000 for key, value in ours.items()},
        "dbos_step_ms": theirs_step * 1000 if theirs_step else None,
        "targets": {"vs_langgraph": 50.0, "vs_dbos": 5.0},
    }
    result["vs_langgraph"] = theirs_chat / ours_chat if theirs_chat else None
    result["vs_dbos"] = {key: theirs_step / value for key, value in ours.items()} if theirs_step else None
    ratios = [(result["vs_langgraph"], 50.0)]
    if theirs_step:
        ratios += [(ratio, 5.0) for ratio in result["vs_dbos"].values()]
    result["pass"] = all(ratio is None or ratio >= target for ratio, target in ratios)
    print(f"{'measure':52} {'tether ms':>10} {'peer ms':>10} {'tether faster':>14}")
    if theirs_chat:
        print(f"{f'chat step at {steps:,} messages vs LangGraph SqliteSaver':52} {ours_chat * 1000:10.4f} "
              f"{theirs_chat * 1000:10.4f} {result['vs_langgraph']:13.1f}x")
    if theirs_step:
        for key, value in ours.items():
            kind, durability = key.rsplit("_", 1)
            label = f"{kind.replace('_', '-')} call, durability={durability}, vs DBOS step"
            print(f"{label:52} {value * 1000:10.4f} {theirs_step * 1000:10.4f} {result['vs_dbos'][key]:13.1f}x")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
