"""Google ADK on tether: a session service and a memory service. ``pip install 'tether[adk]'``

:class:`TetherSessionService` implements ADK's ``BaseSessionService`` on tether's store. An ADK
session is a tether session (``app.session(...)`` reads it as a conversation): its first message
holds the ADK session's identity and initial state, and each ADK event is one message — the user's
text, the model's text and function calls, the function responses — carrying the ADK event
verbatim. State follows ADK's scopes: ``app:`` keys live in one tether document per app, ``user:``
keys in one per (app, user), ``temp:`` keys are never stored, and the rest belong to the session.

- ``create_session`` writes a session's ``app:``/``user:`` keys in one transaction with the message
  that makes it a session (its stream is opened first, unfinished and seen by no reader): a create
  that dies leaves nothing a reader sees, and the same create again finishes it.
- ``append_event`` is one optimistic append at the version the session object was read at, in one
  transaction with the changes its ``app:``/``user:`` delta makes to the shared documents (all or
  nothing): an append from a session object another writer has since moved past (or whose session
  was deleted and made again) raises ADK's ``StaleSessionError`` and writes nothing. A session
  object without this service's marker is judged as ADK's ``DatabaseSessionService`` judges it; an
  event delivered again is stored once, as ADK's ``InMemorySessionService`` does. State values
  JSON cannot hold are stored as ADK's database services store them.
- ``get_session`` reads the recent events it returns (``GetSessionConfig(num_recent_events,
  after_timestamp)``) with ranged reads, and the session's state from a snapshot plus the events
  after it: its cost does not grow with the session's history.
- ``list_sessions`` returns each session with its merged state and no events, as ADK's own
  services do: one narrow read of the sessions' versions, and each session's own state from this
  service's cache unless the session moved since the service last saw it (then the records after
  it are read). The stored form is described in :mod:`._adk_records`.

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

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import orjson

try:
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event as AdkEvent
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session as AdkSession
    from google.adk.sessions.state import State

    from tether.integrations._versions import check_tested

    check_tested("google-adk", "tether.integrations.adk")
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError("tether.integrations.adk needs Google ADK: pip install 'tether[adk]'") from exc

from tether.conversation import SESSION_TYPE, MessageAdded, SessionOpened, stream_id, to_event
from tether.errors import ConflictError, TaskNotFoundError
from tether.integrations._adk_artifacts import TetherArtifactService
from tether.integrations._adk_memory import TetherMemoryService
from tether.integrations._adk_records import (
    Seen,
    app_document,
    app_prefix,
    delivered,
    encoded_shared,
    event_json,
    fold_state,
    json_state,
    listed_sessions,
    marker,
    message_of,
    read_marker,
    scoped,
    session_key,
    unfinished,
    user_and_id,
    user_document,
)
from tether.integrations._gc import no_cycle_collection
from tether.integrations._targets import SCHEME_PREFIX, one_target, open_target
from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream, append_together
from tether.store import Position, SnapshotRow, StreamAppend, TaskRow
from tether.userstate import USER_TYPE

if TYPE_CHECKING:
    from google.adk.cli.service_registry import ServiceRegistry

    from tether.runtime.app import App
    from tether.userstate import UserState

__all__ = [
    "SCHEMES",
    "TetherArtifactService",
    "TetherMemoryService",
    "TetherSessionService",
    "register_services",
]

# The session-state snapshots' schema (tether's own session views use others). 1002: made from the
# stored events alone; 1001's were made from the session object, which could hold keys set outside
# any event, so they are not read (a read folds the events instead, and writes a 1002 snapshot).
_SNAPSHOT_SCHEMA = 1002
_SNAPSHOT_EVERY = 64  # events folded on a read before it caches the state again
_SHARED_TRIES = 20  # an append whose app:/user: document another writer keeps changing: tries before giving up
_STATES_CACHED = 200_000  # sessions whose own state a service keeps, encoded, for list_sessions


_CONSISTENT_TRIES = 50
"""How many times get_session reads a session when the app's or user's document moved meanwhile."""


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

    def __init__(
        self,
        target: str | App | None = None,
        *,
        uri: str | None = None,
        tenant: str | None = None,
        agents_dir: str | None = None,
    ) -> None:
        """``target``: a store URL (``sqlite:///agent.db``, ``postgresql://…``, ``memory://``, each
        also with ``tether+`` before its scheme, as ADK's registry names it) or a :class:`~tether.App`;
        ``None`` opens tether's default database. ``uri`` is the same, as ADK's ``services.yaml``
        passes it; ``tenant`` scopes a URL's app; ``agents_dir`` (passed by ADK's CLI) is not used.
        A URL's app is this service's own: :meth:`close` closes it."""
        del agents_dir  # ADK's CLI passes its folder to every service; the URL says where the store is
        self._target = open_target(
            one_target(target, uri, "TetherSessionService"), "TetherSessionService", tenant=tenant
        )
        app = self._app = self._target.app
        self._log = app.log
        self._documents: dict[str, UserState] = {}
        self._states: dict[str, Seen] = {}  # session stream -> what was last seen of it
        self._shared_seen: dict[str, tuple[float, int, dict[str, Any]]] = {}  # document stream -> its scoped keys
        # The last listing: what was asked, the positions it was made from, and what it returned.
        self._last_listing: tuple[Any, ...] | None = None

    def close(self) -> None:
        """Close the app this service opened from a URL (an app passed in stays open: it is yours)."""
        self._target.close()

    # ------------------------------------------------------------------ shared state
    def _document(self, doc_id: str) -> UserState:
        doc = self._documents.get(doc_id)
        if doc is None:
            doc = self._documents[doc_id] = self._app.user(doc_id)  # read incrementally from then on
        return doc

    def _shared(self, doc_id: str, version: int | None = None) -> dict[str, Any]:
        """A shared document's keys, read without creating the document if it has none. ``version``: its
        version as just read (0: none), which spares the read of whether it exists."""
        if doc_id not in self._documents:
            if version == 0 or (version is None and not Stream(self._log, f"user:{doc_id}", USER_TYPE).exists()):
                return {}
        keys: dict[str, Any] = self._document(doc_id).get()
        return keys

    def _merge(
        self, app_name: str, user_id: str, session_state: dict[str, Any], versions: tuple[int, int] | None = None
    ) -> dict[str, Any]:
        """A session's own state with the app's and the user's keys: a copy of its own, which shares
        no value with the service's documents (a caller may change it). ``versions``: the documents'
        versions as just read (see :meth:`_shared`)."""
        app_v, user_v = versions or (None, None)
        merged = dict(session_state)
        merged.update({State.APP_PREFIX + k: v for k, v in self._shared(app_document(app_name), app_v).items()})
        user_keys = self._shared(user_document(app_name, user_id), user_v)
        merged.update({State.USER_PREFIX + k: v for k, v in user_keys.items()})
        copied: dict[str, Any] = orjson.loads(orjson.dumps(merged))
        return copied

    def _shared_changes(
        self, app_name: str, user_id: str, app_delta: dict[str, Any], user_delta: dict[str, Any]
    ) -> list[StreamAppend]:
        """What the deltas change in the app's and the user's documents, as parts of one append."""
        changes = []
        if app_delta:
            changes.append(self._document(app_document(app_name)).change(lambda doc: {**doc, **app_delta}))
        if user_delta:
            changes.append(self._document(user_document(app_name, user_id)).change(lambda doc: {**doc, **user_delta}))
        return [c for c in changes if c is not None]

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's ``user:`` keys (without the prefix), the caller's to change: a copy that shares
        no value with the service's cached document."""
        keys: dict[str, Any] = orjson.loads(orjson.dumps(self._shared(user_document(app_name, user_id))))
        return keys

    # ------------------------------------------------------------------ sessions
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        """A new session, written whole or not at all (for readers): with ``app:``/``user:`` keys in
        ``state``, its stream is opened first, unfinished (no reader sees it), then the message that
        makes it a session is written in one transaction with the keys. A create that dies between
        the two leaves it unfinished; creating it again with the same id finishes it (with the state
        the new call gives), so a failed create can be retried. ``AlreadyExistsError`` if it exists.
        A value JSON cannot hold is stored as ADK's database services store it (:func:`json_state`)."""
        session_id = (session_id or "").strip() or uuid.uuid4().hex
        key = session_key(app_name, user_id, session_id)
        stream = Stream(self._log, stream_id(key), SESSION_TYPE)
        app_delta, user_delta, session_state = scoped(json_state(state or {}))
        now = time.time()
        made = to_event(
            {
                "role": "system",
                "content": f"ADK session {session_id!r} of app {app_name!r} for user {user_id!r}",
                "adk_session": {"app_name": app_name, "user_id": user_id, "id": session_id, "state": session_state},
            }
        )
        # The shared documents are made (empty) before the session, so that from then on its creation
        # and each append to it is one transaction. An empty document is no document to a reader.
        self._document(app_document(app_name))
        self._document(user_document(app_name, user_id))
        shares = bool(app_delta or user_delta)
        first = SessionOpened(session_id=key, user_id=user_id) if shares else made
        if stream.create(first, user_id=user_id, session_id=key):
            version = self._finish(stream, made, now, app_name, user_id, app_delta, user_delta) if shares else 1
        elif unfinished(stream.read(after=0, upto=2)):
            version = self._finish(stream, made, now, app_name, user_id, app_delta, user_delta)
        else:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        # The stream's first record is stamped with its creation time; a session made in one write
        # was last updated then, and get_session returns that time: the session returned here equals it.
        (opened,) = stream.read(after=0, upto=1)
        self._remember(stream.id, opened.at, version, opened.at if version == 1 else now, session_state)
        session = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=self._merge(app_name, user_id, session_state),
            last_update_time=opened.at if version == 1 else now,
        )
        session._storage_update_marker = marker(version, opened.at)
        return session

    def _finish(
        self,
        stream: Stream,
        made: MessageAdded,
        now: float,
        app_name: str,
        user_id: str,
        app_delta: dict[str, Any],
        user_delta: dict[str, Any],
    ) -> int:
        """Finish creating a session whose stream is open and unfinished: the message that makes it
        a session, and its shared keys, in one transaction. Another create that finished it first
        makes this one ``AlreadyExistsError``; a document another writer changed is read again."""
        message = stream.part([made], 1, at=now)

        def write() -> int:
            parts = [*self._shared_changes(app_name, user_id, app_delta, user_delta), message]
            try:
                return append_together(self._log, parts)[-1]
            except ConflictError as conflict:
                if conflict.task_id == stream.id:
                    session_id = user_and_id(stream.id)[1]
                    raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
                raise

        return retry_on_conflict(write, stream=stream.id, tries=_SHARED_TRIES)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        """The session with its state and the events ``config`` asks for; ``None`` if there is none.
        A padded id reads the session of the id stripped, as create_session stores it."""
        key = session_key(app_name, user_id, session_id.strip())
        stream = Stream(self._log, stream_id(key), SESSION_TYPE)
        # The session and the app's and user's documents are read one after another, and an event
        # with app: or user: keys changes them in one transaction: one landing between the reads would
        # show its keys without its event. So the documents' versions are read before and after, and
        # the session read again if they moved, after a short random pause (so that a reader beside a
        # writer that never stops still finds a moment between its commits). A document that moves
        # at every one of the tries is read as the last try found it.
        for attempt in range(_CONSISTENT_TRIES):
            if attempt:
                await asyncio.sleep(random.uniform(0.0, 0.001 * attempt))
            shared = self._shared_versions(app_name, user_id)
            row = self._log.store.get_task(self._log.tenant, stream.id)
            if row is None:
                return None
            version = row.version
            state = self._session_state(stream, version, row.created_at, row.updated_at)
            if state is None:
                return None  # its creation has not finished
            merged = self._merge(app_name, user_id, state, shared)
            if self._shared_versions(app_name, user_id) == shared:
                break
        assert row is not None  # every try returns on a missing session
        events = self._recent_events(stream, version, config or GetSessionConfig())
        session = AdkSession(
            id=session_id.strip(),
            app_name=app_name,
            user_id=user_id,
            state=merged,
            events=events,
            last_update_time=row.updated_at,
        )
        session._storage_update_marker = marker(version, row.created_at)
        return session

    def _shared_versions(self, app_name: str, user_id: str) -> tuple[int, int]:
        """The versions of the app's and the user's documents (0: none yet)."""
        store, tenant = self._log.store, self._log.tenant
        rows = [store.get_task(tenant, "user:" + d) for d in (app_document(app_name), user_document(app_name, user_id))]
        app, user = (0 if r is None else r.version for r in rows)
        return app, user

    def _recent_events(self, stream: Stream, version: int, config: GetSessionConfig) -> list[AdkEvent]:
        """The events ``config`` asks for, read by range: the newest ``num_recent_events`` (each
        event is one record, so they are the last records), those from ``after_timestamp`` on
        (found by bisecting the records' times)."""
        if config.num_recent_events == 0:
            return []
        start = 1  # the first record is the session's own (a second, if it was created in two steps)
        if config.num_recent_events is not None:
            start = max(start, version - config.num_recent_events)
        if config.after_timestamp is not None:
            start = max(start, self._first_at_or_after(stream, version, config.after_timestamp) - 1)
        records = stream.read(after=start, upto=version)
        found = [
            AdkEvent.model_validate(event_json(rec.event))
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

    def _session_state(
        self, stream: Stream, version: int, created_at: float, at: float | None
    ) -> dict[str, Any] | None:
        """The session-scoped state at ``version`` (last changed ``at``, if known): the newest
        snapshot plus the events after it, remembered for ``list_sessions``; ``None`` while the
        session's creation is unfinished."""
        snap, cached = self._log.intact_snapshot(stream.id, version, _state_of_snapshot)
        state: dict[str, Any] = {} if cached is None else cached
        after = 0 if snap is None else snap.seq
        records = stream.read(after=after, upto=version)
        if after == 0 and unfinished(records):
            self._remember(stream.id, created_at, version, records[0].at, None)
            return None
        state = fold_state(records, state)
        if len(records) >= _SNAPSHOT_EVERY:
            self._snapshot(stream.id, version, state)
        if at is None:
            at = (records or stream.read(after=version - 1, upto=version))[-1].at
        self._remember(stream.id, created_at, version, at, state)
        return state

    def _snapshot(self, stream: str, version: int, state: dict[str, Any]) -> None:
        self._log.put_stream_snapshot(stream, version, _SNAPSHOT_SCHEMA, orjson.dumps(state).decode())

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The app's sessions (one user's, with ``user_id``), oldest update first, each with its state
        (app, user and session scopes merged) and without events, as ADK's own services return them.

        One narrow read gives each session's version (``Store.stream_positions``), and one more each the
        versions of the app's and the users' shared documents. A session's own state comes from this
        service's cache when the session has not moved since it was last seen (read, written or
        listed here), and is otherwise brought up to date from the records after the cached version
        (a session never seen: its snapshot and the records after it); a shared document is read
        again only if it moved. When nothing moved since the last listing, that listing is made
        again from what it kept. Every state is decoded afresh, all in one parse: the caller's to change.
        """
        store, tenant = self._log.store, self._log.tenant
        prefix = app_prefix(app_name) + ("" if user_id is None else quote(user_id, safe="") + ":")
        positions = store.stream_positions(tenant, SESSION_TYPE, prefix, user_id=user_id)
        documents = self._document_positions(app_name, user_id)
        last = self._last_listing
        if last is not None and last[:3] == ((app_name, user_id), positions, documents):
            order, states = last[3], last[4]
        else:
            order, states = self._listing(app_name, positions, documents)
            self._last_listing = ((app_name, user_id), positions, documents, order, states)
        with no_cycle_collection():  # thousands of sessions built and kept: no collection walks them midway
            sessions = listed_sessions(app_name, order, orjson.loads(states))
        return ListSessionsResponse.model_construct(sessions=sessions)

    def _document_positions(self, app_name: str, user_id: str | None) -> list[Position]:
        """The app's shared document and its users' (one user's, with ``user_id``), those that exist."""
        store, tenant = self._log.store, self._log.tenant
        app_doc = "user:" + app_document(app_name)
        found = [p for p in store.stream_positions(tenant, USER_TYPE, app_doc) if p[0] == app_doc]
        users = "user:" + user_document(app_name, "" if user_id is None else user_id)
        of_users = store.stream_positions(tenant, USER_TYPE, users)
        return found + [p for p in of_users if user_id is None or p[0] == users]

    def _listing(
        self, app_name: str, positions: list[Position], documents: list[Position]
    ) -> tuple[list[tuple[float, str, str]], bytes]:
        """A listing of the sessions at ``positions``: each one's last update, user and id, oldest
        update first, and their merged states, encoded as one JSON array."""
        shared, nobody = self._shared_by_user(app_name, documents)
        states = self._states
        listed: list[tuple[float, str, str, bytes]] = []
        with no_cycle_collection():
            for position in positions:
                seen = states.get(position[0])
                if seen is None or seen[1] != position[2] or seen[0] != position[1]:
                    seen = self._state_of(*position)
                if seen is None or seen[3] is None:
                    continue  # deleted since the read, or its creation has not finished
                own, owner = seen[3], seen[4]
                whole, tail = shared.get(owner, nobody)
                state = own if not tail else whole if own == b"{}" else own[:-1] + tail
                listed.append((seen[2], owner, seen[5], state))
            # Oldest update first, then by user and id (unique within an app: the states are never compared).
            listed.sort()
            return [entry[:3] for entry in listed], b"[" + b",".join([entry[3] for entry in listed]) + b"]"

    def _shared_by_user(
        self, app_name: str, documents: list[Position]
    ) -> tuple[dict[str, tuple[bytes, bytes]], tuple[bytes, bytes]]:
        """The app's keys merged with each user's, by user, encoded (:func:`encoded_shared`); and the
        app's alone, for a user without a document."""
        app_doc = "user:" + app_document(app_name)
        app_keys: dict[str, Any] = {}
        for position in documents:
            if position[0] == app_doc:
                app_keys = self._shared_keys(position, State.APP_PREFIX)
        users = len("user:" + user_document(app_name, ""))
        shared = {
            unquote(position[0][users:]): encoded_shared({**app_keys, **self._shared_keys(position, State.USER_PREFIX)})
            for position in documents
            if position[0] != app_doc
        }
        return shared, encoded_shared(app_keys)

    def _shared_keys(self, position: Position, scope: str) -> dict[str, Any]:
        """A shared document's keys, each with its scope's prefix; read again only if the document
        moved since this service last read it."""
        doc_stream, created_at, version = position
        seen = self._shared_seen.get(doc_stream)
        if seen is None or seen[0] != created_at or seen[1] != version:
            keys = {scope + k: v for k, v in self._document(doc_stream.removeprefix("user:")).get().items()}
            seen = self._shared_seen[doc_stream] = (created_at, version, keys)
        return seen[2]

    def _state_of(self, stream_id: str, created_at: float, version: int) -> Seen | None:
        """What a listing needs of a session at ``version``, the cache brought up to date; ``None``
        if the session was deleted since the listing's read."""
        cached = self._states.get(stream_id)
        stream = Stream(self._log, stream_id, SESSION_TYPE)
        if cached is not None and cached[0] == created_at and cached[1] < version:
            try:
                records = stream.read(after=cached[1], upto=version)
            except TaskNotFoundError:
                return None
            state = fold_state(records, orjson.loads(cached[3]) if cached[3] is not None else {})
            return self._remember(stream_id, created_at, version, records[-1].at, state)
        # Never seen here: the newest intact snapshot and the records after it, in one read when the
        # newest is intact; one taken after the listing's read is of no use to it (read as of ``version``).
        try:
            snap, snapped, after = self._log.latest(stream_id, _state_of_snapshot)
        except TaskNotFoundError:
            return None
        records = [r for r in after if r.seq <= version]
        if records and (snap is None or snap.seq <= version):
            if snap is None and unfinished(records):
                return self._remember(stream_id, created_at, version, records[0].at, None)
            own = fold_state(records, {} if snapped is None else snapped)
            return self._remember(stream_id, created_at, version, records[-1].at, own)
        self._session_state(stream, version, created_at, None)
        return self._states.get(stream_id)

    def _remember(self, stream: str, created_at: float, version: int, at: float, state: dict[str, Any] | None) -> Seen:
        """Cache a session's own state at ``version`` (made ``at``), encoded: each reader decodes its
        own copy, so no caller's change to a returned state reaches the cache. ``created_at`` tells a
        session deleted and made again under the same id from the one cached."""
        states = self._states
        states.pop(stream, None)
        encoded = None if state is None else orjson.dumps(state)
        seen = states[stream] = (created_at, version, at, encoded, *user_and_id(stream))
        if len(states) > _STATES_CACHED:
            del states[next(iter(states))]  # the least recently stored
        return seen

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session (nothing if there is none); a padded id deletes that of the id stripped."""
        key = session_key(app_name, user_id, session_id.strip())
        self._states.pop(stream_id(key), None)
        try:
            self._app.delete_session(key)
        except TaskNotFoundError:
            return

    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        """Store ``event`` (unless partial) and apply it to ``session``, in one optimistic write at
        the version ``session`` was read at. ``StaleSessionError`` when the stored session has moved
        on since (:meth:`_version_seen`); nothing is written then. An event delivered again (an
        equal event with its id, in ``session`` or stored since ``session`` was read) is returned
        and not stored twice, as ADK's in-memory service does."""
        if event.partial:
            return event
        stream = Stream(self._log, stream_id(session_key(session.app_name, session.user_id, session.id)), SESSION_TYPE)
        row = self._log.store.get_task(self._log.tenant, stream.id)
        if row is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        if delivered(reversed(session.events), event):
            return event
        expected = self._version_seen(session, stream, row)
        if expected != row.version:
            if 0 <= expected and self._stored_since(stream, expected, row.version, event):
                return event
            raise _stale(session, expected)  # before anything is written
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        message = message_of(event)
        # The deltas as the event stores them (JSON, as ADK stores them): the shared documents and the
        # cached state get what a read of the stored events gives.
        app_delta, user_delta, session_delta = scoped((message["adk"].get("actions") or {}).get("state_delta") or {})
        part = stream.part([to_event(message)], expected, at=event.timestamp)

        def write() -> int:
            """The event and the app:/user: documents' changes in one transaction: all or nothing. A
            document another writer changed first is read again and the delta applied again."""
            parts = [*self._shared_changes(session.app_name, session.user_id, app_delta, user_delta), part]
            try:
                return append_together(self._log, parts)[-1]
            except ConflictError as conflict:
                if conflict.task_id == stream.id:  # another writer got in between the check and the append
                    raise _stale(session, expected) from None
                raise

        version = retry_on_conflict(write, stream=stream.id, tries=_SHARED_TRIES)
        session._storage_update_marker = marker(version, row.created_at)
        session.last_update_time = event.timestamp
        committed = self._commit_event_to_session(session, event)
        self._appended(stream.id, row, version, event.timestamp, session_delta)
        return committed

    def _version_seen(self, session: AdkSession, stream: Stream, row: TaskRow) -> int:
        """The version of the stored session (``row``) that ``session`` holds: its marker's (-1 if
        the session was deleted and made again since). A session without a marker of this service's
        (built by hand, listed, or sent through JSON) is judged as ADK's database services judge it:
        current unless the stored session was updated after its ``last_update_time`` and its last
        event is not the stored last event — then it holds the version before the stored one."""
        mark = session._storage_update_marker
        seen = read_marker(mark) if mark is not None else None
        if seen is not None:
            return seen[0] if seen[1] == row.created_at else -1
        if row.updated_at <= session.last_update_time:
            return row.version
        (last,) = stream.read(after=row.version - 1, upto=row.version)
        stored = (last.event.meta or {}).get("adk", {}).get("id") if isinstance(last.event, MessageAdded) else None
        mine = session.events[-1].id if session.events else None
        return row.version if stored == mine else row.version - 1

    def _stored_since(self, stream: Stream, seen: int, version: int, event: AdkEvent) -> bool:
        """Whether ``event`` is among the events stored after version ``seen`` (up to ``version``);
        only those with its id are decoded."""
        records = stream.read(after=seen, upto=version)
        held = [rec.event for rec in records if isinstance(rec.event, MessageAdded)]
        stored = [
            AdkEvent.model_validate(event_json(m)) for m in held if (m.meta or {}).get("adk", {}).get("id") == event.id
        ]
        return delivered(stored, event)

    def _appended(self, stream: str, row: TaskRow, version: int, at: float, delta: dict[str, Any]) -> None:
        """After an append at ``row``'s version: the cached state of the session brought up to date if
        it was cached at that version, and its snapshot written every ``_SNAPSHOT_EVERY`` versions —
        of the state the stored events make, never of the session object's (a caller may change it
        outside any event, and such a change is not stored)."""
        cached = self._states.get(stream)
        if cached is None or cached[0] != row.created_at or cached[1] != row.version or cached[3] is None:
            return
        own = {**orjson.loads(cached[3]), **delta}
        self._remember(stream, row.created_at, version, at, own)
        if version % _SNAPSHOT_EVERY == 0:
            self._snapshot(stream, version, own)


SCHEMES = tuple(
    SCHEME_PREFIX + backend for backend in ("memory", "sqlite", "postgresql", "postgres", "redis", "rediss")
)
"""The URL schemes :func:`register_services` gives ADK's registry: ``tether+`` and a tether store URL's."""


def register_services(registry: ServiceRegistry | None = None) -> None:
    """Register tether's session, memory and artifact services with ADK's registry of URL schemes
    (``get_service_registry()``, the one ``adk web``/``adk api_server`` and their
    ``--session_service_uri``, ``--memory_service_uri`` and ``--artifact_service_uri`` resolve
    through), under :data:`SCHEMES`: ``tether+sqlite:///agent.db`` names a
    :class:`TetherSessionService` (or memory or artifact service) on ``sqlite:///agent.db``. Call it
    from the agents folder's ``services.py``; a ``services.yaml`` can name each class instead.
    Registering again changes nothing.

    Example:
        >>> from google.adk.cli.service_registry import get_service_registry
        >>> register_services()
        >>> service = get_service_registry().create_session_service("tether+memory://")
        >>> type(service).__name__
        'TetherSessionService'
        >>> service.close()
    """
    if registry is None:
        from google.adk.cli.service_registry import get_service_registry

        registry = get_service_registry()
    for scheme in SCHEMES:
        registry.register_session_service(scheme, _factory(TetherSessionService))
        registry.register_memory_service(scheme, _factory(TetherMemoryService))
        registry.register_artifact_service(scheme, _factory(TetherArtifactService))


def _factory(service: Callable[..., Any]) -> Callable[..., Any]:
    """ADK's registry calls a factory with the URL and its CLI's options (``agents_dir``)."""

    def make(uri: str, **options: Any) -> Any:
        return service(uri, **options)

    return make


def _state_of_snapshot(snap: SnapshotRow) -> dict[str, Any]:
    """A session's own state from its snapshot (one the log found intact); ``ValueError`` if it is of
    another schema (1001's are not read: see ``_SNAPSHOT_SCHEMA``) or holds no state."""
    if snap.schema != _SNAPSHOT_SCHEMA:
        raise ValueError(f"has ADK session state schema {snap.schema}, current is {_SNAPSHOT_SCHEMA}")
    state = orjson.loads(snap.data)
    if not isinstance(state, dict):
        raise ValueError(f"holds a {type(state).__name__}, not a session's state")
    return state


def _stale(session: AdkSession, seen: int) -> StaleSessionError:
    if seen < 0:
        return StaleSessionError(
            f"session {session.id!r} was deleted and made again since it was read; get it again (get_session)"
        )
    return StaleSessionError(
        f"session {session.id!r} was read at version {seen} and has been appended to since; "
        "get it again (get_session) and retry"
    )
