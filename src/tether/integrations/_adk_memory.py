"""ADK's memory service on tether (``tether.integrations.adk.TetherMemoryService``): keyword search
over the events of the sessions added to it, kept in tether sessions."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from google.adk.events.event import Event as AdkEvent
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from tether.errors import ConfigurationError
from tether.integrations._targets import one_target, open_target
from tether.log.conflicts import retry_on_conflict

if TYPE_CHECKING:
    from tether.conversation import Message
    from tether.runtime.app import App

__all__ = ["TetherMemoryService"]


def _is_latin(c: str) -> bool:
    return (c.isalnum() or c == "_") if c.isascii() else unicodedata.name(c, "").startswith("LATIN")


def _words(text: str) -> set[str]:
    """The words a text is matched on, lowercase, as ADK's in-memory memory service takes them: its
    ``\\w+`` runs in Unicode's composed form, and each run of one script inside a word that mixes
    Latin with another (Japanese and Chinese have no spaces: 私はPythonを使う holds the word Python)."""
    words = {w.lower() for w in re.findall(r"\w+", unicodedata.normalize("NFC", text))}
    for word in [w for w in words if not w.isascii()]:
        words.update("".join(run) for _, run in itertools.groupby(word, _is_latin))
    return words


def _shared(query: set[str], text: str) -> int:
    """How many query words a text holds: as a word, or (a non-ASCII query word, which may be a part
    of an unspaced sentence) anywhere in it."""
    words, lowered = _words(text), unicodedata.normalize("NFC", text).lower()
    return sum(1 for q in query if q in words or (not q.isascii() and q in lowered))


class TetherMemoryService(BaseMemoryService):
    """ADK's memory service on tether: keyword search over the events of the sessions added to it.

    A user's memory (per app) is one tether session, ``adk-memory:{app}:{user}``: each remembered
    event is a message holding its text and the ADK content verbatim. ``add_session_to_memory``
    and ``add_events_to_memory`` add the events not remembered yet (a session may be added again as
    it grows), atomically; ``delete_memory`` forgets one (and it is not remembered again);
    ``search_memory`` returns up to ``limit`` memories sharing the most words with the query, words
    matched as ADK's in-memory memory service matches them. Keyword matching, not semantic search:
    it reads the user's whole memory at each search.

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

    def __init__(
        self,
        target: str | App | None = None,
        *,
        uri: str | None = None,
        tenant: str | None = None,
        limit: int = 10,
        agents_dir: str | None = None,
    ) -> None:
        """``target``: a store URL (also with ``tether+`` before its scheme, as ADK's registry names
        it) or a :class:`~tether.App`, as :class:`~tether.integrations.adk.TetherSessionService` takes
        it; ``uri`` the same by keyword (ADK's ``services.yaml``); ``limit``: memories a search returns."""
        del agents_dir  # ADK's CLI passes its folder to every service; the URL says where the store is
        if type(limit) is not int or limit < 1:
            raise ConfigurationError(f"limit must be an int >= 1, got {limit!r}")
        self._target = open_target(one_target(target, uri, "TetherMemoryService"), "TetherMemoryService", tenant=tenant)
        self._app = self._target.app
        self._limit = limit

    def close(self) -> None:
        """Close the app this service opened from a URL (an app passed in stays open: it is yours)."""
        self._target.close()

    def _memory(self, app_name: str, user_id: str) -> Any:
        return self._app.session(f"adk-memory:{quote(app_name, safe='')}:{quote(user_id, safe='')}", user_id=user_id)

    async def add_session_to_memory(self, session: AdkSession) -> None:
        self._add(session.app_name, session.user_id, session.events, session.id)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[AdkEvent],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Remember these events (those with text, not remembered yet), as of ``session_id`` if given.
        ``custom_metadata`` is not used (ADK's in-memory service does not use it either)."""
        self._add(app_name, user_id, events, session_id)

    def _add(self, app_name: str, user_id: str, events: Iterable[AdkEvent], session_id: str | None) -> None:
        memory = self._memory(app_name, user_id)

        def add() -> None:  # what it holds, then the new events, appended only if nobody appended meanwhile
            version = memory.version  # read before what it holds: a later append makes the append refused
            held = memory.messages()
            known = {m.meta.get("adk_memory", {}).get("event_id") for m in held} | _deleted(held)
            new = _unknown(events, session_id, known)
            if new:  # refused if another writer added memories meanwhile (perhaps these): then looked at again
                memory.add_many(new, expected_version=version)

        retry_on_conflict(add, stream=memory.id, tries=100)

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Forget the memory ``memory_id`` (a ``MemoryEntry.id``, the event's id): searches no longer
        find it, and adding its session again does not remember it again. Nothing if it is not held."""
        if not memory_id:
            return
        memory = self._memory(app_name, user_id)

        def forget() -> None:
            version = memory.version
            held = memory.messages()
            if memory_id in _deleted(held) or all(
                m.meta.get("adk_memory", {}).get("event_id") != memory_id for m in held
            ):
                return
            memory.add_many(
                [{"role": "system", "content": "", "adk_memory_deleted": memory_id}], expected_version=version
            )

        retry_on_conflict(forget, stream=memory.id, tries=100)

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        wanted = _words(query)
        held = self._memory(app_name, user_id).messages()
        deleted = _deleted(held)
        scored = []
        for m in held:
            stored = m.meta.get("adk_memory")
            if stored is None or stored["event_id"] in deleted:
                continue
            shared = _shared(wanted, m.content)
            if shared:
                scored.append((shared, stored["timestamp"], stored))
        scored.sort(key=lambda s: (-s[0], -s[1]))
        return SearchMemoryResponse(
            memories=[
                MemoryEntry(
                    id=stored["event_id"],
                    content=types.Content.model_validate(stored["content"]),
                    author=stored["author"],
                    timestamp=datetime.fromtimestamp(stored["timestamp"], tz=UTC).isoformat(),
                    custom_metadata={"session_id": stored["session_id"]} if stored["session_id"] else {},
                )
                for _, _, stored in scored[: self._limit]
            ]
        )


def _deleted(held: Iterable[Message]) -> set[str]:
    """The ids of the memories ``delete_memory`` forgot."""
    return {m.meta["adk_memory_deleted"] for m in held if "adk_memory_deleted" in m.meta}


def _unknown(events: Iterable[AdkEvent], session_id: str | None, known: set[Any]) -> list[dict[str, Any]]:
    """The events with text that memory does not hold yet, as the messages that hold them."""
    new = []
    for event in events:
        parts = event.content.parts or [] if event.content is not None else []
        text = " ".join(p.text for p in parts if p.text and not p.thought)
        if not text.strip() or event.id in known:
            continue
        known.add(event.id)
        assert event.content is not None
        new.append(
            {
                "role": "user" if event.author == "user" else "assistant",
                "content": text,
                "adk_memory": {
                    "event_id": event.id,
                    "session_id": session_id,
                    "author": event.author,
                    "timestamp": event.timestamp,
                    "content": event.content.model_dump(mode="json", exclude_none=True),
                },
            }
        )
    return new
