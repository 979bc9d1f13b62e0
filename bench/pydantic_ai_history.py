"""Pydantic AI benchmark: ``TetherHistory`` and the durable ``run()`` beside Pydantic AI's JSON message history.

Run: ``python bench/pydantic_ai_history.py`` (200 turns; ``--quick``: 50; ``--smoke``: 5, for the test suite).
Prints a table, the ratios the targets name, then one line of JSON.

Each turn is a realistic agent turn on Pydantic AI's offline ``FunctionModel``: the user's message,
the model calling three tools at once, the three tools' results, the model's answer; every payload
~500 bytes. The same turns are run, in one process, with

- the JSON history Pydantic AI's docs keep between runs (``result.all_messages_json()`` written to a
  file after each turn, read back with ``ModelMessagesTypeAdapter`` before the next),
- ``TetherHistory`` on tether's SQLite (``message_history=history.messages()``, then
  ``history.add(result.new_messages())``),
- the durable ``run()``: each turn a tether task on that database (``app.run(turn, text,
  session_id=...)``), every model request and tool call a recorded call.

``bytes_per_turn``: the file's (the database's, its write-ahead log checkpointed) growth per turn
after the first; ``ms_per_turn``: wall time per turn. Targets: TetherHistory's bytes ≤ 1.2× the JSON
history's; the durable run's time ≤ 1.3× and bytes ≤ 2×.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

sys.path.insert(0, os.path.dirname(__file__))
from _common import MESSAGE
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import tether
from tether.integrations.pydantic_ai import TetherHistory, run

TOOLS = ("orders", "parcels", "refunds")


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Three parallel tool calls, then the answer once their results are in."""
    last = messages[-1].parts
    if any(p.part_kind == "tool-return" for p in last):
        return ModelResponse(parts=[TextPart(MESSAGE)])
    n = sum(len(m.parts) for m in messages)
    return ModelResponse(parts=[ToolCallPart(t, {"query": MESSAGE[:200]}, tool_call_id=f"c{n}-{t}") for t in TOOLS])


def agent() -> Agent[None, str]:
    made: Agent[None, str] = Agent(FunctionModel(answer), system_prompt="You help with orders.")
    for name in TOOLS:

        def tool(query: str) -> str:
            return MESSAGE

        tool.__name__ = name
        made.tool_plain(tool)
    return made


def size(path: str) -> int:
    if path.endswith(".db"):
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


async def turns_of(turn: Callable[[int], Awaitable[Any]], turns: int, path: str) -> dict[str, float]:
    await turn(0)
    first = size(path)
    start = time.perf_counter()
    for i in range(1, turns):
        await turn(i)
    elapsed = time.perf_counter() - start
    return {"ms_per_turn": elapsed * 1000 / (turns - 1), "bytes_per_turn": (size(path) - first) / (turns - 1)}


async def json_history(turns: int, folder: str) -> dict[str, float]:
    path, support = f"{folder}/history.json", agent()

    async def turn(i: int) -> None:
        history = ModelMessagesTypeAdapter.validate_json(open(path, "rb").read()) if os.path.exists(path) else []
        result = await support.run(f"{i}: {MESSAGE}", message_history=history)
        with open(path, "wb") as file:
            file.write(result.all_messages_json())

    return await turns_of(turn, turns, path)


async def tether_history(turns: int, folder: str) -> dict[str, float]:
    path, support = f"{folder}/tether-history.db", agent()
    history = TetherHistory("chat", f"sqlite:///{path}")

    async def turn(i: int) -> None:
        result = await support.run(f"{i}: {MESSAGE}", message_history=history.messages())
        history.add(result.new_messages())

    try:
        return await turns_of(turn, turns, path)
    finally:
        history.close()


async def durable_run(turns: int, folder: str) -> dict[str, float]:
    path, support = f"{folder}/tether-run.db", agent()
    app = tether.App(f"sqlite:///{path}")

    @app.task
    async def turn(ctx: tether.AsyncTaskContext, text: str) -> str:
        return (await run(ctx, support, text)).output

    try:
        return await turns_of(
            lambda i: app.run_async(turn, f"{i}: {MESSAGE}", task_id=f"turn-{i}", session_id="chat"), turns, path
        )
    finally:
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--smoke", action="store_true", help="the shortest run, for the test suite: its figures mean nothing"
    )
    args = parser.parse_args()
    turns = 5 if args.smoke else 50 if args.quick else 200
    folder = tempfile.mkdtemp(prefix="tether-bench-pydantic-ai-")
    rows = {
        "JSON history (file)": asyncio.run(json_history(turns, folder)),
        "TetherHistory (SQLite)": asyncio.run(tether_history(turns, folder)),
        "durable run() (SQLite)": asyncio.run(durable_run(turns, folder)),
    }
    native, history, durable = rows.values()
    result: dict[str, Any] = {
        "turns": turns,
        "rows": rows,
        "history_bytes_vs_json": history["bytes_per_turn"] / native["bytes_per_turn"],
        "history_time_vs_json": history["ms_per_turn"] / native["ms_per_turn"],
        "durable_bytes_vs_json": durable["bytes_per_turn"] / native["bytes_per_turn"],
        "durable_time_vs_json": durable["ms_per_turn"] / native["ms_per_turn"],
        "target": {"history_bytes_vs_json": 1.2, "durable_time_vs_json": 1.3, "durable_bytes_vs_json": 2.0},
    }
    result["pass"] = (
        result["history_bytes_vs_json"] <= 1.2
        and result["durable_time_vs_json"] <= 1.3
        and result["durable_bytes_vs_json"] <= 2.0
    )
    print(f"{'history':<26}{'ms/turn':>10}{'bytes/turn':>12}")
    for name, row in rows.items():
        print(f"{name:<26}{row['ms_per_turn']:>10.2f}{row['bytes_per_turn']:>12.0f}")
    print(f"TetherHistory bytes / JSON history (target <= 1.2): {result['history_bytes_vs_json']:.2f}")
    print(f"durable run() time / JSON history (target <= 1.3): {result['durable_time_vs_json']:.2f}")
    print(f"durable run() bytes / JSON history (target <= 2.0): {result['durable_bytes_vs_json']:.2f}")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
