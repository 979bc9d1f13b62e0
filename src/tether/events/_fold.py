"""The pure fold: ``TaskState = fold(events)``, the only place task state changes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from tether.errors import TetherError, UnknownEventTypeError
from tether.events._draft import _Draft
from tether.events._rules import _RULES, _created, _retry_call
from tether.events.base import Recorded, from_epoch
from tether.events.knowledge import ObservationRecorded
from tether.events.task import RetryRequested, TaskCreated
from tether.model import TaskState, ToolCall
from tether.model.calls import CallList, call_index

__all__ = ["apply", "fold", "fold_calls"]


def fold(
    events: Iterable[Recorded],
    state: TaskState | None = None,
    *,
    every: int = 0,
    mark: Callable[[TaskState, CallList], None] | None = None,
) -> TaskState:
    """Fold recorded events, in order, onto ``state`` (or from nothing). Pure: ``state`` is untouched.

    ``mark(state, calls)``, with ``every``: called after each event whose seq is a multiple of
    ``every``, with the state so far without its calls, and its calls (the partial snapshots of
    :mod:`tether.log.snapshot_keeping`). Both are only valid during the call.

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
        draft.seq = rec.seq
        rule(draft, ev, from_epoch(rec.at), rec.at)
        last = rec
        if mark is not None and rec.seq % every == 0:
            mark(draft.peek(state, rec.seq, rec.at), draft.values["calls"])
    if state is None:
        raise TetherError("fold() needs at least a TaskCreated event when it starts from nothing")
    if draft is None or last is None:
        return state
    draft.values["version"] = last.seq
    draft.values["updated_at"] = from_epoch(last.at)
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


def fold_calls(state: TaskState, calls: Sequence[tuple[int, Sequence[Recorded]]]) -> list[ToolCall]:
    """Calls' records, each folded from the events that made it (the seqs its state's
    :class:`~tether.model.CallList` names), by the fold's own rules applied to that call alone.

    ``calls`` are ``(ordinal, events)`` pairs; ``state`` gives the task they belong to and has no
    calls (``state.model_copy(update={"calls": CallList()})``, made once for many reads).
    """
    if state.calls:
        raise TetherError("fold_calls() folds calls onto a state with no calls")
    draft = _Draft(state)
    for n, records in calls:
        for rec in records:
            ev = rec.event
            draft.seq = rec.seq
            if type(ev) is RetryRequested:
                _retry_call(draft, n)  # of a retry, only what it does to this call
                continue
            rule = _RULES.get(type(ev))
            if rule is None or getattr(ev, "n", None) != n:
                kind = type(ev).__name__
                raise TetherError(f"event {rec.seq} ({kind}) of task {state.task_id!r} is not one of call #{n}'s")
            rule(draft, ev, from_epoch(rec.at), rec.at)
        if call_index(draft.values["calls"], n) is None:
            raise TetherError(f"the events of call #{n} of task {state.task_id!r} do not open it")
    return [draft.call(n) for n, _ in calls]
