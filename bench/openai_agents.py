"""OpenAI Agents SDK benchmark: ``TetherSession`` and the durable ``run()`` beside the SDK's ``SQLiteSession``.

Run: ``python bench/openai_agents.py`` (200 turns; ``--quick``: 50; ``--smoke``: 3, for the test suite).
Prints a table, the ratios the targets name, then one line of JSON.

Each turn is a realistic agent turn on the SDK's offline ``ScriptedModel``: the user's message, the
model calling three tools at once, the three tools' results, the model's answer; every payload
~500 bytes. The same turns are run, in one process, on

- ``SQLiteSession`` (the SDK's own persistence: ``Runner.run(agent, text, session=...)``),
- ``TetherSession`` on tether's SQLite (the same call, the session swapped),
- the durable ``run()``: each turn a tether task on that database (``app.run(turn, text,
  session_id=...)``, its conversation ``TetherSession.in_task(ctx)``), every model response and
  tool result a recorded call.

``bytes_per_turn``: the database's size after the turns (its write-ahead log checkpointed), less its
size after the first turn, over the turns after the first; ``ms_per_turn``: wall time per turn.
Targets: TetherSession's bytes ≤ 1.0× SQLiteSession's; the durable run's time ≤ 1.3× and bytes ≤ 2×.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from _common import MESSAGE, per_turn, report_against, turns_from_args
from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import tether
from tether.integrations.openai_agents import TetherSession, run

set_tracing_disabled(True)
TOOLS = ("orders", "parcels", "refunds")


def model(turns: int) -> ScriptedModel:
    """Per turn: three parallel tool calls, then the answer once their results are in."""

    def answer(call: Any) -> Any:
        last = call.input[-1] if isinstance(call.input, list) else {}
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            return [assistant_message(MESSAGE)]
        n = len(call.input) if isinstance(call.input, list) else 0
        return [function_call(tool, {"query": MESSAGE[:200]}, call_id=f"c{n}-{tool}") for tool in TOOLS]

    return ScriptedModel([ModelStep.respond(answer) for _ in range(2 * turns + 2)])


def agent(turns: int) -> Agent[Any]:
    def make(name: str) -> Any:
        def tool(query: str) -> str:
            return MESSAGE

        tool.__name__ = name
        tool.__doc__ = f"Look {name} up."
        return function_tool(tool)

    return Agent(name="Support", model=model(turns), tools=[make(t) for t in TOOLS])


async def sdk_session(turns: int, folder: str) -> dict[str, float]:
    path = f"{folder}/sdk.db"
    session, support = SQLiteSession("chat", path), agent(turns)
    try:
        return await per_turn(lambda i: Runner.run(support, f"{i}: {MESSAGE}", session=session), turns, path)
    finally:
        session.close()


async def tether_session(turns: int, folder: str) -> dict[str, float]:
    path = f"{folder}/tether-session.db"
    session, support = TetherSession("chat", f"sqlite:///{path}"), agent(turns)
    try:
        return await per_turn(lambda i: Runner.run(support, f"{i}: {MESSAGE}", session=session), turns, path)
    finally:
        session.close()


async def durable_run(turns: int, folder: str) -> dict[str, float]:
    path = f"{folder}/tether-run.db"
    app, support = tether.App(f"sqlite:///{path}"), agent(turns)

    @app.task
    async def turn(ctx: tether.AsyncTaskContext, text: str) -> str:
        result = await run(ctx, support, text, session=TetherSession.in_task(ctx))
        return str(result.final_output)

    try:
        return await per_turn(
            lambda i: app.run_async(turn, f"{i}: {MESSAGE}", task_id=f"turn-{i}", session_id="chat"), turns, path
        )
    finally:
        app.close()


def main() -> None:
    turns = turns_from_args(__doc__)
    folder = tempfile.mkdtemp(prefix="tether-bench-agents-")
    rows = {
        "SDK SQLiteSession": asyncio.run(sdk_session(turns, folder)),
        "TetherSession (SQLite)": asyncio.run(tether_session(turns, folder)),
        "durable run() (SQLite)": asyncio.run(durable_run(turns, folder)),
    }
    ratios = {
        "session_bytes_vs_sdk": ("TetherSession (SQLite)", "bytes", 1.0),
        "session_time_vs_sdk": ("TetherSession (SQLite)", "ms", None),
        "durable_bytes_vs_sdk": ("durable run() (SQLite)", "bytes", 2.0),
        "durable_time_vs_sdk": ("durable run() (SQLite)", "ms", 1.3),
    }
    report_against(turns, rows, "SDK SQLiteSession", ratios)


if __name__ == "__main__":
    main()
