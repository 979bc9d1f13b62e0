"""An ADK agent run (a resumable ADK App) on TetherSessionService, in a child process that SIGKILLs
itself at a chosen point; run again, it resumes the run it finds unfinished.

Usage: python _adk_run_child.py URL WORKDIR KIND:K

``KIND:K`` is where the process kills itself: ``after_append:K`` just after the K-th event of the
run was stored (append_event returned), ``in_tool_before_effect:1`` / ``in_tool_after_effect:1``
inside the refund tool, around its effect; ``none:0`` runs on. The model looks the order up, then
refunds it, then answers; it logs each turn it answers to WORKDIR/model.log. The tools log each
execution to WORKDIR/tools.log (the refund with its function call id), the refund's effect lands in
WORKDIR/effects/ under its function call id, and each stored event's id is logged to
WORKDIR/appends.log. A process that finds the session's last invocation unfinished resumes it
(``Runner.run_async(invocation_id=...)``, ADK's resumability); one that finds it finished prints
``completed`` and does nothing.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps.app import App as AdkApp
from google.adk.apps.app import ResumabilityConfig
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.session import Session
from google.adk.tools import ToolContext
from google.genai import types

import tether
from tests.integrations._kill_points import KillPoints
from tether.integrations.adk import TetherSessionService

URL, WORK = sys.argv[1], Path(sys.argv[2])

checkpoint = KillPoints(WORK, sys.argv[3])


def log(name: str, line: str) -> None:
    with open(WORK / name, "a") as f:
        f.write(line + "\n")


class ScriptedModel(BaseLlm):
    """Looks the order up, then refunds it, then answers: each turn chosen by the answers so far."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answered = [
            p.function_response.name for c in llm_request.contents for p in c.parts or [] if p.function_response
        ]
        log("model.log", f"turn {len(answered)}")
        if not answered:
            part = types.Part(function_call=types.FunctionCall(name="lookup", args={"order": "A-1"}))
        elif answered == ["lookup"]:
            part = types.Part(function_call=types.FunctionCall(name="refund", args={"order": "A-1", "cents": 4999}))
        else:
            part = types.Part(text="Refunded 4999 for A-1.")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def lookup(order: str) -> dict[str, object]:
    """Looks an order up."""
    log("tools.log", "lookup")
    return {"order": order, "cents": 4999}


def refund(order: str, cents: int, tool_context: ToolContext) -> dict[str, object]:
    """Refunds an order (the side effect: a file named after the call's id)."""
    key = tool_context.function_call_id or "?"
    checkpoint("in_tool_before_effect")
    (WORK / "effects").mkdir(exist_ok=True)
    (WORK / "effects" / key).touch()
    log("tools.log", f"refund {key}")
    checkpoint("in_tool_after_effect")
    tool_context.state["refunded"] = cents
    return {"refunded": cents, "order": order}


class CountedService(TetherSessionService):
    """Logs each stored event's id, then maybe dies (``after_append``)."""

    async def append_event(self, session: Session, event: Event) -> Event:
        stored = await super().append_event(session, event)
        if not event.partial:
            log("appends.log", event.id)
            checkpoint("after_append")
        return stored


def finished(session: Session) -> bool:
    last = session.events[-1].invocation_id
    return any(e.invocation_id == last and e.author == "support" and e.actions.end_of_agent for e in session.events)


async def main() -> None:
    service = CountedService(tether.App(URL))
    agent = LlmAgent(name="support", model=ScriptedModel(), tools=[lookup, refund])
    app = AdkApp(name="shop", root_agent=agent, resumability_config=ResumabilityConfig(is_resumable=True))
    runner = Runner(app=app, session_service=service)
    session = await service.get_session(app_name="shop", user_id="ada", session_id="s1")
    if session is None or not session.events:
        if session is None:
            await service.create_session(app_name="shop", user_id="ada", session_id="s1")
        question = types.Content(role="user", parts=[types.Part(text="Refund A-1")])
        run = runner.run_async(user_id="ada", session_id="s1", new_message=question)
    elif not finished(session):
        run = runner.run_async(user_id="ada", session_id="s1", invocation_id=session.events[-1].invocation_id)
    else:
        print("completed")
        return
    async for _ in run:
        pass
    print("completed")


asyncio.run(main())
