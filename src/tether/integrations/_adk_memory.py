"""ADK's memory service on tether (``tether.integrations.adk.TetherMemoryService``): keyword search
over the events of the sessions added to it, kept in tether sessions."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from tether.errors import ConflictError

if TYPE_CHECKING:
    from tether.runtime.app import App

__all__ = ["TetherMemoryService"]


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"\w+", text)}


class TetherMemoryService(BaseMemoryService):
    """ADK's memory service on tether: keyword search over the events of the sessions added to it.

    A user's memory (per app) is one tether session, ``adk-memory:{app}:{user}``: each remembered
    event is a message holding its text and the ADK content verbatim. ``add_session_to_memory``
    adds the events not remembered yet (a session may be added again as it grows), atomically;
    ``search_memory`` returns up to ``limit`` memories sharing the most words with the query.
    Keyword matching, not semantic search: it reads the user's whole memory at each search.

    Example:
        >>> import asyncio, tether
        >>> from tether.integrations.adk import TetherSessionService
        >>> from google.adk.events import Event
        >>> from google.genai import types
        >>> app = tether.App("memory://")
        >>> sessions, memory = TetherSessionService(app), TetherMemoryService(app)
        >>> async def demo():
        ...     s = await sessions.create_session(app_name="shop", user_id="ada")
        ...     said = types.Content(role="user", parts=[types.Part(text="My seat is 12A")])
        ...     await sessions.append_event(s, Event(author="user", content=said))
        ...     await memory.add_session_to_memory(s)
        ...     found = await memory.search_memory(app_name="shop", user_id="ada", query="which seat?")
        ...     return [m.content.parts[0].text for m in found.memories]
        >>> asyncio.run(demo())
        ['My seat is 12A']
    """

    def __init__(self, app: App, *, limit: int = 10) -> None:
        self._app = app
        self._limit = limit

    def _memory(self, app_name: str, user_id: str) -> Any:
        return self._app.session(f"adk-memory:{quote(app_name, safe='')}:{quote(user_id, safe='')}", user_id=user_id)

    async def add_session_to_memory(self, session: AdkSession) -> None:
        memory = self._memory(session.app_name, session.user_id)
        for _ in range(100):  # what it holds, then the new events, appended only if nobody appended meanwhile
            version = memory.version  # read before what it holds: a later append makes the append refused
            new = _unknown(session, {m.meta.get("adk_memory", {}).get("event_id") for m in memory.messages()})
            if not new:
                return
            try:
                memory.add_many(new, expected_version=version)
            except ConflictError:
                continue  # another writer added memories meanwhile (perhaps these): look again
            return
        raise ConflictError(memory.id, expected=memory.version, actual=None)

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        wanted = _words(query)
        scored = []
        for m in self._memory(app_name, user_id).messages():
            stored = m.meta.get("adk_memory")
            shared = len(wanted & _words(m.content))
            if stored is not None and shared:
                scored.append((shared, stored["timestamp"], stored))
        scored.sort(key=lambda s: (-s[0], -s[1]))
        return SearchMemoryResponse(
            memories=[
                MemoryEntry(
                    id=stored["event_id"],
                    content=types.Content.model_validate(stored["content"]),
                    author=stored["author"],
                    timestamp=datetime.fromtimestamp(stored["timestamp"], tz=UTC).isoformat(),
                    custom_metadata={"session_id": stored["session_id"]},
                )
                for _, _, stored in scored[: self._limit]
            ]
        )


def _unknown(session: AdkSession, known: set[Any]) -> list[dict[str, Any]]:
    """The session's events with text that memory does not hold yet, as the messages that hold them."""
    new = []
    for event in session.events:
        parts = event.content.parts or [] if event.content is not None else []
        text = " ".join(p.text for p in parts if p.text and not p.thought)
        if not text.strip() or event.id in known:
            continue
        assert event.content is not None
        new.append(
            {
                "role": "user" if event.author == "user" else "assistant",
                "content": text,
                "adk_memory": {
                    "event_id": event.id,
                    "session_id": session.id,
                    "author": event.author,
                    "timestamp": event.timestamp,
                    "content": event.content.model_dump(mode="json", exclude_none=True),
                },
            }
        )
    return new
