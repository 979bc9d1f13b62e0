"""A process appending ADK events to one session through TetherSessionService.

Usage: python _adk_child.py URL SESSION NAME COUNT [GATE]

Appends events ``NAME:0`` .. ``NAME:COUNT-1`` (each with the state delta ``{"last_NAME": i,
"app:total_NAME": i, "temp:scratch": i}``), continuing after the last one already stored (so a
killed run resumes where it stopped), printing ``i`` after each append returns.
With GATE, it waits for that file first and races another process: an append from a session the
other one has moved past raises StaleSessionError, and it reads the session again and retries.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.events import Event, EventActions
from google.genai import types

import tether
from tether.integrations.adk import TetherSessionService

url, session_id, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
gate = Path(sys.argv[5]) if len(sys.argv) > 5 else None
service = TetherSessionService(tether.App(url, lease_ttl=5.0))


def text(event: Event) -> str:
    return event.content.parts[0].text if event.content and event.content.parts else ""


async def main() -> None:
    if gate is not None:
        (gate.parent / f"ready-{name}").touch()
        while not gate.exists():
            time.sleep(0.001)
    stale = 0
    while True:
        session = await service.get_session(app_name="shop", user_id="ada", session_id=session_id)
        assert session is not None
        mine = [text(e) for e in session.events if e.author == name]
        if len(mine) >= count:
            break
        i = len(mine)
        event = Event(
            author=name,
            invocation_id=f"{name}-{i}",
            content=types.Content(role="model", parts=[types.Part(text=f"{name}:{i}")]),
            actions=EventActions(state_delta={f"last_{name}": i, f"app:total_{name}": i, "temp:scratch": i}),
        )
        try:
            await service.append_event(session, event)
        except StaleSessionError:
            stale += 1
            continue
        print(i, flush=True)
    print(f"stale {stale}", flush=True)


asyncio.run(main())
