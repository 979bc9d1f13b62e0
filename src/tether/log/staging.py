"""An append before anything is written: its events checked (call events against the calls opened so
far, anything else folded now, so the machines refuse an illegal move), encoded, and the task's index
row's changes — its status, its wake-up, its head — worked out."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

from tether.errors import InvalidInputError
from tether.events import CALL_EVENTS, CallCompleted, Event, Recorded, TaskCreated, fold
from tether.log.encoding import DEFERRED, checked, encode_event
from tether.log.heads import INDEXED, HeadTracker, index_update
from tether.log.memory import Entry
from tether.model import TaskState
from tether.store import EventRow, IndexUpdate, TaskHead

__all__ = ["ALONE", "Staged", "stage", "stage_alone"]

# A NamedTuple from a ready tuple, without the keyword-parsing __new__ (a hot path builds two per append).
_tuple_new = tuple.__new__


class Staged(NamedTuple):
    """An append's events checked and encoded, not yet written."""

    rows: list[EventRow]
    """The rows to write."""
    base: TaskState | None
    """The state folded now, when one of the events needed it."""
    pending: list[Recorded]
    """The events folded later: after ``base``, or after what the entry has pending when it is ``None``."""
    opening: set[int]
    """The ordinals of the calls the batch opens."""
    update: IndexUpdate | None
    """The index row's change."""
    head: HeadTracker
    """Where the task stands after the batch."""


def _with_head(index: IndexUpdate | None, head: TaskHead | None, naming: str | None) -> IndexUpdate | None:
    """An append's index update with the head it writes (``None``: the row's own counting keeps it)
    and the conversation it names (``None``: none to name, the common case)."""
    if head is None and naming is None:
        return index
    if index is None:
        return IndexUpdate(status=None, head=head, moves=False, session_id=naming)
    return IndexUpdate(status=index.status, wake_at=index.wake_at, head=head, moves=index.moves, session_id=naming)


# Events an append of one of them stages by :func:`stage_alone`: folded later, and no index row move.
ALONE = frozenset(DEFERRED) - INDEXED


def stage_alone(
    task_id: str, event: Event, entry: Entry, seq: int, limit: int
) -> tuple[EventRow, Recorded, set[int], IndexUpdate | None]:
    """:func:`stage` of a one-event append whose event is in :data:`ALONE` (a call's intent or result,
    most often): the same checks and the same outcome, with less to do — ``(row, record, the call
    ordinals it opens, the index row's change)``; the log settles the entry with
    :meth:`~tether.log.memory.Entry.wrote` once it is written.

    It moves the entry's own head, not a copy of it: the caller forgets the entry when the append
    does not go through (refused here, or by the store). The event is encoded first, so a value that
    cannot be stored (a tool's result, most often) is refused before the head has moved."""
    rec = _tuple_new(Recorded, (seq, time.time(), event))
    row = _row(rec, limit)  # encoded first: a value that cannot be stored is refused before the head moves
    opening: set[int] = set()
    head = entry.head
    _deferred(task_id, rec, entry, head, opening)
    update = head.row_update(type(event) is CallCompleted)
    naming = head.take_naming() if head.naming is not None else None
    return row, rec, opening, None if update is None and naming is None else _with_head(None, update, naming)


def _deferred(task_id: str, rec: Recorded, entry: Entry, head: HeadTracker, opening: set[int]) -> None:
    """Check an event folded later against the calls opened so far, and move the head by it."""
    event = rec.event
    known = checked(task_id, event, entry.opened(), opening)
    cls = type(event)
    if cls in CALL_EVENTS:
        head.call_moved(cls, event.n, known)  # type: ignore[attr-defined]
    else:
        head.advance(rec)


def _row(rec: Recorded, limit: int) -> EventRow:
    """The event as stored (encoded; raises before anything is written if it cannot be)."""
    seq, at, event = rec
    return _tuple_new(EventRow, (seq, event.event_type, event.version, at, encode_event(event, limit), None))


def stage(task_id: str, events: Sequence[Event], entry: Entry, expected_version: int, limit: int) -> Staged:
    """Check and encode an append's events, before anything is written: a call event is checked
    against the calls opened so far and folded later; any other event is folded now (the
    machines refuse an illegal move here). (One event of :data:`ALONE`: :func:`stage_alone`.)"""
    now = time.time()
    base: TaskState | None = None  # set when a checked event had to be folded now
    staged: list[Recorded] = []  # deferred events of this batch, after ``base`` if it is set
    opening: set[int] = set()  # calls this batch opens: added to the entry's once written
    rows: list[EventRow] = []
    index: IndexUpdate | None = None
    completes = 0
    seq = expected_version
    head = entry.head.working_copy()  # where the task stands after each event, for its row
    naming: str | None = None  # the conversation the row is to name, when a fold replaced ``head``
    for event in events:
        seq += 1
        rec = _tuple_new(Recorded, (seq, now, event))
        cls = type(event)
        if cls in DEFERRED:
            # The common case (a call, a decision, an observation): checked now, written now,
            # folded when somebody reads the state.
            _deferred(task_id, rec, entry, head, opening)
            staged.append(rec)
            completes += cls is CallCompleted
        elif not isinstance(event, Event):
            raise InvalidInputError(f"append() takes Event objects, got {type(event).__name__}")
        elif isinstance(event, TaskCreated):
            raise InvalidInputError("TaskCreated is written by create(), not append()")
        else:
            # Fold now: the machines check the move before anything is written.
            if base is None:
                entry.settle()  # what is pending is written already: folded now, its heads kept
                base = entry.base
            base = fold([*staged, rec], base)
            staged = []
            naming = naming or head.naming
            head = HeadTracker.of(base, head.written)
        if cls in INDEXED:
            index = index_update(event, index, now)
        rows.append(_row(rec, limit))
    update = _with_head(index, head.row_update(completes), naming or head.take_naming())
    return _tuple_new(Staged, (rows, base, staged, opening, update, head))
