"""Where a task stands, kept on its index row: its head, and what an append changes in the row.

A task's head is what a listing or ``app.get`` shows besides its status: the plan's progress, the
committed calls (so its position), what it waits for, its failure, wake-up time, cancel reason and
output. The log keeps each task's head beside its folded state and writes it in the transaction of
any append that changes it (the store itself moves the version and counts committed calls), so
reading where a task stands reads one row, whatever the task's length.

The head as the row stores it is a :class:`~tether.store.TaskHead`; read back, a :class:`RowHead`.
The fold stays the one place state changes. A head is read off a folded state
(:meth:`HeadTracker.of`); between folds (the log folds call events when somebody reads, not when they
are written) the events that move a head are folded, by the fold's own rules, onto a *light* copy of
the state — one without calls, decisions, observations or data — and committed calls are counted by
ordinal beside it.
``tether.testing.runtime.tasks.test_heads`` checks, for any sequence of events, that the head kept this way equals
the one read off the whole fold.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

import orjson

from tether.canonical import json_default
from tether.events import (
    CallCompleted,
    CallFailed,
    CallStarted,
    CancelRequested,
    Event,
    InputReceived,
    OutputSet,
    Recorded,
    RetryRequested,
    SessionRead,
    SessionWritten,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
    apply,
)
from tether.model import Failure, TaskState, Waiting, describe_position, plan_progress
from tether.model.calls import CallList
from tether.model.status import Status
from tether.store import IndexUpdate, TaskHead, TaskRow

__all__ = ["INDEXED", "LIGHT", "HeadTracker", "RowHead", "index_update", "new_row", "read_head", "row_head_of"]

# Events from outside a run that make a waiting or sleeping task runnable at once.
_WAKES = frozenset({InputReceived, CancelRequested})
# Events that move the index row's status or wake-up time.
INDEXED = frozenset({StatusChanged, RetryRequested, *_WAKES})
# Events folded later by the log that change a head: folded now onto the light state. A status
# move among them is checked there, by the fold's own rule (the light state's status is the state's:
# no event folded later moves it otherwise), before anything is written.
LIGHT = frozenset({StepStarted, StepCompleted, StepFailed, OutputSet, InputReceived, StatusChanged})
# Events that attach a conversation to the task: the first, for a task that named none, names it on
# the task's index row too (with that append), so that a listing by session finds the task.
_ATTACHES = frozenset({SessionRead, SessionWritten})
_new_tracker = object.__new__  # a working copy is made per append: without __init__'s arguments
# What the light state leaves out: nothing a head shows depends on them.
_HEAVY: dict[str, Any] = {"calls": CallList(), "decisions": (), "observations": {}, "data": {}, "received": {}}


class HeadTracker:
    """What the log keeps of a task to work out its head between folds: the light state, the calls
    not (or no longer) committed, how many are, and the head the task's row holds as far as this
    log knows (:attr:`written`)."""

    __slots__ = ("cached_texts", "done", "light", "naming", "open", "owned", "written_done", "written_texts")

    def __init__(self, light: TaskState, open: set[int], done: int, written: TaskHead | None) -> None:
        self.light = light
        self.open = open  # opened calls whose status is not completed
        self.done = done
        self.owned = True  # a working copy shares ``open`` until it changes it
        self.cached_texts: tuple[str, str | None] | None = None  # see :meth:`texts`
        self.naming: str | None = None  # see :meth:`take_naming`
        self.written = written

    @property
    def written(self) -> TaskHead | None:
        """What the task's row holds, as far as this log knows (``None``: not known)."""
        texts = self.written_texts
        return None if texts is None else TaskHead(self.written_done, *texts)

    @written.setter
    def written(self, head: TaskHead | None) -> None:
        # Kept as its parts: an append that leaves the row to its own counting (most) then moves an
        # int, instead of building a frozen TaskHead.
        self.written_done = 0 if head is None else head.calls_done
        self.written_texts = None if head is None else (head.summary, head.output)

    @classmethod
    def of(cls, state: TaskState, written: TaskHead | None = None) -> HeadTracker:
        """The head of a folded state."""
        calls = state.calls
        open_ = calls.open_ordinals()
        done = len(calls) - len(open_)
        return cls(state.model_copy(update=_HEAVY), open_, done, written)

    def working_copy(self) -> HeadTracker:
        """A copy an append changes while it is checked; it replaces this one once written."""
        copy = _new_tracker(HeadTracker)
        copy.light, copy.open, copy.done, copy.owned = self.light, self.open, self.done, False
        copy.cached_texts = self.cached_texts
        copy.naming = None
        copy.written_done, copy.written_texts = self.written_done, self.written_texts
        return copy

    def advance(self, rec: Recorded) -> None:
        """Move the head by one event the log folds later (checked, not yet folded) that is not a call's."""
        cls = type(rec.event)
        if cls in LIGHT:
            self.light = apply(self.light, rec)  # the fold's own rule, on the light state
            self.cached_texts = None
        elif cls in _ATTACHES and self.light.session_id is None:
            self.light = apply(self.light, rec)
            self.naming = self.light.session_id

    def take_naming(self) -> str | None:
        """The conversation the task's row is to name with this append, once: the first one attached
        to a task that named none (``None`` when there is none to name)."""
        naming, self.naming = self.naming, None
        return naming

    def call_moved(self, cls: type[Event], n: int, known: bool) -> None:
        """Move the head by an event of class ``cls`` of call ``n`` (checked, not yet folded);
        ``known``: whether the call was opened before it."""
        if cls is CallCompleted:
            if n in self.open:
                self._own().discard(n)
                self.done += 1
            elif not known:
                self.done += 1  # a readonly call, opened and committed by this one event
        elif (cls is CallStarted or cls is CallFailed) and n not in self.open:
            if known:
                self.done -= 1  # a committed call started again, or given up
            self._own().add(n)

    def _own(self) -> set[int]:
        if not self.owned:
            self.open = set(self.open)
            self.owned = True
        return self.open

    def texts(self) -> tuple[str, str | None]:
        """The row's ``summary`` and ``output`` for this head."""
        if self.cached_texts is None:
            light = self.light
            summary = {
                "plan": plan_progress(light.plan) if light.plan else None,
                "waiting": light.waiting.model_dump(mode="json") if light.waiting is not None else None,
                "failure": light.failure.model_dump(mode="json") if light.failure is not None else None,
                "wake_at": light.wake_at.isoformat() if light.wake_at is not None else None,
                "cancel_reason": light.cancel_reason,
            }
            output = None if light.output is None else orjson.dumps(light.output, default=json_default).decode()
            self.cached_texts = (orjson.dumps(summary).decode(), output)
        return self.cached_texts

    def row_update(self, completes: int) -> TaskHead | None:
        """What to write to the task's row with an append of ``completes`` committing events:
        ``None`` when the row's own count of them keeps it right (the common case)."""
        texts = self.cached_texts or self.texts()
        written_texts = self.written_texts
        same = written_texts is not None and self.written_done + completes == self.done
        self.written_done, self.written_texts = self.done, texts
        if same and (written_texts is texts or written_texts == texts):
            return None
        return TaskHead(self.done, *texts)


class RowHead(NamedTuple):
    """Where a task stands, read off its index row alone (its :class:`~tether.store.TaskHead`, decoded,
    with the row's status), or off a folded state (:func:`row_head_of`)."""

    status: Status
    position: str
    waiting: Waiting | None
    failure: Failure | None
    output: Any
    wake_at: datetime | None
    cancel_reason: str | None


def read_head(row: TaskRow) -> RowHead | None:
    """Where the task of ``row`` stands, from the row alone; ``None`` for a row written before
    tether kept heads (until the task's next append), or for a stream that is not a task."""
    if row.summary is None:
        return None
    summary = orjson.loads(row.summary)
    if not isinstance(summary, dict) or "plan" not in summary:
        return None  # another stream's head (a LangGraph thread keeps its newest checkpoint's id)
    steps, committed = summary["plan"] or (0, 0)
    waiting, failure, wake_at = summary["waiting"], summary["failure"], summary["wake_at"]
    return RowHead(
        status=Status(row.status),
        position=describe_position(steps, committed, row.calls_done),
        waiting=None if waiting is None else Waiting.model_validate(waiting),
        failure=None if failure is None else Failure.model_validate(failure),
        output=None if row.output is None else orjson.loads(row.output),
        wake_at=None if wake_at is None else datetime.fromisoformat(wake_at),
        cancel_reason=summary["cancel_reason"],
    )


def row_head_of(state: TaskState) -> RowHead:
    """The same, read off a folded state."""
    return RowHead(
        state.status, state.position, state.waiting, state.failure, state.output, state.wake_at, state.cancel_reason
    )


def new_row(
    tenant: str,
    task_id: str,
    type: str,
    user_id: str | None,
    session_id: str | None,
    now: float,
    *,
    version: int,
    parent: tuple[str, int] | None = None,
    state: TaskState | None = None,
) -> TaskRow:
    """The index row of a new stream (a fork names its parent and the last event it shares), with
    the head of ``state`` when it is a task's."""
    head = None if state is None else HeadTracker.of(state).row_update(0)
    parent_id, parent_seq = parent if parent is not None else (None, None)
    return TaskRow(
        task_id=task_id,
        tenant=tenant,
        type=type,
        status=Status.PENDING.value,
        user_id=user_id,
        session_id=session_id,
        created_at=now,
        updated_at=now,
        version=version,
        parent_id=parent_id,
        parent_seq=parent_seq,
        calls_done=head.calls_done if head is not None else 0,
        summary=head.summary if head is not None else None,
        output=head.output if head is not None else None,
    )


def index_update(event: Event, index: IndexUpdate | None, now: float) -> IndexUpdate | None:
    """What the task's index row (status, wake-up time) becomes after ``event``."""
    cls = type(event)
    if cls is StatusChanged:
        index = IndexUpdate(status=event.status, wake_at=event.wake_at)  # type: ignore[attr-defined]
    elif cls is RetryRequested:
        index = IndexUpdate(status=Status.PENDING.value, wake_at=None)
    if cls in _WAKES and (index is None or index.status is None):
        index = IndexUpdate(status=None, wake_at=now)  # an answer or a cancel: runnable now
    return index
