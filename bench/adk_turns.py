"""ADK agent turns benchmark: ``TetherSessionService`` beside ADK's own session services, turn by turn.

Run: ``python bench/adk_turns.py`` (200 turns; ``--quick``: 50; ``--smoke``: 3, for the test suite).
Prints a table, the ratios the targets name, then one line of JSON. (``bench/adk.py`` measures
listing and reading sessions; this one what an agent's turns cost to store.)

Each turn is a realistic agent turn through ADK's ``Runner`` on an offline scripted model: the
user's message, the model calling three tools at once, the three tools' results, the model's
answer; every payload ~500 bytes; each tool sets one state key. The same turns are run, in one
process, on ADK's ``SqliteSessionService``, its ``DatabaseSessionService`` (SQLAlchemy over
``sqlite+aiosqlite``, when ``aiosqlite`` is installed) and tether's ``TetherSessionService`` on
tether's SQLite.

``bytes_per_turn``: the database's size after the turns (its write-ahead log checkpointed), less
its size after the first turn, over the turns after the first; ``ms_per_turn``: wall time per turn.
Targets: tether's bytes ≤ 1.2× ``SqliteSessionService``'s and its time per turn ≤ 1.0×.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import AsyncGenerator, Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from _common import MESSAGE, per_turn, report_against, turns_from_args
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types

try:
    import aiosqlite  # noqa: F401 - DatabaseSessionService's SQLite driver
    from google.adk.sessions.database_session_service import DatabaseSessionService
except ImportError:  # ADK's database service is an extra of its own
    DatabaseSessionService = None  # type: ignore[assignment,misc]

from tether.integrations.adk import TetherSessionService

TOOLS = ("orders", "parcels", "refunds")


class ThreeTools(BaseLlm):
    """Three parallel tool calls, then the answer once their results are in."""

    model: str = "three-tools"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1].parts or [] if llm_request.contents else []
        if any(p.function_response is not None for p in last):
            parts = [types.Part(text=MESSAGE)]
        else:
            parts = [types.Part(function_call=types.FunctionCall(name=t, args={"query": MESSAGE[:200]})) for t in TOOLS]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def tool(name: str) -> Callable[..., Any]:
    def look_up(query: str, tool_context: ToolContext) -> dict[str, str]:
        tool_context.state[f"last_{name}"] = query[:20]
        return {"result": MESSAGE}

    look_up.__name__ = name
    look_up.__doc__ = f"Look {name} up."
    return look_up


async def turns_of(service: BaseSessionService, turns: int, path: str) -> dict[str, float]:
    agent = LlmAgent(name="support", model=ThreeTools(), tools=[tool(t) for t in TOOLS])
    runner = Runner(agent=agent, app_name="shop", session_service=service, auto_create_session=True)

    async def turn(i: int) -> None:
        said = types.Content(role="user", parts=[types.Part(text=f"{i}: {MESSAGE}")])
        async for _ in runner.run_async(user_id="ada", session_id="chat", new_message=said):
            pass

    return await per_turn(turn, turns, path)


async def run(turns: int, folder: str) -> dict[str, dict[str, float]]:
    rows = {
        "ADK SqliteSessionService": await turns_of(SqliteSessionService(f"{folder}/adk.db"), turns, f"{folder}/adk.db")
    }
    if DatabaseSessionService is not None:
        service = DatabaseSessionService(f"sqlite+aiosqlite:///{folder}/db.db")
        rows["ADK DatabaseSessionService"] = await turns_of(service, turns, f"{folder}/db.db")
    ours = TetherSessionService(f"sqlite:///{folder}/tether.db")
    try:
        rows["TetherSessionService (SQLite)"] = await turns_of(ours, turns, f"{folder}/tether.db")
    finally:
        ours.close()
    return rows


def main() -> None:
    turns = turns_from_args(__doc__)
    rows = asyncio.run(run(turns, tempfile.mkdtemp(prefix="tether-bench-adk-turns-")))
    ratios = {
        "bytes_vs_adk_sqlite": ("TetherSessionService (SQLite)", "bytes", 1.2),
        "time_vs_adk_sqlite": ("TetherSessionService (SQLite)", "ms", 1.0),
    }
    report_against(turns, rows, "ADK SqliteSessionService", ratios)


if __name__ == "__main__":
    main()
