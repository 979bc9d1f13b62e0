"""Google ADK on tether: a session service and a memory service. ``pip install 'tether[adk]'``

:class:`TetherSessionService` implements ADK's ``BaseSessionService`` on tether's store. An ADK
session is a tether session (``app.session(...)`` reads it as a conversation): its first message
holds the ADK session's identity and initial state, and each ADK event is one message — the user's
text, the model's text and function calls, the function responses — carrying the ADK event
verbatim. State follows ADK's scopes: ``app:`` keys live in one tether document per app, ``user:``
keys in one per (app, user), ``temp:`` keys are never stored, and the rest belong to the session.

- ``append_event`` is one optimistic append at the version the session object was read at: an
  append from a session object another writer has since moved past raises ADK's
  ``StaleSessionError`` and writes nothing.
- ``get_session`` reads the recent events it returns (``GetSessionConfig(num_recent_events,
  after_timestamp)``) with ranged reads, and the session's state from a snapshot plus the events
  after it: its cost does not grow with the session's history.
- ``list_sessions`` returns each session with its merged state and no events, as ADK's own
  services do: one read of the index, and each session's own state from this service's cache
  unless the session moved since the service last saw it (then the records after it are read).

Example:
    >>> import asyncio, tether
    >>> from google.adk.events import Event
    >>> from google.genai import types
    >>> app = tether.App("memory://")
    >>> service = TetherSessionService(app)
    >>> async def demo():
    ...     s = await service.create_session(app_name="shop", user_id="ada", state={"cart": []})
    ...     hello = types.Content(role="user", parts=[types.Part(text="Hi")])
    ...     await service.append_event(s, Event(author="user", content=hello))
    ...     again = await service.get_session(app_name="shop", user_id="ada", session_id=s.id)
    ...     return [e.content.parts[0].text for e in again.events], again.state
    >>> asyncio.run(demo())
    (['Hi'], {'cart': []})
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import orjson
from pydantic import BaseModel

try:
    from google.adk.errors._stale_session_error import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event as AdkEvent
    from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
    from google.adk.memory.memory_entry import MemoryEntry
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session as AdkSession
    from google.adk.sessions.state import State
    from google.genai import types
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("tether.integrations.adk needs Google ADK: pip install 'tether[adk]'") from exc

from tether._conflicts import retry_on_conflict
from tether._streams import Stream, append_together
from tether.conversation import SESSION_TYPE, MessageAdded, stream_id, to_event
from tether.errors import ConflictError, TaskNotFoundError
from tether.integrations._gc import no_cycle_collection
from tether.log import checksum
from tether.store import SnapshotRow, StreamAppend, TaskFilter, TaskRow
from tether.userstate import USER_TYPE

if TYPE_CHECKING:
    from tether.events import Recorded
    from tether.runtime.app import App
    from tether.userstate import UserState

__all__ = ["TetherMemoryService", "TetherSessionService"]

_PREFIX = "adk:"  # tether session ids of ADK sessions: adk:{app}:{user}:{session}, each part quoted
_SNAPSHOT_SCHEMA = 1001  # the session-state snapshots' schema (tether's own session views use others)
_SNAPSHOT_EVERY = 64  # events folded on a read before it caches the state again
_LIST_LIMIT = 10_000_000
_SHARED_TRIES = 20  # an append whose app:/user: document another writer keeps changing: tries before giving up
_STATES_CACHED = 200_000  # sessions whose own state a service keeps decoded-on-demand for list_sessions


def _session_key(app_name: str, user_id: str, session_id: str) -> str:
    return _PREFIX + ":".join(quote(part, safe="") for part in (app_name, user_id, session_id))


def _app_prefix(app_name: str) -> str:
    return stream_id(_PREFIX + quote(app_name, safe="") + ":")


def _owner_and_id(rest: str) -> tuple[str, str]:
    """``{user}:{session}`` (each part quoted) of a session key after its app: the two parts."""
    owner, session_id = rest.split(":")
    return (unquote(owner) if "%" in owner else owner), (unquote(session_id) if "%" in session_id else session_id)


_LISTED_FIELDS = frozenset({"id", "app_name", "user_id", "state", "events", "last_update_time"})
# The slots pydantic keeps beside a model's __dict__, set through their descriptors: a quarter faster
# than object.__setattr__ by name, which listing 10,000 sessions does 40,000 times.
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__


def _listed_session(session_id: str, app_name: str, user_id: str, state: dict[str, Any], at: float) -> AdkSession:
    """An ADK ``Session`` from values of the right types: what ``model_construct`` builds (no
    validation, every field set), in a fraction of its time. Validating each of 10,000 listed
    sessions again was most of ``list_sessions``' cost; a test checks the result equals a validated one."""
    session: AdkSession = object.__new__(AdkSession)
    fields: dict[str, Any] = {"id": session_id, "app_name": app_name, "user_id": user_id, "state": state}
    fields["events"], fields["last_update_time"] = [], at
    object.__setattr__(session, "__dict__", fields)
    _SET_FIELDS_SET(session, set(_LISTED_FIELDS))
    _SET_EXTRA(session, None)
    _SET_PRIVATE(session, {"_storage_update_marker": None})
    return session


def _message(event: AdkEvent) -> dict[str, Any]:
    """An ADK event as a tether message: who said what, which functions were called and answered,
    and the event itself, verbatim (``adk``)."""
    stored = event.model_dump(mode="json", exclude_none=True)
    parts = event.content.parts or [] if event.content is not None else []
    text = "".join(p.text for p in parts if p.text and not p.thought)
    calls = [p.function_call for p in parts if p.function_call is not None]
    answers = [p.function_response for p in parts if p.function_response is not None]
    if answers:
        first = answers[0].id or f"{event.id}:0"
        content = orjson.dumps([{"name": a.name, "response": a.response} for a in answers], default=str).decode()
        return {"role": "tool", "content": content, "tool_call_id": first, "adk": stored}
    if event.author == "user":
        return {"role": "user", "content": text, "adk": stored}
    message: dict[str, Any] = {"role": "assistant", "content": text, "adk": stored}
    if calls:
        message["tool_calls"] = [
            {"id": c.id or f"{event.id}:{i}", "name": c.name or "", "arguments": c.args or {}}
            for i, c in enumerate(calls)
        ]
    return message


def _scoped(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A state delta split into its app, user and session parts (``temp:`` dropped)."""
    app_part, user_part, session_part = {}, {}, {}
    for key, value in delta.items():
        if key.startswith(State.APP_PREFIX):
            app_part[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user_part[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session_part[key] = value
    return app_part, user_part, session_part


def _fold_state(records: Iterable[Recorded], state: dict[str, Any]) -> dict[str, Any]:
    """The session-scoped state after these records (the first message's initial state, then the
    events' deltas)."""
    for rec in records:
        event = rec.event
        if not isinstance(event, MessageAdded) or not event.meta:
            continue
        if "adk_session" in event.meta:
            state.update(event.meta["adk_session"].get("state") or {})
        elif "adk" in event.meta:
            delta = (event.meta["adk"].get("actions") or {}).get("state_delta") or {}
            state.update(_scoped(delta)[2])
    return state


class TetherSessionService(BaseSessionService):
    """ADK's session service on tether: ``Runner(agent=..., app_name=..., session_service=TetherSessionService(app))``.

    Sessions, events and state are stored in the app's database (SQLite, PostgreSQL, memory), so
    any process — and tether's own API, ``app.session("adk:{app}:{user}:{session}")`` — reads them.

    Example:
        >>> import asyncio, tether
        >>> service = TetherSessionService(tether.App("memory://"))
        >>> s = asyncio.run(service.create_session(app_name="shop", user_id="ada", session_id="s1"))
        >>> [x.id for x in asyncio.run(service.list_sessions(app_name="shop")).sessions]
        ['s1']
    """

    def __init__(self, app: App) -> None:
        self._app = app
        self._log = app.log
        self._documents: dict[str, UserState] = {}
        self._states: dict[str, tuple[float, int, bytes]] = {}  # stream -> (created_at, version, state)

    # ------------------------------------------------------------------ shared state
    def _document(self, doc_id: str) -> UserState:
        doc = self._documents.get(doc_id)
        if doc is None:
            doc = self._documents[doc_id] = self._app.user(doc_id)  # read incrementally from then on
        return doc

    def _app_state(self, app_name: str) -> UserState:
        return self._document(f"adk-app:{quote(app_name, safe='')}")

    def _user_state(self, app_name: str, user_id: str) -> UserState:
        return self._document(f"adk-user:{quote(app_name, safe='')}:{quote(user_id, safe='')}")

    def _merge(self, app_name: str, user_id: str, session_state: dict[str, Any]) -> dict[str, Any]:
        merged = dict(session_state)
        merged.update({State.APP_PREFIX + k: v for k, v in self._app_state(app_name).get().items()})
        merged.update({State.USER_PREFIX + k: v for k, v in self._user_state(app_name, user_id).get().items()})
        return merged

    def _shared_changes(
        self, app_name: str, user_id: str, app_delta: dict[str, Any], user_delta: dict[str, Any]
    ) -> list[StreamAppend]:
        """What the deltas change in the app's and the user's documents, as parts of one append."""
        changes = []
        if app_delta:
            changes.append(self._app_state(app_name).change(lambda doc: {**doc, **app_delta}))
        if user_delta:
            changes.append(self._user_state(app_name, user_id).change(lambda doc: {**doc, **user_delta}))
        return [c for c in changes if c is not None]

    def _share(self, app_name: str, user_id: str, app_delta: dict[str, Any], user_delta: dict[str, Any]) -> None:
        """A new session's shared keys: both documents' changes in one transaction, retried on a conflict."""

        def write() -> None:
            changes = self._shared_changes(app_name, user_id, app_delta, user_delta)
            if changes:
                append_together(self._log, changes)

        retry_on_conflict(write, stream=f"user:adk-app:{quote(app_name, safe='')}", tries=_SHARED_TRIES)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        state: dict[str, Any] = self._user_state(app_name, user_id).get()
        return state

    # ------------------------------------------------------------------ sessions
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        session_id = (session_id or "").strip() or uuid.uuid4().hex
        key = _session_key(app_name, user_id, session_id)
        app_delta, user_delta, session_state = _scoped(state or {})
        now = time.time()
        first = to_event(
            {
                "role": "system",
                "content": f"ADK session {session_id!r} of app {app_name!r} for user {user_id!r}",
                "adk_session": {"app_name": app_name, "user_id": user_id, "id": session_id, "state": session_state},
            }
        )
        if not Stream(self._log, stream_id(key), SESSION_TYPE).create(first, user_id=user_id, session_id=key):
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        self._share(app_name, user_id, app_delta, user_delta)
        session = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=self._merge(app_name, user_id, session_state),
            last_update_time=now,
        )
        session._storage_update_marker = "1"
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        key = _session_key(app_name, user_id, session_id)
        stream = Stream(self._log, stream_id(key), SESSION_TYPE)
        row = self._log.store.get_task(self._log.tenant, stream.id)
        if row is None:
            return None
        version = row.version
        events = self._recent_events(stream, version, config or GetSessionConfig())
        session = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=self._merge(app_name, user_id, self._session_state(stream, version, row.created_at)),
            events=events,
            last_update_time=row.updated_at,
        )
        session._storage_update_marker = str(version)
        return session

    def _recent_events(self, stream: Stream, version: int, config: GetSessionConfig) -> list[AdkEvent]:
        """The events ``config`` asks for, read by range: the newest ``num_recent_events`` (each
        event is one record, so they are the last records), those from ``after_timestamp`` on
        (found by bisecting the records' times)."""
        if config.num_recent_events == 0:
            return []
        start = 1  # the first record is the session's own; events follow it
        if config.num_recent_events is not None:
            start = max(start, version - config.num_recent_events)
        if config.after_timestamp is not None:
            start = max(start, self._first_at_or_after(stream, version, config.after_timestamp) - 1)
        records = stream.read(after=start, upto=version)
        found = [
            AdkEvent.model_validate(rec.event.meta["adk"])
            for rec in records
            if isinstance(rec.event, MessageAdded) and rec.event.meta and "adk" in rec.event.meta
        ]
        if config.after_timestamp is not None:
            found = [e for e in found if e.timestamp >= config.after_timestamp]
        if config.num_recent_events is not None:
            found = found[-config.num_recent_events :]
        return found

    def _first_at_or_after(self, stream: Stream, version: int, moment: float) -> int:
        """The first seq whose record was stamped at or after ``moment`` (records are stamped with
        their event's timestamp, in order): O(log n) single-record reads."""
        low, high = 2, version + 1
        while low < high:
            middle = (low + high) // 2
            (rec,) = stream.read(after=middle - 1, upto=middle)
            if rec.at >= moment:
                high = middle
            else:
                low = middle + 1
        return low

    def _session_state(self, stream: Stream, version: int, created_at: float) -> dict[str, Any]:
        """The session-scoped state at ``version``: the newest snapshot, plus the events after it
        (remembered for ``list_sessions``)."""
        store, tenant = self._log.store, self._log.tenant
        snap = store.get_snapshot(tenant, stream.id, at_most=version)
        state: dict[str, Any] = {}
        after = 0
        if snap is not None and snap.schema == _SNAPSHOT_SCHEMA and checksum(snap.data) == snap.checksum:
            state, after = orjson.loads(snap.data), snap.seq
        records = stream.read(after=after, upto=version)
        state = _fold_state(records, state)
        if len(records) >= _SNAPSHOT_EVERY:
            self._snapshot(stream.id, version, state)
        self._remember(stream.id, created_at, version, state)
        return state

    def _snapshot(self, stream: str, version: int, state: dict[str, Any]) -> None:
        data = orjson.dumps(state).decode()
        self._log.store.put_snapshot(
            self._log.tenant, stream, SnapshotRow(version, _SNAPSHOT_SCHEMA, checksum(data), data)
        )

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The app's sessions (one user's, with ``user_id``), oldest update first, each with its state
        (app, user and session scopes merged) and without events, as ADK's own services return them.

        One read of tether's index gives every session's version; a session's own state comes from
        this service's cache when the session has not moved since it was last seen (read, written or
        listed here) and is otherwise brought up to date from the records after the cached version
        (a session never seen: its snapshot and the records after it). The app's and each user's
        shared state are read once per listing, not once per session.
        """
        rows = self._log.store.list_tasks(
            self._log.tenant, TaskFilter(type=SESSION_TYPE, user_id=user_id), limit=_LIST_LIMIT
        )
        prefix = _app_prefix(app_name)
        cut = len(prefix)
        app_shared = {State.APP_PREFIX + k: v for k, v in self._app_state(app_name).get().items()}
        user_shared: dict[str, dict[str, Any]] = {}
        states = self._states
        listed: list[tuple[float, str, str, dict[str, Any]]] = []
        with no_cycle_collection():  # thousands of sessions built and kept: no collection walks them midway
            for row in rows:
                task_id = row.task_id
                if not task_id.startswith(prefix):
                    continue
                owner, session_id = _owner_and_id(task_id[cut:])
                shared = user_shared.get(owner)
                if shared is None:
                    shared = user_shared[owner] = {**app_shared, **self._shared_user_state(app_name, owner)}
                cached = states.get(task_id)
                if cached is not None and cached[0] == row.created_at and cached[1] == row.version:
                    state = orjson.loads(cached[2])  # the common case, inline: unchanged since last seen
                else:
                    state = self._state_of(row)
                state.update(shared)  # each state is decoded afresh: the caller's to change
                listed.append((row.updated_at, owner, session_id, state))
            # Oldest update first, then by user and id (unique within an app: the states are never compared).
            listed.sort()
            sessions = [_listed_session(sid, app_name, owner, state, at) for at, owner, sid, state in listed]
        return ListSessionsResponse(sessions=sessions)

    def _shared_user_state(self, app_name: str, user_id: str) -> dict[str, Any]:
        """The ``user:`` keys of one user, read without creating the user's document if it has none."""
        doc_id = f"adk-user:{quote(app_name, safe='')}:{quote(user_id, safe='')}"
        if doc_id not in self._documents and not Stream(self._log, f"user:{doc_id}", USER_TYPE).exists():
            return {}
        return {State.USER_PREFIX + k: v for k, v in self._document(doc_id).get().items()}

    def _state_of(self, row: TaskRow) -> dict[str, Any]:
        """The session-scoped state of the session at ``row`` (cached; refreshed if it moved)."""
        cached = self._states.get(row.task_id)
        if cached is not None and cached[0] == row.created_at:
            if cached[1] == row.version:
                return {} if cached[2] == b"{}" else orjson.loads(cached[2])
            if cached[1] < row.version:
                stream = Stream(self._log, row.task_id, SESSION_TYPE)
                state = _fold_state(stream.read(after=cached[1], upto=row.version), orjson.loads(cached[2]))
                self._remember(row.task_id, row.created_at, row.version, state)
                return state
        # Never seen here: the newest snapshot and the records after it, in one read where it is ours.
        try:
            snap, rows = self._log.store.read_latest(self._log.tenant, row.task_id)
        except TaskNotFoundError:
            return {}  # deleted since the index was read
        if snap is None or (
            snap.schema == _SNAPSHOT_SCHEMA and snap.seq <= row.version and checksum(snap.data) == snap.checksum
        ):
            records = [self._log.decode(r) for r in rows if r.seq <= row.version]
            state = _fold_state(records, orjson.loads(snap.data) if snap is not None else {})
            self._remember(row.task_id, row.created_at, row.version, state)
            return state
        return self._session_state(Stream(self._log, row.task_id, SESSION_TYPE), row.version, row.created_at)

    def _remember(self, stream: str, created_at: float, version: int, state: dict[str, Any]) -> None:
        """Cache a session's own state at ``version``, encoded (each reader decodes its own copy, so
        no caller's change to a returned state reaches the cache); ``created_at`` tells a session
        deleted and made again under the same id from the one cached."""
        states = self._states
        states.pop(stream, None)
        states[stream] = (created_at, version, orjson.dumps(state))
        if len(states) > _STATES_CACHED:
            del states[next(iter(states))]  # the least recently stored

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        key = _session_key(app_name, user_id, session_id)
        self._states.pop(stream_id(key), None)
        try:
            self._app.delete_session(key)
        except TaskNotFoundError:
            return

    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        """Store ``event`` (unless partial) and apply it to ``session``. ``StaleSessionError`` when the
        stored session has moved past the version ``session`` was read at; nothing is written then."""
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        key = _session_key(session.app_name, session.user_id, session.id)
        stream = Stream(self._log, stream_id(key), SESSION_TYPE)
        marker = session._storage_update_marker
        stale = StaleSessionError(
            f"session {session.id!r} was read at version {marker} and has been appended to since; "
            "get it again (get_session) and retry"
        )
        try:
            current = stream.version()
        except TaskNotFoundError:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        expected = int(marker) if marker is not None else current
        if expected != current:
            raise stale  # before anything is written
        delta = event.actions.state_delta if event.actions else {}
        app_delta, user_delta, session_delta = _scoped(delta or {})
        message = stream.part([to_event(_message(event))], expected, at=event.timestamp)

        def write() -> int:
            """The event and the app:/user: documents' changes in one transaction: all or nothing. A
            document another writer changed first is read again and the delta applied again."""
            parts = [*self._shared_changes(session.app_name, session.user_id, app_delta, user_delta), message]
            try:
                return append_together(self._log, parts)[-1]
            except ConflictError as conflict:
                if conflict.task_id == stream.id:
                    raise stale from None  # another writer got in between the check and the append
                raise

        version = retry_on_conflict(write, stream=stream.id, tries=_SHARED_TRIES)
        session._storage_update_marker = str(version)
        session.last_update_time = event.timestamp
        committed = self._commit_event_to_session(session, event)
        cached = self._states.get(stream.id)
        if cached is not None and cached[1] == expected:
            self._remember(stream.id, cached[0], version, {**orjson.loads(cached[2]), **session_delta})
        if version % _SNAPSHOT_EVERY == 0:
            state = {k: v for k, v in session.state.items() if not k.startswith(("app:", "user:", "temp:"))}
            self._snapshot(stream.id, version, state)
        return committed


# ----------------------------------------------------------------------------- memory


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
        known = {m.meta.get("adk_memory", {}).get("event_id") for m in memory.messages()}
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
        if new:
            memory.add_many(new)

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
