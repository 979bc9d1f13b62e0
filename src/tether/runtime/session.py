"""The conversation inside a task: ``ctx.session``.

A task's reads and appends of its conversation are part of the task's record,
so a resumed task sees the conversation it saw and appends each message once:

* every operation gets an ordinal ``s`` in the order the code issues it (like a
  call's ``n``);
* a **read** (``messages``, ``window``) records the session version it saw
  (:class:`~tether.events.SessionRead`), written with the task's next append —
  a read nothing was written after needs no record, it is simply read again;
* an **append** (``add``, ``add_many``, ``compact``) writes the messages to the
  session tagged with an ``origin`` (task and ordinal), then records which
  session events they became (:class:`~tether.events.SessionWritten`). A run
  that stopped between the two leaves the tagged messages in the session: the
  next run finds them by their origin and records them instead of appending
  them again.

On replay each operation is answered from its record: the view of the session
at the recorded version. Appends made outside the task (a person's new
message) land in the session's one total order and show from the task's next
read on. A fork or a rewind of the task gets its own branch of the session at
the version the task had reached (copy-on-write, like task forks), so the
parent's conversation is untouched.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.conversation import (
    SESSION_TYPE,
    Message,
    SessionOpened,
    SessionView,
    Summarizer,
    Summary,
    TokenCounter,
    Window,
    as_compacted,
    build_window,
    check_one_message,
    default_counter,
    extractive_summarizer,
    fold_history,
    fold_view,
    list_messages,
    stream_id,
    summary_of,
    withdraws,
    write_view_snapshot,
)
from tether.conversation.messages import to_event_and_role
from tether.errors import ConflictError, InvalidInputError, NonDeterminismError, TaskNotFoundError, TetherError
from tether.events import Event, Recorded, SessionRead, SessionWritten
from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream
from tether.runtime._replay import describe
from tether.telemetry import hooks as telemetry

if TYPE_CHECKING:
    from tether.log import TaskLog
    from tether.model import TaskState
    from tether.runtime._recording import Recorder

__all__ = ["TaskSession", "fork_conversation"]

_APPEND_TRIES = 100


class TaskSession:
    """The task's conversation (``ctx.session``): reads and appends are part of the task's record.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> @app.task
        ... def chat(ctx: tether.TaskContext, question: str) -> int:
        ...     ctx.session.add("user", question)
        ...     ctx.session.add("assistant", "Paris.")
        ...     return len(ctx.session.messages())
        >>> app.run(chat, "Capital of France?", task_id="c1").output
        2
        >>> [m.content for m in app.session("c1").messages()]
        ['Capital of France?', 'Paris.']
    """

    def __init__(self, recorder: Recorder, session_id: str) -> None:
        # Weakly: the context owns this object and the run's recorder, and a reference back would
        # keep every finished recorder (with the record it walked) alive until the cycle collector
        # found it.
        self._owner = weakref.ref(recorder)
        self._task_id = recorder.task_id
        self.id = session_id
        self._log: TaskLog = recorder.engine.log
        self._stream = Stream(self._log, stream_id(session_id), SESSION_TYPE)
        self._seen = 0  # the session version this run has caught up with
        self._view = SessionView(session_id=session_id)
        self._shown: dict[int, Message] = {}  # every message still in the session, by seq
        self._checked_origin = False
        self._wrote_live = False  # whether the last append was written by this run (not answered from the record)

    @property
    def _rec(self) -> Recorder:
        rec = self._owner()
        if rec is None:
            raise TetherError(
                f"ctx.session of task {self._task_id!r} was used after its run ended; outside a task, "
                f"read the conversation with app.session({self.id!r})"
            )
        return rec

    # ------------------------------------------------------------------ reading
    def messages(self) -> list[Message]:
        """Every message in the conversation as the task sees it now (a recorded read), oldest first."""
        self._read()
        return [self._shown[seq] for seq in sorted(self._shown)]

    def compacted(self) -> list[Message]:
        """The conversation as compaction leaves it (see :meth:`tether.Session.compacted`), as a recorded read."""
        self._read()
        return as_compacted([self._shown[seq] for seq in sorted(self._shown)], self._view.summary)

    def window(self, max_tokens: int, keep_last: int = 6, counter: TokenCounter | None = None) -> Window:
        """What goes into the next model call (see :meth:`tether.Session.window`), as a recorded read."""
        if type(max_tokens) is not int or max_tokens < 1 or type(keep_last) is not int or keep_last < 0:
            raise InvalidInputError(
                f"max_tokens must be an int >= 1 and keep_last an int >= 0, got {max_tokens!r}, {keep_last!r}"
            )
        self._read()
        return build_window(self._view, max_tokens, keep_last, counter or default_counter())

    @property
    def summary(self) -> Summary | None:
        """The newest summary, as of the task's last read or append."""
        return self._view.summary

    # ------------------------------------------------------------------ writing
    def add(self, message: str | dict[str, Any], content: Any = None, **meta: Any) -> Message:
        """Append one message: ``add("user", "hi")`` or ``add({...})`` in a provider's own shape."""
        check_one_message(message)
        if isinstance(message, dict):
            if content is not None or meta:
                raise InvalidInputError("add(message_dict) takes no content or keywords; put them in the dict")
            return self.add_many([message])[0]
        return self.add_many([{"role": message, "content": content, **meta}])[0]

    def add_many(self, messages: Sequence[dict[str, Any]], *, format: str | None = None) -> list[Message]:
        """Append several messages at once, in order, exactly once however often the task is resumed.

        ``format`` names the messages' shape, as in :meth:`tether.Session.add_many` (detected when ``None``).
        """
        if isinstance(messages, dict | str) or not isinstance(messages, Sequence):
            raise InvalidInputError(f"add_many() takes a list of messages, got {type(messages).__name__}")
        events, roles = [], []  # every message checked before anything is written
        for i, message in enumerate(messages):
            try:
                event, role = to_event_and_role(message, format)
            except InvalidInputError as exc:
                where = f"messages[{i}]: " if len(messages) > 1 else ""
                raise InvalidInputError(f"{where}{exc}") from None
            events.append(event)
            roles.append(role)
        if not events:
            return []
        first, last = self._write(events, roles)
        return [self._shown[seq] for seq in range(first, last + 1) if seq in self._shown]

    def compact(self, summarizer: Summarizer | None = None, keep_last: int = 6) -> Summary | None:
        """Fold older turns into a summary (see :meth:`tether.Session.compact`), exactly once.

        ``None`` when there was nothing to fold. On replay the recorded summary is returned and
        the summarizer is not called again.
        """
        if type(keep_last) is not int or keep_last < 0:
            raise InvalidInputError(f"keep_last must be an int >= 0, got {keep_last!r}")
        summarize = summarizer or extractive_summarizer

        def make() -> list[Event]:
            summary = summary_of(self._view, summarize, keep_last)
            return [] if summary is None else [summary]

        first, last = self._write(make, ["summary"])
        if last < first:
            return None
        if self._wrote_live:
            # Only a compaction this run wrote caches its view: one answered from the record (a
            # resume, or ``app.replay``, which writes nothing) found it cached when it was written.
            write_view_snapshot(self._log, self._stream.id, self._view)
        return self._view.summary

    # ------------------------------------------------------------------ the record
    def _read(self) -> None:
        rec = self._rec
        s = rec.issue_session_op()
        recorded = rec.cursor.session(s)
        if recorded is not None:
            event = self._recorded(recorded, SessionRead, f"read of the conversation (#{s})")
            self._advance(event.upto)
            return
        rec.check_nothing_left(f"read of the conversation (#{s})")
        rec.going_live()
        version = self._version()
        self._advance(version)
        rec.defer(SessionRead(s=s, session_id=self.id, upto=version))

    def _write(self, events: Any, roles: list[str]) -> tuple[int, int]:
        """Append ``events`` (or what ``events()`` makes from the view, for a compaction) once:
        the seqs they have in the session."""
        rec = self._rec
        s = rec.issue_session_op()
        requested = f"append to the conversation (#{s}: {', '.join(roles)})"
        recorded = rec.cursor.session(s)
        self._wrote_live = False
        if recorded is not None:
            written = self._recorded(recorded, SessionWritten, requested)
            if callable(events) or written.last - written.first + 1 == len(events):
                self._advance(written.last)
                return written.first, written.last
            raise NonDeterminismError(rec.task_id, recorded.seq, describe(written), requested)
        rec.check_nothing_left(requested)
        rec.going_live()
        origin = f"{rec.task_id}:{s}"
        found = self._find(origin)
        if found is None:
            found = self._append(events, origin)
            _counted(events, found)
        first, last = found
        written_roles = roles if last >= first else []
        rec.append([SessionWritten(s=s, session_id=self.id, first=first, last=last, roles=written_roles)])
        self._wrote_live = True  # a replay never gets here (``going_live`` stops it)
        self._advance(max(last, self._seen))
        return first, last

    def _recorded(self, rec: Recorded, expected: type[Any], requested: str) -> Any:
        if type(rec.event) is not expected:
            raise NonDeterminismError(self._task_id, rec.seq, describe(rec.event), requested)
        return rec.event

    def _find(self, origin: str) -> tuple[int, int] | None:
        """The seqs of events with this origin: an append a run made and stopped before recording.

        Only the first live append of a run can be one: a later one is new in this run."""
        if self._checked_origin:
            return None
        self._checked_origin = True
        try:
            newer = self._stream.read(after=self._seen)
        except TaskNotFoundError:
            return None  # no session yet: nothing was appended to it
        mine = [r.seq for r in newer if getattr(r.event, "origin", None) == origin]
        return (mine[0], mine[-1]) if mine else None

    def _append(self, events: Any, origin: str) -> tuple[int, int]:
        def attempt() -> tuple[int, int]:
            version = self._version()
            if version == 0:  # the task's first words: the session is made here (or by a racer)
                user_id = self._rec.cursor.final.user_id
                opened = SessionOpened(session_id=self.id, user_id=user_id)
                self._stream.create(opened, user_id=user_id, session_id=self.id)
                raise ConflictError(self._stream.id, expected=0, actual=None)  # made: read it again
            self._advance(version)
            made = events() if callable(events) else events
            if not made:
                return version + 1, version  # nothing to write (a compaction with nothing to fold)
            tagged = [dataclasses.replace(e, origin=origin) for e in made]
            return version + 1, self._stream.append(tagged, version)

        # Another writer may append at the same moment: both land.
        return retry_on_conflict(attempt, stream=self._stream.id, tries=_APPEND_TRIES)

    def _version(self) -> int:
        row = self._log.store.get_task(self._log.tenant, self._stream.id)
        if row is None:
            return 0
        if row.status == "closed":
            raise InvalidInputError(f"session {self.id!r} is closed")
        return row.version

    def _advance(self, version: int) -> None:
        """Catch the view up with the session as it stood at ``version``."""
        if version <= self._seen:
            return
        records = self._stream.read(after=self._seen, upto=version)
        list_messages(records, self._shown)
        if withdraws(records):  # a compaction undone: the view comes from the whole stream again
            self._view = fold_history(self._stream.read(upto=version))
        else:  # the listing's messages are the view's too: each record is read into a message once
            self._view = fold_view(records, self._view, made=self._shown)
        self._seen = version


def fork_conversation(log: TaskLog, at_state: TaskState, session_id: str, new_session_id: str) -> bool:
    """Give a fork (or a rewound task) its own branch of conversation ``session_id`` as its task had it at
    the fork point: copy-on-write, a parent pointer. ``False`` when there was nothing in it then: the new
    conversation is made empty when the new task first uses it."""
    stream = Stream(log, stream_id(session_id), SESSION_TYPE)
    version = at_state.session_version if session_id == at_state.session_id else 0
    if version == 0:
        # The task had not used its conversation by then: take it as it stood at that moment (a shared
        # conversation nobody has written yet is not made: the new one starts empty, as it stood).
        moment = at_state.updated_at.timestamp()
        try:
            version = max((r.seq for r in stream.read() if r.at <= moment), default=0)
        except TaskNotFoundError:
            version = 0
    if version == 0:
        return False
    log.fork_stream(stream.id, version, new_id=stream_id(new_session_id))
    return True


def _counted(events: Any, written: tuple[int, int]) -> None:
    """Count an append a run made live (a compaction, when ``events`` made it from the view)."""
    first, last = written
    if last < first:
        return
    if callable(events):
        telemetry.compacted()
    else:
        telemetry.conversation_appended(last - first + 1)
