"""Pydantic AI benchmark: ``TetherHistory`` and the durable ``run()`` beside Pydantic AI's JSON message history.

Run: ``python bench/pydantic_ai_history.py`` (200 turns; ``--quick``: 50; ``--smoke``: 3, for the test suite).
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

import asyncio
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _common import MESSAGE, per_turn, report_against, turns_from_args
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


async def json_history(turns: int, folder: str) -> dict[str, float]:
    path, support = f"{folder}/history.json", agent()

    async def turn(i: int) -> None:
        history = ModelMessagesTypeAdapter.validate_json(open(path, "rb").read()) if os.path.exists(path) else []
        result = await support.run(f"{i}: {MESSAGE}", message_history=history)
        with open(path, "wb") as file:
            file.write(result.all_messages_json())

    return await per_turn(turn, turns, path)


async def tether_history(turns: int, folder: str) -> dict[str, float]:
    path, support = f"{folder}/tether-history.db", agent()
    history = TetherHistory("chat", f"sqlite:///{path}")

    async def turn(i: int) -> None:
        result = await support.run(f"{i}: {MESSAGE}", message_history=history.messages())
        history.add(result.new_messages())

    try:
        return await per_turn(turn, turns, path)
    finally:
        history.close()


async def durable_run(turns: int, folder: str) -> dict[str, float]:
    path, support = f"{folder}/tether-run.db", agent()
    app = tether.App(f"sqlite:///{path}")

    @app.task
    async def turn(ctx: tether.AsyncTaskContext, text: str) -> str:
        return (await run(ctx, support, text)).output

    try:
        return await per_turn(
            lambda i: app.run_async(turn, f"{i}: {MESSAGE}", task_id=f"turn-{i}", session_id="chat"), turns, path
        )
    finally:
        app.close()


def main() -> None:
    turns = turns_from_args(__doc__)
    folder = tempfile.mkdtemp(prefix="tether-bench-pydantic-ai-")
    rows = {
        "JSON history (file)": asyncio.run(json_history(turns, folder)),
        "TetherHistory (SQLite)": asyncio.run(tether_history(turns, folder)),
        "durable run() (SQLite)": asyncio.run(durable_run(turns, folder)),
    }
    ratios = {
        "history_bytes_vs_json": ("TetherHistory (SQLite)", "bytes", 1.2),
        "history_time_vs_json": ("TetherHistory (SQLite)", "ms", None),
        "durable_bytes_vs_json": ("durable run() (SQLite)", "bytes", 2.0),
        "durable_time_vs_json": ("durable run() (SQLite)", "ms", 1.3),
    }
    report_against(turns, rows, "JSON history (file)", ratios)


if __name__ == "__main__":
    main()
