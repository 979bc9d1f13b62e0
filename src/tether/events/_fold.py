"""The pure fold: ``TaskState = fold(events)``, the only place task state changes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tether.errors import TetherError, UnknownEventTypeError
from tether.events._draft import _Draft
from tether.events._rules import _RULES, _created
from tether.events.base import Recorded, _ts
from tether.events.knowledge import ObservationRecorded
from tether.events.task import TaskCreated
from tether.model import TaskState

__all__ = ["apply", "fold"]


def fold(events: Iterable[Recorded], state: TaskState | None = None) -> TaskState:
    """Fold recorded events, in order, onto ``state`` (or from nothing). Pure: ``state`` is untouched.

    Raises :class:`InvalidTransition` for a status or phase move the machines forbid.
    """
    draft: _Draft | None = None
    last: Recorded | None = None
    if not isinstance(events, list | tuple):
        events = list(events)
    overwritten = _overwritten(events)
    for i, rec in enumerate(events):
        ev = rec.event
        if i in overwritten:
            last = rec  # its observation is replaced later in this batch: building it would be waste
            continue
        if state is None:
            if not isinstance(ev, TaskCreated):
                raise TetherError(f"a task's first event must be TaskCreated, got {type(ev).__name__}")
            state = _created(rec, ev)
            continue
        rule = _RULES.get(type(ev))
        if rule is None:
            if isinstance(ev, TaskCreated):
                raise TetherError(f"task {state.task_id!r} already exists; TaskCreated can only be its first event")
            raise UnknownEventTypeError(f"the fold has no rule for {type(ev).__name__}")
        if draft is None:
            draft = _Draft(state)
        rule(draft, ev, _ts(rec.at), rec.at)
        last = rec
    if state is None:
        raise TetherError("fold() needs at least a TaskCreated event when it starts from nothing")
    if draft is None or last is None:
        return state
    draft.values["version"] = last.seq
    draft.values["updated_at"] = _ts(last.at)
    return draft.freeze(state)


def _overwritten(events: Sequence[Recorded]) -> frozenset[int] | set[int]:
    """Positions of observations that a later event of the same batch records again under the same key.

    A key observed over and over (the latest message, a price) is the common case of a long
    log; folding the events since a snapshot then builds one observation per key, not one
    per event. The result is the same: an observation replaces the one before it whole.
    """
    if len(events) < 2:
        return _NONE
    seen: set[str] = set()
    skip: set[int] = set()
    for i in range(len(events) - 1, -1, -1):
        ev = events[i].event
        if type(ev) is ObservationRecorded:
            if ev.key in seen:
                skip.add(i)
            else:
                seen.add(ev.key)
    return skip


_NONE: frozenset[int] = frozenset()


def apply(state: TaskState | None, rec: Recorded) -> TaskState:
    """The state after one more event: ``fold([rec], state)``."""
    return fold((rec,), state)
