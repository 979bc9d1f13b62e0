"""A session's events, the records read from them, and the pure fold into a :class:`SessionView`.

A message is stored as it came: in tether's own form (``role``, ``content``, ``tool_calls``, …)
as the event's fields, or in a provider's shape (``format``) verbatim as ``original``, from which
its role, text and tool calls are read again whenever it is loaded — never stored twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from tether.conversation.shapes import FORMATS, Format, Part, detect, read, text, tool_call, tool_result
from tether.errors import InvalidInputError
from tether.events import DEFAULT_UPCASTERS, Event, Recorded, define_event, from_epoch

__all__ = [
    "ROLES",
    "Message",
    "MessageAdded",
    "MessageRemoved",
    "MessagesCleared",
    "Role",
    "SessionClosed",
    "SessionOpened",
    "SessionView",
    "Summary",
    "SummaryAdded",
    "SummaryWithdrawn",
    "ToolCallRequest",
    "added_role",
    "check_one_message",
    "fold_history",
    "fold_view",
    "message_from_event",
    "parts_of",
    "standing_summary",
    "to_event",
    "to_event_and_role",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES = ("system", "user", "assistant", "tool")


# ----------------------------------------------------------------------------- events


@define_event
class SessionOpened(Event):
    session_id: str
    user_id: str | None = None

    def describe(self) -> str:
        return f"session {self.session_id} opened" + (f" for {self.user_id}" if self.user_id else "")


@define_event
class MessageAdded(Event):
    """A message appended. In tether's form (``format`` is ``None``) the fields are the message; in a
    provider's shape ``original`` is the message verbatim and every other field of the message is
    left empty (``role`` and ``content`` ``""``, the rest ``None``): its role, text and tool calls are
    read from ``original`` (:func:`added_role`, :func:`message_from_event`), so a record holds little
    besides the message.
    ``origin`` is for whoever appends (a task marks its appends with it); tether does not interpret it.

    Version 2 gave ``role`` and ``content`` their default ``""``, which a stored record leaves out;
    version 1 kept tether's normalised role in a provider's shape too (its upcaster leaves it out).
    """

    version: ClassVar[int] = 2

    role: str = ""
    """tether's role (``""`` in a provider's shape: see :func:`added_role`)."""
    content: str | None = ""
    """The text; ``None`` only in an assistant message that calls tools and says nothing."""
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    meta: dict[str, Any] | None = None
    format: str | None = None
    original: dict[str, Any] | None = None
    origin: str | None = None

    def describe(self) -> str:
        if self.format is not None:
            try:
                role = added_role(self)
            except (InvalidInputError, KeyError):  # a record no reader takes: described as it stands
                role = self.role or "a"
            return f"{role} message added ({self.format})"
        calls = f" calling {', '.join(_called(self.tool_calls))}" if self.tool_calls else ""
        answers = f" answering {self.tool_call_id}" if self.tool_call_id else ""
        text = f": {_clip(self.content)}" if self.content else ""
        return f"{self.role} message added{calls}{answers}{text}"


@define_event
class MessageRemoved(Event):
    seq: int

    def describe(self) -> str:
        return f"message #{self.seq} removed"


@define_event
class MessagesCleared(Event):
    def describe(self) -> str:
        return "every message cleared"


@define_event
class SummaryAdded(Event):
    text: str
    covers_from: int
    covers_to: int
    origin: str | None = None

    def describe(self) -> str:
        return f"summary of messages #{self.covers_from}–#{self.covers_to} added: {_clip(self.text)}"


@define_event
class SummaryWithdrawn(Event):
    """A compaction undone: the summary appended at ``seq`` no longer stands. The messages it covered
    (never deleted) are in the window again, and the summary before it, if any, stands again. Only a
    fold of the whole stream (:func:`fold_history`) can apply it: an incremental view has dropped
    those messages, so :func:`fold_view` passes over it."""

    seq: int

    def describe(self) -> str:
        return f"summary #{self.seq} withdrawn: the messages it covered are back"


@define_event
class SessionClosed(Event):
    def describe(self) -> str:
        return "session closed"


def _clip(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _called(tool_calls: list[dict[str, Any]]) -> list[str]:
    """The names of the tools a message calls (OpenAI's shape, ``function.name``, or a bare ``name``)."""
    names = []
    for call in tool_calls:
        if not isinstance(call, dict):
            names.append("a tool")
            continue
        function = call.get("function")
        name = function.get("name") if isinstance(function, dict) else call.get("name")
        names.append(str(name) if name else "a tool")
    return names


# ----------------------------------------------------------------------------- records


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCallRequest(_Record):
    """A tool call an assistant message asks for; its result comes back in a ``tool`` message."""

    id: str
    name: str
    arguments: dict[str, Any] = {}


class Message(_Record):
    """One stored message, read into tether's terms, with the original as it came.

    ``role`` is normalised: ``developer`` is ``system``, and a message that carries tool results
    (an OpenAI ``tool`` message, an Anthropic user message with ``tool_result`` blocks, a Responses
    ``function_call_output``) is ``tool``. ``content`` is all its text; ``answers`` the ids of the
    calls whose results it carries (``tool_call_id`` when there is exactly one). ``format`` is the
    shape it came in and ``original`` the message in that shape, verbatim.
    """

    seq: int
    role: Role
    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    answers: tuple[str, ...] = ()
    name: str | None = None
    meta: dict[str, Any] = {}
    at: datetime
    format: Format = "tether"
    original: dict[str, Any] = {}
    origin: str | None = None


class Summary(_Record):
    """A summary of the messages with ``covers_from <= seq <= covers_to`` (and of the summary before it)."""

    seq: int
    text: str
    covers_from: int
    covers_to: int
    at: datetime
    origin: str | None = None


class SessionView(_Record):
    """What a window needs, folded from the session's events: system messages, the newest summary,
    and the messages after it. Cached as a snapshot at every compaction."""

    session_id: str
    user_id: str | None = None
    system: tuple[Message, ...] = ()
    summary: Summary | None = None
    recent: tuple[Message, ...] = ()
    closed: bool = False
    version: int = 0


# ----------------------------------------------------------------------------- writing


def check_one_message(message: object) -> None:
    """Refuse what ``add`` cannot take as its first argument (a role or one message's dict): a list
    of messages, most often, which ``add_many`` takes."""
    if not isinstance(message, str | dict):
        several = " (for several messages, add_many([...]))" if isinstance(message, list | tuple) else ""
        raise InvalidInputError(
            f"add() takes one message, as a role and its content or as a dict; got {type(message).__name__}{several}"
        )


def to_event(message: dict[str, Any], format: str | None = None) -> MessageAdded:
    """The event that appends ``message`` (pure): its shape detected, or ``format``, and validated.

    Raises ``InvalidInputError`` naming what is wrong and what was expected; nothing is written.
    """
    return to_event_and_role(message, format)[0]


def to_event_and_role(message: dict[str, Any], format: str | None = None) -> tuple[MessageAdded, str]:
    """:func:`to_event`, and tether's role of the message, which validating it has read (a record
    in a provider's shape leaves its role out: :func:`added_role` reads it again)."""
    if not isinstance(message, dict):
        raise InvalidInputError(f"a message is a dict, got {type(message).__name__}")
    if format is not None and format not in FORMATS:
        raise InvalidInputError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    fmt = format or detect(message)
    if fmt == "tether":
        event = _tether_event(message)
        return event, event.role
    try:
        original = orjson.loads(orjson.dumps(message))  # a copy of our own, and proof that it is JSON
    except TypeError as exc:
        raise InvalidInputError(f"a message must be JSON: {exc}") from None
    shape = read(fmt, original)  # validated now: nothing is written that cannot be read back
    return MessageAdded(format=fmt, original=original), shape.role


def added_role(ev: MessageAdded) -> str:
    """tether's role of the message ``ev`` adds: its own field in tether's form, read from
    ``original`` in a provider's shape (where the record leaves the role out)."""
    if ev.format is None or ev.original is None:
        return ev.role
    return read(ev.format, ev.original).role


@DEFAULT_UPCASTERS.register("MessageAdded", 1)
def _role_read_from_the_original(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 to 2: in a provider's shape the role is read from the original, as a version 2
    record leaves it out (version 1 kept tether's role beside it); tether's form is unchanged."""
    if data.get("format") is None:
        return data
    return {k: v for k, v in data.items() if k != "role"}


def _tether_event(message: dict[str, Any]) -> MessageAdded:
    fields = dict(message)
    role = fields.pop("role", None)
    if role not in ROLES:
        raise InvalidInputError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    content = fields.pop("content", None)
    tool_calls = fields.pop("tool_calls", None)
    if content is None and not (role == "assistant" and tool_calls):
        # Only a message that calls tools may say nothing (and says None: not an empty text).
        raise InvalidInputError(
            f"content of {'an' if role == 'assistant' else 'a'} {role} message is "
            f"{'missing' if 'content' not in message else 'None'}; expected "
            "a string (content may be None only in an assistant message with tool_calls)"
        )
    if content is not None and not isinstance(content, str):
        raise InvalidInputError(
            f"content must be a string in tether's form, got {type(content).__name__}; for content parts "
            "pass a provider's shape (format='openai', 'openai_responses' or 'anthropic')"
        )
    tool_call_id = fields.pop("tool_call_id", None)
    name = fields.pop("name", None)
    if tool_calls is not None:
        if role != "assistant":
            raise InvalidInputError("only an assistant message carries tool_calls")
        try:
            tool_calls = [ToolCallRequest.model_validate(c).model_dump() for c in tool_calls]
        except ValidationError as exc:
            raise InvalidInputError(f"tool_calls must be [{{'id', 'name', 'arguments'}}]: {exc}") from None
    if role == "tool" and not tool_call_id:
        raise InvalidInputError("a tool message needs tool_call_id= (the id of the call it answers)")
    try:
        orjson.dumps(fields)
    except TypeError as exc:
        raise InvalidInputError(f"message metadata must be JSON: {exc}") from None
    return MessageAdded(
        role=role, content=content, tool_calls=tool_calls, tool_call_id=tool_call_id, name=name, meta=fields or None
    )


# ----------------------------------------------------------------------------- reading


def list_messages(records: Iterable[Recorded], shown: dict[int, Message] | None = None) -> dict[int, Message]:
    """Every message still in a session after ``records`` (by seq): added ones, less the removed
    and the cleared. ``shown`` is the listing to go on from (updated in place)."""
    listing: dict[int, Message] = {} if shown is None else shown
    for rec in records:
        event = rec.event
        if isinstance(event, MessageAdded):
            listing[rec.seq] = message_from_event(rec, event)
        elif isinstance(event, MessageRemoved):
            listing.pop(event.seq, None)
        elif isinstance(event, MessagesCleared):
            listing.clear()
    return listing


def message_from_event(rec: Recorded, ev: MessageAdded) -> Message:
    """The :class:`Message` a stored ``MessageAdded`` holds."""
    common: dict[str, Any] = {"seq": rec.seq, "meta": ev.meta or {}, "at": from_epoch(rec.at), "origin": ev.origin}
    if ev.format is None or ev.format == "tether":
        calls = tuple(ToolCallRequest(**c) for c in ev.tool_calls or ())
        original: dict[str, Any] = {"role": ev.role, "content": ev.content}
        if calls:
            original["tool_calls"] = [c.model_dump() for c in calls]
        if ev.tool_call_id is not None:
            original["tool_call_id"] = ev.tool_call_id
        if ev.name is not None:
            original["name"] = ev.name
        return Message(
            role=ev.role,
            content=ev.content or "",
            tool_calls=calls,
            tool_call_id=ev.tool_call_id,
            answers=(ev.tool_call_id,) if ev.role == "tool" and ev.tool_call_id else (),
            name=ev.name,
            original={**original, **(ev.meta or {})},
            **common,
        )
    assert ev.original is not None
    shape = read(ev.format, ev.original)
    answers = tuple(p["id"] if p["kind"] == "tool_result" else p["answers"] for p in _answering(shape.parts))
    return Message(
        role=shape.role,
        content="\n".join(_texts(shape.parts)),
        tool_calls=tuple(_calls(shape.parts)),
        tool_call_id=answers[0] if len(answers) == 1 else None,
        answers=answers,
        name=shape.name,
        format=ev.format,
        original=ev.original,
        **common,
    )


def _answering(parts: list[Part]) -> list[Part]:
    return [p for p in parts if p["kind"] == "tool_result" or (p["kind"] == "other" and "answers" in p)]


def _texts(parts: list[Part]) -> list[str]:
    out: list[str] = []
    for p in parts:
        if p["kind"] == "text":
            out.append(p["text"])
        elif p["kind"] == "tool_result":
            out += _texts(p["parts"])
    return out


def _calls(parts: list[Part]) -> list[ToolCallRequest]:
    out = []
    for p in parts:
        if p["kind"] == "tool_call":
            out.append(ToolCallRequest(id=p["id"], name=p["name"], arguments=p["arguments"] or {}))
        elif p["kind"] == "other" and "call_id" in p:
            out.append(ToolCallRequest(id=p["call_id"], name=p.get("name") or "", arguments={}))
    return out


def parts_of(message: Message) -> tuple[str, list[Part]]:
    """A message's parts in neutral terms (see ``shapes``), and its role as its provider spelled it."""
    if message.format != "tether":
        shape = read(message.format, message.original)
        return shape.source_role, shape.parts
    what = "a tether message's text"
    if message.role == "tool":
        result = tool_result(
            message.tool_call_id or "",
            [text(message.content, what, plain=True)],
            plain=True,
            is_error=False,
            what="a tether tool message",
        )
        return "tool", [result]
    parts: list[Part] = []
    if message.content or not message.tool_calls:
        parts.append(text(message.content, what, plain=True))
    for c in message.tool_calls:
        parts.append(tool_call(c.id, c.name, c.arguments, None, "a tether tool call"))
    return message.role, parts


def fold_view(
    events: Iterable[Recorded], view: SessionView | None = None, made: Mapping[int, Message] | None = None
) -> SessionView:
    """The session's view after these events (pure). ``made``: the messages of these same records
    already read, by seq (as :func:`list_messages` left them), taken instead of read again."""
    system = list(view.system) if view else []
    recent = list(view.recent) if view else []
    summary = view.summary if view else None
    closed = view.closed if view else False
    session_id = view.session_id if view else ""
    user_id = view.user_id if view else None
    version = view.version if view else 0
    for rec in events:
        ev = rec.event
        version = rec.seq
        if isinstance(ev, SessionOpened):
            session_id, user_id = ev.session_id, ev.user_id
        elif isinstance(ev, MessageAdded):
            message = made.get(rec.seq) if made is not None else None
            if message is None:
                message = message_from_event(rec, ev)
            (system if message.role == "system" else recent).append(message)
        elif isinstance(ev, MessageRemoved):
            system = [m for m in system if m.seq != ev.seq]
            recent = [m for m in recent if m.seq != ev.seq]
        elif isinstance(ev, MessagesCleared):
            system, recent, summary = [], [], None
        elif isinstance(ev, SummaryAdded):
            summary = summary_from_event(rec, ev)
            recent = [m for m in recent if m.seq > ev.covers_to]
        elif isinstance(ev, SessionClosed):
            closed = True
    # Built from records already validated: constructed, not validated again (that would cost a
    # pass over every message in the view on every fold).
    return SessionView.model_construct(
        session_id=session_id,
        user_id=user_id,
        system=tuple(system),
        summary=summary,
        recent=tuple(recent),
        closed=closed,
        version=version,
    )


def fold_history(events: Sequence[Recorded]) -> SessionView:
    """The session's view after its whole stream, leaving out the summaries withdrawn since (pure)."""
    withdrawn = {r.event.seq for r in events if isinstance(r.event, SummaryWithdrawn)}
    if not withdrawn:
        return fold_view(events)
    return fold_view(r for r in events if not (isinstance(r.event, SummaryAdded) and r.seq in withdrawn))


def standing_summary(events: Iterable[Recorded]) -> Summary | None:
    """The newest summary that stands after a session's whole stream (pure): not withdrawn, not cleared."""
    events = list(events)
    withdrawn = {r.event.seq for r in events if isinstance(r.event, SummaryWithdrawn)}
    standing: Summary | None = None
    for rec in events:
        if isinstance(rec.event, SummaryAdded) and rec.seq not in withdrawn:
            standing = summary_from_event(rec, rec.event)
        elif isinstance(rec.event, MessagesCleared):
            standing = None
    return standing


def withdraws(events: Iterable[Recorded]) -> bool:
    """Whether these events undo a compaction (so a view must be folded again from the start)."""
    return any(isinstance(r.event, SummaryWithdrawn) for r in events)


def summary_from_event(rec: Recorded, ev: SummaryAdded) -> Summary:
    at = from_epoch(rec.at)
    return Summary(
        seq=rec.seq, text=ev.text, covers_from=ev.covers_from, covers_to=ev.covers_to, at=at, origin=ev.origin
    )
