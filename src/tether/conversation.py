"""Sessions: the conversation, the context window, compaction, and renderers for model APIs.

A session is an append-only stream of messages in the same store as tasks.
``session.window(max_tokens)`` is what goes into the next model call: system
messages, the newest summary, and the most recent turns that fit. Compaction
folds older turns into a summary; originals are never deleted. The window is
computed from a cached view (the newest summary, the turns after it), so its
cost does not grow with the length of the stored history once a summary exists.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from tether._streams import Stream
from tether.errors import ConflictError, InvalidInputError, TaskNotFoundError, TetherError
from tether.events import Event, Recorded, _event, _ts
from tether.log import TaskLog, checksum
from tether.store import SnapshotRow

__all__ = [
    "EstimateCounter",
    "Message",
    "Session",
    "SessionInfo",
    "Summary",
    "TokenCounter",
    "ToolCallRequest",
    "Window",
    "default_counter",
    "extractive_summarizer",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES = ("system", "user", "assistant", "tool")
SESSION_TYPE = "tether.session"
_VIEW_VERSION = 1


# ----------------------------------------------------------------------------- events


@_event
class SessionOpened(Event):
    session_id: str
    user_id: str | None = None


@_event
class MessageAdded(Event):
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    meta: dict[str, Any] | None = None
    origin: str | None = None


@_event
class MessageRemoved(Event):
    seq: int


@_event
class MessagesCleared(Event):
    pass


@_event
class SummaryAdded(Event):
    text: str
    covers_from: int
    covers_to: int
    origin: str | None = None


@_event
class SessionClosed(Event):
    pass


# ----------------------------------------------------------------------------- records


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCallRequest(_Record):
    """A tool call an assistant message asks for; its result comes back in a ``tool`` message."""

    id: str
    name: str
    arguments: dict[str, Any] = {}


class Message(_Record):
    seq: int
    role: Role
    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    meta: dict[str, Any] = {}
    at: datetime


class Summary(_Record):
    """A summary of the messages with ``covers_from <= seq <= covers_to`` (and of the summary before it)."""

    seq: int
    text: str
    covers_from: int
    covers_to: int
    at: datetime


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


def _message(rec: Recorded, ev: MessageAdded) -> Message:
    calls = tuple(ToolCallRequest(**c) for c in ev.tool_calls or ())
    return Message(
        seq=rec.seq,
        role=ev.role,
        content=ev.content,
        tool_calls=calls,
        tool_call_id=ev.tool_call_id,
        name=ev.name,
        meta=ev.meta or {},
        at=_ts(rec.at),
    )


def fold_view(events: Iterable[Recorded], view: SessionView | None = None) -> SessionView:
    """The session's view after these events (pure)."""
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
            (system if ev.role == "system" else recent).append(_message(rec, ev))
        elif isinstance(ev, MessageRemoved):
            system = [m for m in system if m.seq != ev.seq]
            recent = [m for m in recent if m.seq != ev.seq]
        elif isinstance(ev, MessagesCleared):
            system, recent, summary = [], [], None
        elif isinstance(ev, SummaryAdded):
            summary = Summary(
                seq=rec.seq, text=ev.text, covers_from=ev.covers_from, covers_to=ev.covers_to, at=_ts(rec.at)
            )
            recent = [m for m in recent if m.seq > ev.covers_to]
        elif isinstance(ev, SessionClosed):
            closed = True
    return SessionView(
        session_id=session_id,
        user_id=user_id,
        system=tuple(system),
        summary=summary,
        recent=tuple(recent),
        closed=closed,
        version=version,
    )


# ----------------------------------------------------------------------------- tokens


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens in a text. ``name`` says which counter it is (a window reports it)."""

    name: str

    def count(self, text: str) -> int: ...


class EstimateCounter:
    """An estimate: one token per four characters, rounded up. Used when tiktoken is not available."""

    name = "estimate (4 characters per token)"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / 4)


class TiktokenCounter:
    def __init__(self, encoding: Any, label: str) -> None:
        self._encoding = encoding
        self.name = f"tiktoken {label}"

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


_DEFAULT: TokenCounter | None = None


def default_counter() -> TokenCounter:
    """tiktoken's ``cl100k_base`` when tiktoken and its encoding files are present, else the estimate."""
    global _DEFAULT
    if _DEFAULT is None:
        try:
            import tiktoken  # type: ignore[import-not-found,unused-ignore]

            _DEFAULT = TiktokenCounter(tiktoken.get_encoding("cl100k_base"), "cl100k_base")
        except Exception:  # not installed, or its encoding files cannot be had offline
            _DEFAULT = EstimateCounter()
    return _DEFAULT


def message_tokens(message: Message, counter: TokenCounter) -> int:
    """A message's tokens: its content, its tool calls, and a few for the framing every API adds."""
    text = message.content
    if message.tool_calls:
        text += orjson.dumps([c.model_dump() for c in message.tool_calls]).decode()
    return counter.count(text) + 4


# ----------------------------------------------------------------------------- the window


def turns(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages grouped into turns: an assistant message with its tool calls' results is one turn.

    A tool result whose assistant message is not among ``messages`` (it was summarized) is
    dropped: a model API refuses a tool result without the call it answers.
    """
    groups: list[list[Message]] = []
    open_calls: set[str] = set()
    for m in messages:
        if m.role == "tool":
            if groups and m.tool_call_id in open_calls:
                groups[-1].append(m)
            continue
        groups.append([m])
        open_calls = {c.id for c in m.tool_calls} if m.role == "assistant" else set()
    return groups


@dataclass(frozen=True)
class Window:
    """What goes into the next model call, with its token count and the counter that made it."""

    messages: tuple[Message, ...]
    summary: Summary | None
    tokens: int
    max_tokens: int
    counter: str
    dropped: int
    """Messages after the summary that did not fit."""

    def to_openai(self) -> list[dict[str, Any]]:
        """OpenAI Chat Completions ``messages``: system first, tool calls as ``tool_calls``."""
        out: list[dict[str, Any]] = []
        for m in self.messages:
            if m.role == "tool":
                out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content})
            elif m.role == "assistant" and m.tool_calls:
                item: dict[str, Any] = {
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": orjson.dumps(c.arguments).decode()},
                        }
                        for c in m.tool_calls
                    ],
                }
                out.append(item)
            else:
                item = {"role": m.role, "content": m.content}
                if m.name and m.role in ("user", "assistant"):
                    item["name"] = m.name
                out.append(item)
        return out

    def to_anthropic(self) -> dict[str, Any]:
        """Anthropic Messages: ``{"system": ..., "messages": [...]}``; tool calls as ``tool_use`` blocks,
        results as ``tool_result`` blocks in a user turn; consecutive turns of one role merged."""
        system = "\n\n".join(m.content for m in self.messages if m.role == "system")
        messages: list[dict[str, Any]] = []

        def push(role: str, blocks: list[dict[str, Any]]) -> None:
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": role, "content": blocks})

        for m in self.messages:
            if m.role == "system":
                continue
            if m.role == "tool":
                push("user", [{"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.content}])
            elif m.role == "assistant":
                blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
                blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in m.tool_calls]
                push("assistant", blocks or [{"type": "text", "text": ""}])
            else:
                push("user", [{"type": "text", "text": m.content}])
        if messages and messages[0]["role"] != "user":
            messages.insert(0, {"role": "user", "content": [{"type": "text", "text": "(conversation continues)"}]})
        result: dict[str, Any] = {"messages": messages}
        if system:
            result["system"] = system
        return result


def build_window(view: SessionView, max_tokens: int, keep_last: int, counter: TokenCounter) -> Window:
    fixed = list(view.system)
    if view.summary is not None:
        fixed.append(
            Message(
                seq=view.summary.seq,
                role="system",
                at=view.summary.at,
                content=f"Summary of the earlier conversation:\n{view.summary.text}",
            )
        )
    budget = max_tokens - sum(message_tokens(m, counter) for m in fixed)
    groups = turns(view.recent)
    chosen: list[list[Message]] = []
    for group in reversed(groups):
        cost = sum(message_tokens(m, counter) for m in group)
        if len(chosen) < max(keep_last, 1) or cost <= budget:
            chosen.append(group)
            budget -= cost
        else:
            break
    chosen.reverse()
    picked = [m for group in chosen for m in group]
    messages = tuple(fixed + picked)
    return Window(
        messages=messages,
        summary=view.summary,
        tokens=sum(message_tokens(m, counter) for m in messages),
        max_tokens=max_tokens,
        counter=counter.name,
        dropped=sum(len(g) for g in groups) - len(picked),
    )


# ----------------------------------------------------------------------------- summaries

Summarizer = Callable[[list[Message], str | None], str]


def extractive_summarizer(messages: list[Message], previous: str | None, *, max_chars: int = 2000) -> str:
    """A plain, offline summarizer: the first sentence of each user and assistant message, newest kept
    when it runs long. Use an LLM in production: ``session.compact(my_llm_summarizer)``."""
    lines = [previous] if previous else []
    for m in messages:
        if m.role in ("user", "assistant") and m.content.strip():
            first = re.split(r"(?<=[.!?])\s", m.content.strip(), maxsplit=1)[0]
            lines.append(f"{m.role}: {first[:200]}")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else "…" + text[-(max_chars - 1) :]


# ----------------------------------------------------------------------------- sessions


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    user_id: str | None
    version: int
    """How many events the session holds (messages, removals, summaries)."""
    closed: bool
    created_at: datetime
    updated_at: datetime


def _stream_id(session_id: str) -> str:
    return f"session:{session_id}"


class Session:
    """One conversation: append-only messages, a context window, compaction.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> chat = app.session("s1", user_id="ada")
        >>> _ = chat.add("system", "You book trips.")
        >>> _ = chat.add("user", "Fly me to NYC on Monday.")
        >>> [m["role"] for m in chat.window(max_tokens=1000).to_openai()]
        ['system', 'user']
    """

    def __init__(
        self,
        log: TaskLog,
        session_id: str,
        *,
        user_id: str | None,
        counter: TokenCounter | None,
        summarizer: Summarizer | None,
        compact_when_tokens_over: int | None,
    ) -> None:
        self._log = log
        self.id = session_id
        self._stream = Stream(log, _stream_id(session_id), SESSION_TYPE)
        self._counter = counter
        self._summarizer = summarizer
        self._compact_over = compact_when_tokens_over
        if compact_when_tokens_over is not None and summarizer is None:
            raise InvalidInputError("compact_when_tokens_over= needs a summarizer= to compact with")
        self._stream.create(
            SessionOpened(session_id=session_id, user_id=user_id), user_id=user_id, session_id=session_id
        )
        self._view: SessionView | None = None
        self.user_id = self.view().user_id

    # -- reading ----------------------------------------------------------------------
    def view(self) -> SessionView:
        """The current view: from the newest snapshot (written at compaction) plus the events after it."""
        if self._view is None:
            self._view = self._load_view()
        else:
            newer = self._stream.read(after=self._view.version)
            if newer:
                self._view = fold_view(newer, self._view)
        return self._view

    def _load_view(self) -> SessionView:
        store, tenant = self._log.store, self._log.tenant
        snap = store.get_snapshot(tenant, self._stream.id, at_most=2**31 - 1)
        base = None
        if snap is not None and snap.schema == _VIEW_VERSION and checksum(snap.data) == snap.checksum:
            try:
                base = SessionView.model_validate_json(snap.data)
            except ValidationError:
                base = None
        return fold_view(self._stream.read(after=base.version if base else 0), base)

    @property
    def closed(self) -> bool:
        return self.view().closed

    def messages(self, since: int | None = None, limit: int | None = None) -> list[Message]:
        """Every message still in the session (summaries never remove any), oldest first.

        ``since``: only messages with a larger seq. ``limit``: at most that many, the oldest of them.
        """
        shown: dict[int, Message] = {}
        for rec in self._stream.read(after=0):
            ev = rec.event
            if isinstance(ev, MessageAdded):
                shown[rec.seq] = _message(rec, ev)
            elif isinstance(ev, MessageRemoved):
                shown.pop(ev.seq, None)
            elif isinstance(ev, MessagesCleared):
                shown.clear()
        result = [m for seq, m in sorted(shown.items()) if since is None or seq > since]
        return result[:limit] if limit is not None else result

    def summaries(self) -> list[Summary]:
        return [
            Summary(
                seq=r.seq, text=r.event.text, covers_from=r.event.covers_from, covers_to=r.event.covers_to, at=_ts(r.at)
            )
            for r in self._stream.read()
            if isinstance(r.event, SummaryAdded)
        ]

    def window(self, max_tokens: int, keep_last: int = 6, counter: TokenCounter | None = None) -> Window:
        """What goes into the next model call: system messages, the newest summary, then the most recent
        turns that fit in ``max_tokens`` — never fewer than ``keep_last`` turns, never a tool result
        without the assistant message that called it."""
        if max_tokens < 1 or keep_last < 0:
            raise InvalidInputError(f"max_tokens must be >= 1 and keep_last >= 0, got {max_tokens}, {keep_last}")
        return build_window(self.view(), max_tokens, keep_last, counter or self._counter or default_counter())

    # -- writing ----------------------------------------------------------------------
    def add(self, role: Role, content: str, **meta: Any) -> Message:
        """Append one message. ``tool_calls=[{"id", "name", "arguments"}]`` on an assistant message,
        ``tool_call_id=`` on a tool result, ``name=``; any other keyword is JSON metadata."""
        return self.add_many([{"role": role, "content": content, **meta}])[0]

    def add_many(self, messages: Sequence[dict[str, Any]]) -> list[Message]:
        """Append several messages atomically, in order (all or none)."""
        events = [to_event(m) for m in messages]
        if not events:
            return []
        for _ in range(100):  # another process may append at the same moment: both land, in some order
            view = self.view()
            if view.closed:
                raise InvalidInputError(f"session {self.id!r} is closed")
            try:
                version = self._stream.append(events, view.version)
            except ConflictError:
                continue
            self._view = fold_view([Recorded(view.version + i, time.time(), e) for i, e in enumerate(events, 1)], view)
            added = [m for m in (*self._view.system, *self._view.recent) if m.seq > view.version]
            added.sort(key=lambda m: m.seq)
            assert version == self._view.version
            self._maybe_compact()
            return added
        raise ConflictError(self.id, expected=self.view().version, actual=None)

    def pop(self) -> Message | None:
        """Remove the last message (undo); it no longer shows in ``messages()`` or windows."""
        for _ in range(100):
            view = self.view()
            candidates = [*view.system, *view.recent]
            if not candidates:
                return None
            last = max(candidates, key=lambda m: m.seq)
            try:
                self._stream.append([MessageRemoved(seq=last.seq)], view.version)
            except ConflictError:
                continue
            return last
        raise ConflictError(self.id, expected=self.view().version, actual=None)

    def clear(self) -> None:
        """Hide every message (and summary) so far; the session goes on, empty."""
        self._retry(lambda view: [MessagesCleared()])

    def close(self) -> None:
        """Close the session: it takes no more messages."""
        if not self.view().closed:
            self._retry(lambda view: [SessionClosed()], status="closed")

    def compact(self, summarizer: Summarizer | None = None, keep_last: int = 6) -> Summary | None:
        """Fold everything before the last ``keep_last`` turns (and the previous summary) into a new
        summary through ``summarizer(messages, previous_summary) -> str``; originals stay stored."""
        summarize = summarizer or self._summarizer or extractive_summarizer
        for _ in range(100):
            view = self.view()
            groups = turns(view.recent)
            if len(groups) <= keep_last:
                return None
            folded = [m for group in groups[: len(groups) - keep_last] for m in group]
            # Tool results whose call was summarized earlier count as covered too.
            covers_to = max(m.seq for m in view.recent if m.seq <= folded[-1].seq)
            text = summarize(folded, view.summary.text if view.summary else None)
            covers_from = view.summary.covers_from if view.summary else folded[0].seq
            try:
                self._stream.append(
                    [SummaryAdded(text=text, covers_from=covers_from, covers_to=covers_to)], view.version
                )
            except ConflictError:
                continue
            compacted = self.view()
            write_view_snapshot(self._log, self._stream.id, compacted)
            return compacted.summary
        raise ConflictError(self.id, expected=self.view().version, actual=None)

    def _maybe_compact(self) -> None:
        if self._compact_over is None:
            return
        counter = self._counter or default_counter()
        view = self.view()
        if sum(message_tokens(m, counter) for m in view.recent) > self._compact_over:
            self.compact()

    def _retry(self, make: Callable[[SessionView], list[Event]], status: str | None = None) -> None:
        for _ in range(100):
            view = self.view()
            try:
                self._stream.append(make(view), view.version, status=status)
                return
            except ConflictError:
                continue
        raise ConflictError(self.id, expected=self.view().version, actual=None)


def write_view_snapshot(log: TaskLog, stream_id: str, view: SessionView) -> None:
    """Cache a session's view (written at each compaction, so a window reads from the newest summary on)."""
    data = view.model_dump_json()
    log.store.put_snapshot(log.tenant, stream_id, SnapshotRow(view.version, _VIEW_VERSION, checksum(data), data))


def to_event(message: dict[str, Any]) -> MessageAdded:
    if not isinstance(message, dict):
        raise InvalidInputError(f"a message is a dict with role and content, got {type(message).__name__}")
    fields = dict(message)
    role = fields.pop("role", None)
    if role not in ROLES:
        raise InvalidInputError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    content = fields.pop("content", "")
    if not isinstance(content, str):
        raise InvalidInputError(f"content must be a string, got {type(content).__name__}")
    tool_calls = fields.pop("tool_calls", None)
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


def open_session(
    log: TaskLog,
    session_id: str | None,
    *,
    user_id: str | None,
    counter: TokenCounter | None,
    summarizer: Summarizer | None,
    compact_when_tokens_over: int | None,
) -> Session:
    return Session(
        log,
        session_id or uuid.uuid4().hex,
        user_id=user_id,
        counter=counter,
        summarizer=summarizer,
        compact_when_tokens_over=compact_when_tokens_over,
    )


def list_sessions(log: TaskLog, *, user_id: str | None, limit: int, offset: int) -> list[SessionInfo]:
    from tether.store import TaskFilter

    rows = log.store.list_tasks(log.tenant, TaskFilter(type=SESSION_TYPE, user_id=user_id), limit=limit, offset=offset)
    return [
        SessionInfo(
            session_id=r.task_id.removeprefix("session:"),
            user_id=r.user_id,
            version=r.version,
            closed=r.status == "closed",
            created_at=_ts(r.created_at),
            updated_at=_ts(r.updated_at),
        )
        for r in rows
    ]


def delete_session(log: TaskLog, session_id: str, *, cascade: bool) -> int:
    """Delete a session and its messages; return how many tasks it leaves orphaned (or deleted, with cascade)."""
    from tether.store import TaskFilter

    stream = _stream_id(session_id)
    if log.store.get_task(log.tenant, stream) is None:
        raise TaskNotFoundError(stream, tenant=log.tenant)
    linked = log.store.list_tasks(log.tenant, TaskFilter(session_id=session_id), limit=1_000_000)
    if linked and not cascade:
        raise TetherError(
            f"session {session_id!r} has {len(linked)} task(s) linked to it "
            f"({', '.join(r.task_id for r in linked[:5])}{'…' if len(linked) > 5 else ''}); "
            "delete with cascade=True to delete them too, or keep the session"
        )
    for row in linked:
        log.store.delete_task(log.tenant, row.task_id)
    log.store.delete_task(log.tenant, stream)
    return len(linked)
