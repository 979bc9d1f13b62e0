"""Sessions: an append-only conversation in the store, its window, and compaction.

A session is an append-only stream of messages in the same store as tasks.
``session.window(max_tokens)`` is what goes into the next model call: system
messages, the newest summary, and the most recent turns that fit. Compaction
folds older turns into a summary; originals are never deleted. Opening a session,
appending to it and reading its window cost the same at any length: a session is
read from its newest end (see ``_incremental``), never from its first message.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from tether.conversation._incremental import VIEW_SCHEMA, IncrementalView, Outline
from tether.conversation.messages import (
    Message,
    MessageAdded,
    MessageRemoved,
    MessagesCleared,
    SessionClosed,
    SessionOpened,
    SessionView,
    Summary,
    SummaryAdded,
    SummaryWithdrawn,
    check_one_message,
    list_messages,
    standing_summary,
    summary_from_event,
    to_event,
)
from tether.conversation.shapes import FORMATS
from tether.conversation.window import TokenCounter, Window, as_compacted, default_counter, turns
from tether.errors import ConflictError, InvalidInputError, TaskNotFoundError, TetherError
from tether.events import Event, Recorded, from_epoch
from tether.log import TaskLog
from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream
from tether.telemetry import hooks as telemetry

__all__ = [
    "Session",
    "SessionInfo",
    "Summarizer",
    "delete_session",
    "extractive_summarizer",
    "list_sessions",
    "open_session",
]

SESSION_TYPE = "tether.session"


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


def summary_of(view: SessionView, summarize: Summarizer, keep_last: int) -> SummaryAdded | None:
    """The summary a compaction of ``view`` appends: everything before the last ``keep_last`` turns
    (and the previous summary) folded by ``summarize``; ``None`` when there is nothing to fold."""
    groups = turns(view.recent)
    if len(groups) <= keep_last:
        return None
    folded = [m for group in groups[: len(groups) - keep_last] for m in group]
    # Tool results whose call was summarized earlier count as covered too.
    covers_to = max(m.seq for m in view.recent if m.seq <= folded[-1].seq)
    text = summarize(folded, view.summary.text if view.summary else None)
    covers_from = view.summary.covers_from if view.summary else folded[0].seq
    return SummaryAdded(text=text, covers_from=covers_from, covers_to=covers_to)


def write_view_snapshot(log: TaskLog, stream: str, view: SessionView) -> None:
    """Cache a session's view as of ``view`` (its outline: see ``_incremental``), as a compaction does."""
    log.put_stream_snapshot(stream, view.version, VIEW_SCHEMA, Outline.from_view(view).to_json())


def stream_id(session_id: str) -> str:
    """The id of the stream that holds session ``session_id``."""
    return _stream_id(session_id)


def _stream_id(session_id: str) -> str:
    return f"session:{session_id}"


class Session:
    """One conversation: append-only messages, a context window, compaction.

    One object may be used by several threads at once (each with an event loop of its own, if it
    likes): its view holds exactly the stored messages, in the stored order, each once, whatever
    its threads, other objects and other processes append meanwhile.

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
        self._end = IncrementalView(self._stream, log.snapshots.every)
        # One Session object may serve several threads at once (each with an event loop of its own,
        # as the Agents SDK's Runner.run_sync makes): the view is read and folded under this lock,
        # so each event is folded once, in order. Another writer's events (another object, another
        # process) are found by the next refresh and fold the same way.
        self._lock = threading.RLock()
        # An existing session opens with two reads (its outline snapshot, the events after it); a
        # new one is created first (and if another process creates it at the same moment, fine).
        if not self._end.load():
            self._stream.create(
                SessionOpened(session_id=session_id, user_id=user_id), user_id=user_id, session_id=session_id
            )
            self._end.load()
        self.user_id = self._end.outline.user_id

    # -- reading ----------------------------------------------------------------------
    def view(self) -> SessionView:
        """The whole current view: system messages, the newest summary and every message after it.

        Its cost grows with the messages after the summary; ``window()`` and ``add()`` do not need it.
        """
        with self._lock:
            self._end.refresh()
            return self._end.view()

    @property
    def closed(self) -> bool:
        with self._lock:
            self._end.refresh()
            return self._end.outline.closed

    def messages(self, since: int | None = None, limit: int | None = None) -> list[Message]:
        """Every message still in the session (summaries never remove any), oldest first, each with
        its ``format`` and its ``original`` as it was added.

        ``since``: only messages with a larger seq. ``limit``: at most that many, the oldest of them.
        """
        shown = list_messages(self._stream.read(after=0))
        result = [m for seq, m in sorted(shown.items()) if since is None or seq > since]
        return result[:limit] if limit is not None else result

    def compacted(self) -> list[Message]:
        """Every message still in the session as compaction leaves it, oldest first: the messages the
        newest summary folded are replaced by that summary (one system message, in the place of the
        first of them); every other message is as it was added, in its place. Without a summary, the
        same as :meth:`messages`. Reads the session's whole stream, once.
        """
        records = self._stream.read(after=0)
        shown = list_messages(records)
        return as_compacted([shown[seq] for seq in sorted(shown)], standing_summary(records))

    def summaries(self) -> list[Summary]:
        """Every summary that stands (not withdrawn by :meth:`undo_compaction`), oldest first."""
        records = self._stream.read()
        withdrawn = {r.event.seq for r in records if isinstance(r.event, SummaryWithdrawn)}
        return [
            summary_from_event(r, r.event)
            for r in records
            if isinstance(r.event, SummaryAdded) and r.seq not in withdrawn
        ]

    def window(self, max_tokens: int, keep_last: int = 6, counter: TokenCounter | None = None) -> Window:
        """What goes into the next model call: system messages, the newest summary, then the most recent
        turns that fit in ``max_tokens`` — never fewer than ``keep_last`` turns, never a tool result
        without the assistant message that called it."""
        if max_tokens < 1 or keep_last < 0:
            raise InvalidInputError(f"max_tokens must be >= 1 and keep_last >= 0, got {max_tokens}, {keep_last}")
        with self._lock:
            self._end.refresh()
            return self._end.window(max_tokens, keep_last, counter or self._counter or default_counter())

    # -- writing ----------------------------------------------------------------------
    def add(
        self, message: str | dict[str, Any], content: Any = None, *, format: str | None = None, **meta: Any
    ) -> Message:
        """Append one message: a dict in any accepted shape, or a role and its content.

        ``add({"role": "user", "content": [...]})`` takes an OpenAI Chat or Anthropic message or an
        OpenAI Responses item verbatim (its shape detected, or named by ``format=``: ``"openai"``,
        ``"openai_responses"``, ``"anthropic"``, ``"tether"``); keywords are metadata.
        ``add(role, content, **fields)`` is the short form: ``tool_calls=[{"id", "name", "arguments"}]``
        on an assistant message, ``tool_call_id=`` on a tool result, ``name=``; any other keyword is
        JSON metadata. ``content`` is required: only an assistant message with ``tool_calls`` may
        have ``None`` (it is stored as ``None``); any other message without content is refused.
        """
        check_one_message(message)
        if isinstance(message, dict):
            if content is not None:
                raise InvalidInputError("add(message_dict) takes no content argument: the dict is the message")
            return self._add([message], format, meta)[0]
        return self._add([{"role": message, "content": content, **meta}], format, {})[0]

    def add_many(
        self, messages: Sequence[dict[str, Any]], *, format: str | None = None, expected_version: int | None = None
    ) -> list[Message]:
        """Append several messages atomically, in order (all or none), each in any accepted shape.

        ``expected_version``: append only if the session is still at that :attr:`version`, else raise
        :class:`~tether.errors.ConflictError` and append nothing (for a writer whose messages depend
        on what the session held when it looked; without it, appends of two writers both land)."""
        return self._add(messages, format, {}, expected_version)

    @property
    def version(self) -> int:
        """The version of the session's record now (it moves with every write of any writer)."""
        with self._lock:
            self._end.refresh()
            return self._end.outline.version

    def _add(
        self,
        messages: Sequence[dict[str, Any]],
        format: str | None,
        meta: dict[str, Any],
        expected_version: int | None = None,
    ) -> list[Message]:
        if format is not None and format not in FORMATS:
            raise InvalidInputError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        events = []
        for i, message in enumerate(messages):
            try:
                event = to_event(message, format)
            except InvalidInputError as exc:
                where = f"messages[{i}]: " if len(messages) > 1 else ""
                raise InvalidInputError(f"{where}{exc}") from None
            events.append(dataclasses.replace(event, meta={**(event.meta or {}), **meta}) if meta else event)
        if meta:
            try:
                orjson.dumps(meta)
            except TypeError as exc:
                raise InvalidInputError(f"message metadata must be JSON: {exc}") from None
        if not events:
            return []
        added = self._append_messages(events, expected_version)
        telemetry.conversation_appended(len(added))
        self._maybe_compact()
        return added

    def _append_messages(self, events: list[MessageAdded], expected_version: int | None) -> list[Message]:
        end = self._end

        def append() -> list[Message]:
            end.refresh()
            if end.outline.closed:
                raise InvalidInputError(f"session {self.id!r} is closed")
            version = end.outline.version
            if expected_version is not None and version != expected_version:
                raise ConflictError(self.id, expected=expected_version, actual=version)
            now = time.time()  # the stored time, so the cached view's messages equal the stored ones
            self._stream.append(events, version, at=now)
            added = end.fold([Recorded(version + i, now, e) for i, e in enumerate(events, 1)])
            end.maybe_snapshot()
            return added

        with self._lock:  # this object's threads append one at a time: none folds another's append
            if expected_version is not None:
                return append()  # at the version the caller named: a conflict is theirs to see
            # Another writer may append at the same moment: both land, in some order.
            return retry_on_conflict(append, stream=self.id, tries=100)

    def pop(self) -> Message | None:
        """Remove the last message (undo); it no longer shows in ``messages()`` or windows."""

        def remove() -> Message | None:
            self._end.refresh()
            last = self._end.last()
            if self._end.outline.summary is not None and not self._end.tail:
                # Every recent message is one a summary covers: the newest still in the session is
                # among those (they stay, summaries never remove any), which the view does not hold.
                shown = self.messages()
                last = shown[-1] if shown else None
            if last is None:
                return None
            self._stream.append([MessageRemoved(seq=last.seq)], self._end.outline.version)
            return last

        with self._lock:
            return retry_on_conflict(remove, stream=self.id, tries=100)

    def clear(self) -> None:
        """Hide every message (and summary) so far; the session goes on, empty."""
        self._retry(lambda: [MessagesCleared()])

    def close(self) -> None:
        """Close the session: it takes no more messages."""
        if not self.closed:
            self._retry(lambda: [SessionClosed()], status="closed")

    def compact(self, summarizer: Summarizer | None = None, keep_last: int = 6) -> Summary | None:
        """Fold everything before the last ``keep_last`` turns (and the previous summary) into a new
        summary through ``summarizer(messages, previous_summary) -> str``; originals stay stored."""
        summarize = summarizer or self._summarizer or extractive_summarizer

        def fold_in() -> Summary | None:
            view = self.view()
            # Summarized outside the lock (an LLM may take seconds): the append below lands only at
            # the version summarized, so a write that came in between makes it summarize again.
            summary = summary_of(view, summarize, keep_last)
            if summary is None:
                return None
            with self._lock:
                self._stream.append([summary], view.version)
                telemetry.compacted()
                self._end.refresh()
                self._end.snapshot()
                return self._end.outline.summary

        return retry_on_conflict(fold_in, stream=self.id, tries=100)

    def undo_compaction(self) -> Summary | None:
        """Withdraw the newest summary: the messages it covered (never deleted) are in the window
        again, and the summary before it, if any, stands again. Returns the withdrawn summary, or
        ``None`` when there is none. The summary itself stays in the stream, marked withdrawn."""

        def withdraw() -> Summary | None:
            view = self.view()
            if view.summary is None:
                return None
            self._stream.append([SummaryWithdrawn(seq=view.summary.seq)], view.version)
            write_view_snapshot(self._log, self._stream.id, self.view())  # later loads start from here
            return view.summary

        with self._lock:
            return retry_on_conflict(withdraw, stream=self.id, tries=100)

    def _maybe_compact(self) -> None:
        if self._compact_over is None:
            return
        with self._lock:
            heavy = self._end.recent_tokens(self._counter or default_counter()) > self._compact_over
        if heavy:
            self.compact()

    def _retry(self, make: Callable[[], list[Event]], status: str | None = None) -> None:
        def append() -> None:
            self._end.refresh()
            self._stream.append(make(), self._end.outline.version, status=status)

        with self._lock:
            retry_on_conflict(append, stream=self.id, tries=100)


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
            created_at=from_epoch(r.created_at),
            updated_at=from_epoch(r.updated_at),
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
