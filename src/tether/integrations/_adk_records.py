"""How the ADK adapter stores ADK's sessions in tether, and builds them back: the ids, the messages
that hold events, the state scopes, the fold of a session's own state. Pure functions, no I/O.

A session is the tether session ``adk:{app}:{user}:{session}`` (each part quoted, so the colons
separate them), in the stream ``session:adk:...``. Its first message (``adk_session``) holds its
identity and initial state; each ADK event is one message holding the event verbatim (``adk``). A
session created with ``app:``/``user:`` keys first opens its stream (``SessionOpened``) and then
writes that first message with the keys, in one transaction: until then it is unfinished, and no
reader sees it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import orjson
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.session import Session as AdkSession
from google.adk.sessions.state import State
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from tether.conversation import MessageAdded, SessionOpened, stream_id

if TYPE_CHECKING:
    from tether.events import Recorded

__all__ = [
    "Seen",
    "app_document",
    "app_prefix",
    "delivered",
    "encoded_shared",
    "event_json",
    "fold_state",
    "json_state",
    "listed_sessions",
    "marker",
    "message_of",
    "read_marker",
    "scoped",
    "session_key",
    "unfinished",
    "user_and_id",
    "user_document",
]

_PREFIX = "adk:"  # tether session ids of ADK sessions: adk:{app}:{user}:{session}, each part quoted

Seen = tuple[float, int, float, bytes | None, str, str]
"""What a session service remembers of a session at a version: its stream's creation time, the
version, that version's time (the session's last update), its own state encoded (``None`` while its
creation is unfinished), its user and its id."""


def session_key(app_name: str, user_id: str, session_id: str) -> str:
    return _PREFIX + ":".join(quote(part, safe="") for part in (app_name, user_id, session_id))


def app_prefix(app_name: str) -> str:
    """What the stream ids of an app's sessions start with."""
    return stream_id(_PREFIX + quote(app_name, safe="") + ":")


def user_and_id(stream: str) -> tuple[str, str]:
    """The ADK user and session ids of a session's stream."""
    _, _, _, owner, session_id = stream.split(":")
    return (unquote(owner) if "%" in owner else owner), (unquote(session_id) if "%" in session_id else session_id)


def app_document(app_name: str) -> str:
    """The tether user document that holds an app's ``app:`` keys."""
    return f"adk-app:{quote(app_name, safe='')}"


def user_document(app_name: str, user_id: str) -> str:
    """The tether user document that holds a user's ``user:`` keys in an app."""
    return f"adk-user:{quote(app_name, safe='')}:{quote(user_id, safe='')}"


_CUT = "tether_cut"
"""In a stored event: what was cut out of its parts because the message's content holds it — ``["t",
part, start, end]`` a text (a slice of the content), ``["r", part, k]`` a function's response (the
``k``-th answer of the content's JSON). Each is stored once, as the content."""


def message_of(event: AdkEvent) -> dict[str, Any]:
    """An ADK event as a tether message: who said what, which functions were called and answered,
    and the event itself (``adk``), less what the message's content already holds (:data:`_CUT`):
    :func:`event_json` gives it back whole."""
    stored = event.model_dump(mode="json", exclude_none=True)
    parts = event.content.parts or [] if event.content is not None else []
    stored_parts = (stored.get("content") or {}).get("parts") or []
    calls = [p.function_call for p in parts if p.function_call is not None]
    answers = [p.function_response for p in parts if p.function_response is not None]
    cut: list[list[Any]] = []
    if answers:
        first = answers[0].id or f"{event.id}:0"
        said = [{"name": a.name, "response": a.response} for a in answers]
        content = orjson.dumps(said, default=str).decode()
        _cut_responses(stored_parts, orjson.loads(content), cut)
        return {"role": "tool", "content": content, "tool_call_id": first, "adk": _with_cuts(stored, cut)}
    text = _cut_texts(parts, stored_parts, cut)
    if event.author == "user":
        return {"role": "user", "content": text, "adk": _with_cuts(stored, cut)}
    message: dict[str, Any] = {"role": "assistant", "content": text, "adk": _with_cuts(stored, cut)}
    if calls:
        message["tool_calls"] = [
            {"id": c.id or f"{event.id}:{i}", "name": c.name or "", "arguments": c.args or {}}
            for i, c in enumerate(calls)
        ]
    return message


def _cut_texts(parts: list[Any], stored_parts: list[dict[str, Any]], cut: list[list[Any]]) -> str:
    """The event's text (its parts' texts that are not thoughts, joined), each cut out of the stored parts."""
    pieces: list[str] = []
    at = 0
    for i, part in enumerate(parts):
        if part.text and not part.thought:
            if stored_parts[i].get("text") == part.text:
                del stored_parts[i]["text"]
                cut.append(["t", i, at, at + len(part.text)])
            pieces.append(part.text)
            at += len(part.text)
    return "".join(pieces)


def _cut_responses(stored_parts: list[dict[str, Any]], said: list[dict[str, Any]], cut: list[list[Any]]) -> None:
    """Cut each function response the content's JSON holds as it is stored out of the stored parts."""
    k = 0
    for i, part in enumerate(stored_parts):
        answer = part.get("function_response")
        if answer is None:
            continue
        if "response" in answer and said[k]["response"] == answer["response"]:
            del answer["response"]
            cut.append(["r", i, k])
        k += 1


def _with_cuts(stored: dict[str, Any], cut: list[list[Any]]) -> dict[str, Any]:
    if cut:
        stored[_CUT] = cut
    return stored


def event_json(message: MessageAdded) -> dict[str, Any]:
    """The stored ADK event of a message :func:`message_of` made, whole again (a copy when anything
    was cut out of it: the message's own metadata is never changed)."""
    stored: dict[str, Any] = (message.meta or {})["adk"]
    cut = stored.get(_CUT)
    if not cut:
        return stored
    whole = {k: v for k, v in stored.items() if k != _CUT}
    content = whole["content"] = dict(stored["content"])
    parts = content["parts"] = [dict(p) for p in stored["content"]["parts"]]
    said = None
    for piece in cut:
        if piece[0] == "t":
            parts[piece[1]]["text"] = (message.content or "")[piece[2] : piece[3]]
        else:
            said = orjson.loads(message.content or "[]") if said is None else said
            answer = parts[piece[1]]["function_response"] = dict(parts[piece[1]]["function_response"])
            answer["response"] = said[piece[2]]["response"]
    return whole


def json_state(state: dict[str, Any]) -> dict[str, Any]:
    """State as ADK's database services store it, and as an event's ``state_delta`` is stored: each
    value made JSON by pydantic (a datetime as its ISO text, a set as a list, a model as its fields),
    one it cannot (a function) as its repr, instead of refusing the whole state."""
    made: dict[str, Any] = to_jsonable_python(state, serialize_unknown=True)
    return made


def marker(version: int, created_at: float) -> str:
    """A session object's revision marker (``Session._storage_update_marker``): the version it was
    read or written at, and its stream's creation time, which tells a session deleted and made
    again under the same id from the one it was read from."""
    return f"{version}@{created_at!r}"


def read_marker(text: str) -> tuple[int, float] | None:
    """The version and creation time a marker holds; ``None`` for one this service did not make."""
    version, _, created_at = text.partition("@")
    try:
        return int(version), float(created_at)
    except ValueError:
        return None


def delivered(events: Iterable[AdkEvent], event: AdkEvent) -> bool:
    """Whether ``event`` is among ``events``, as ADK's in-memory service tells an event delivered
    again: an equal event with the same id (another event that reuses an id is a new one)."""
    return any(e.id == event.id and e == event for e in events)


def scoped(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
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


def fold_state(records: Iterable[Recorded], state: dict[str, Any]) -> dict[str, Any]:
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
            state.update(scoped(delta)[2])
    return state


def unfinished(records: list[Recorded]) -> bool:
    """Whether a stream whose records these are, from its first, holds a session whose creation has
    not finished: opened, without the message that makes it an ADK session."""
    return len(records) == 1 and records[0].seq == 1 and isinstance(records[0].event, SessionOpened)


def encoded_shared(keys: dict[str, Any]) -> tuple[bytes, bytes]:
    """Shared keys (``app:``, ``user:``) as a listing merges them into each session's own state,
    encoded: a JSON object of them, and its members after a comma (``b""`` for none), to close a
    session's own object with (the two never share a key)."""
    whole = orjson.dumps(keys)
    return whole, (b"," + whole[1:] if keys else b"")


_LISTED_FIELDS = frozenset({"id", "app_name", "user_id", "state", "events", "last_update_time"})
# The slots pydantic keeps beside a model's __dict__, set through their descriptors, not by name with
# object.__setattr__ (which looks the descriptor up each time): a listing sets four for every session.
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__


def listed_sessions(
    app_name: str, order: Iterable[tuple[float, str, str]], states: Iterable[dict[str, Any]]
) -> list[AdkSession]:
    """ADK ``Session``\\ s from values of the right types — each session's last update, user and id,
    and its state — as ``model_construct`` builds them (no validation, every field set), without its
    per-field work: a listing builds every session of the app from values already of those types, and
    validating them again would cost more than reading them. A test checks that each equals
    a validated one. One loop, its names bound locally: a function call per session would be paid for
    every session listed."""
    new, set_dict = object.__new__, object.__setattr__
    set_fields, set_extra, set_private, fields_set = _SET_FIELDS_SET, _SET_EXTRA, _SET_PRIVATE, _LISTED_FIELDS
    sessions: list[AdkSession] = []
    append = sessions.append
    for (at, user_id, session_id), state in zip(order, states, strict=True):
        session = new(AdkSession)
        fields: dict[str, Any] = {
            "id": session_id,
            "app_name": app_name,
            "user_id": user_id,
            "state": state,
            "events": [],
            "last_update_time": at,
        }
        set_dict(session, "__dict__", fields)
        set_fields(session, set(fields_set))
        set_extra(session, None)
        set_private(session, {"_storage_update_marker": None})
        append(session)
    return sessions
