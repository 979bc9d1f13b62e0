"""The recorded history a run walks alongside the task's code.

A resumed task runs its function again from the top; each operation asks this
cursor for its record. Records are found three ways, because three kinds of
operation can be issued in three kinds of order:

* **calls** by their ordinal ``n``. The ordinal is fixed when the code *issues*
  the call, in program order, so a call's record is found whatever order a batch
  of parallel calls finished in (their events interleave in the log);
* **conversation operations** (``ctx.session`` reads and appends) by their own
  ordinal ``s``, for the same reason;
* **everything else** (steps, decisions, observations, waits, sleeps...) in the
  order it was recorded, skipping the events found the other two ways.

An operation with no record runs live. A run that ends with records nobody
asked for diverged from its history. Events the runtime wrote on its own
(status changes, answers, cancellations) are never asked for; they only show in
the state as the code passes them.

The compensations a failure or a cancel ran are recorded after everything the code
did, and are asked for only once the run compensates (:meth:`Replay.compensating`):
until then the record ends, for the code, where it ended when the live run began to
compensate — a cancelled task's code reaches its wait, sees it unanswered and stops
for the cancel, as it did live.

:class:`ReleaseGate` makes parallel branches replay in the order they ran: a
branch that issues a call *after* another call finished gets its ordinal from
the order of those finishes, so on replay the recorded results are handed back
in the order they were recorded.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable
from typing import Any

from tether.errors import NonDeterminismError
from tether.events import (
    CALL_EVENTS,
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallInDoubt,
    CallStarted,
    CancelRequested,
    DataMigrated,
    DataUpdated,
    DecisionMade,
    Event,
    FailureRecorded,
    InputReceived,
    InputRequested,
    ObservationRecorded,
    OutputSet,
    PhaseChanged,
    PlanSet,
    Recorded,
    RetryRequested,
    RunTraced,
    SessionRead,
    SessionWritten,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
    TaskArchived,
    TaskForked,
    apply,
    fold,
)
from tether.model import TaskState, ToolCall

__all__ = ["PASSIVE", "ReleaseGate", "Replay", "answer_turn", "describe"]

# Events the runtime writes on its own, not in answer to an operation of the task's code.
PASSIVE = frozenset(
    {
        StatusChanged,
        InputReceived,
        OutputSet,
        FailureRecorded,
        DataMigrated,
        CancelRequested,
        TaskForked,
        TaskArchived,
        RetryRequested,
        CallInDoubt,
        RunTraced,
    }
)
SESSION_EVENTS = frozenset({SessionRead, SessionWritten})
_NOT_IN_ORDER = PASSIVE | CALL_EVENTS | SESSION_EVENTS


def answer_turn(asked_at: int) -> int:
    """The place in :attr:`Replay.finish_order` of the answer to the question asked at event ``asked_at``:
    a negative number, never a call's ordinal."""
    return -asked_at


def describe(event: Event) -> str:
    """An event phrased the way the code asks for it, so a divergence compares like with like."""
    match event:
        case CallStarted() | CallCompleted() if getattr(event, "tool", None):
            return f"call #{event.n} {event.tool}"
        case CallStarted() | CallCompleted() | CallAttemptFailed() | CallFailed():
            return f"call #{event.n}"
        case SessionRead():
            return f"read of the conversation (#{event.s})"
        case SessionWritten():
            return f"append to the conversation (#{event.s}: {', '.join(event.roles) or 'nothing'})"
        case StepStarted() | StepCompleted() | StepFailed():
            return f"{event.event_type}({event.name!r})"
        case DecisionMade():
            return f"decide({event.name!r})"
        case ObservationRecorded():
            return f"observe({event.key!r})"
        case PhaseChanged():
            return f"transition({event.phase!r})"
        case PlanSet():
            return f"plan({event.steps!r})"
        case DataUpdated():
            return f"update({', '.join(sorted(event.fields))})"
        case _:
            return event.event_type


class Replay:
    """Which recorded events the code has asked for so far, and the state as of that point."""

    def __init__(self, task_id: str, history: list[Recorded], final: TaskState) -> None:
        self.task_id = task_id
        self.history = history
        self.final = final  # the state at the end of the history
        self._taken = bytearray(len(history))
        self._taken[0] = 1  # TaskCreated
        self.left = 0  # recorded operations nobody has asked for yet
        self._calls: dict[int, list[int]] = {}
        self._session: dict[int, int] = {}
        # Call ordinals (and answered questions, as :func:`answer_turn` numbers them), in the order their
        # outcome was recorded.
        self.finish_order: list[int] = []
        # Compensations (not a retry's): their events are left out of ``left`` until the run compensates.
        self._undoes: set[int] = set()
        self._undo_left = 0
        self._compensating = False
        # Retries (app.retry): the failures' own records are passed over; later calls take higher ordinals.
        self.retries: list[tuple[int, int]] = []
        self._retired: set[int] = set()
        for rec in history:
            if type(rec.event) is RetryRequested:
                self._retired.update(rec.event.retired)
                self.retries.append((rec.event.after_n, rec.event.shift))
        self._index(history, self._retired)
        self._linear = 1  # where the next in-order operation's record is looked for
        self._view = apply(None, history[0])  # the state as of the point the code has reached:
        self._view_at = 1  # ... history[:_view_at] folded into _view ...
        self._view_to = 1  # ... of history[:_view_to], what the code has passed

    def _index(self, history: list[Recorded], retired: set[int]) -> None:
        """Count the operations the code is to ask for, and index calls and conversation operations."""
        calls, undoes = self._calls, self._undoes
        finished_at: list[int] = []  # the history index of each outcome in ``finish_order``
        asked: list[int] = []  # the history indices of the questions asked (InputRequested)
        answered: dict[str, list[int]] = {}  # the history indices of the answers, by key
        for i in range(1, len(history)):
            event = history[i].event
            kind = type(event)
            if kind in PASSIVE:
                if kind is InputReceived:
                    answered.setdefault(event.key, []).append(i)  # type: ignore[attr-defined]
                continue
            if retired and history[i].seq in retired:
                self._taken[i] = 1
                continue
            if kind in CALL_EVENTS:
                n = event.n  # type: ignore[attr-defined]
                indices = calls.get(n)
                if indices is None:
                    indices = calls[n] = []
                    # A call's first event (its intent, or a readonly call's completion) says its kind.
                    if getattr(event, "kind", None) == "compensation":
                        undoes.add(n)
                indices.append(i)
                if kind is CallCompleted or kind is CallFailed:
                    self.finish_order.append(n)
                    finished_at.append(i)
                if undoes and n in undoes:
                    self._undo_left += 1
                    continue
            elif kind in SESSION_EVENTS:
                self._session[event.s] = i  # type: ignore[attr-defined]
            elif kind is InputRequested:
                asked.append(i)
            self.left += 1
        if asked and answered:
            self._order_answers(history, asked, answered, finished_at)

    def _order_answers(
        self, history: list[Recorded], asked: list[int], answered: dict[str, list[int]], finished_at: list[int]
    ) -> None:
        """Put each answered question among the calls' outcomes, where the code first could receive its
        answer: when it was asked, or when the answer came, whichever was later. A wait in one parallel
        branch then hands its answer back after the outcomes its siblings had before it, as it did live
        (its answer is known at once on replay, and the branch would otherwise run ahead of them)."""
        for i in asked:
            key = history[i].event.key  # type: ignore[attr-defined]
            answers = answered.get(key)
            if not answers:
                continue
            later = [a for a in answers if a > i]
            at = later[0] if later else i  # an answer sent before the question is received when asked
            place = bisect.bisect_left(finished_at, at)
            finished_at.insert(place, at)
            self.finish_order.insert(place, answer_turn(history[i].seq))

    @property
    def done(self) -> bool:
        """Whether every recorded operation has been asked for (what follows runs live)."""
        return self.left == 0

    def compensating(self) -> None:
        """The run compensates from here: the recorded compensations are the work left to ask for."""
        if not self._compensating:
            self._compensating = True
            self.left += self._undo_left
            self._undo_left = 0

    def compensated_before(self) -> set[int]:
        """The calls a compensation of an earlier failure (one a retry answered) undid: not undone again."""
        if not self._retired:
            return set()
        history, seqs = self.history, self._retired
        retired = {r.event.n for r in history if r.seq in seqs and type(r.event) in CALL_EVENTS}  # type: ignore[attr-defined]
        return {
            c.compensates
            for c in self.final.calls
            if c.kind == "compensation" and c.status == "completed" and c.n in retired and c.compensates is not None
        }

    def carried_cancel(self) -> str | None:
        """The reason of a cancel this task's record carries across a fork: one whose compensations had
        begun (a compensation recorded after it) at the fork point. A fork drops a cancel only asked
        for (its ``TaskForked`` clears the request: the fork goes on with the code), but not one whose
        undoing is under way: an effect undone is not done again, so the fork — the same task from that
        point — carries on compensating and ends cancelled, as a run of the original would have."""
        reason: str | None = None
        undoing = False  # a compensation was recorded since the cancel
        for rec in self.history:
            event = rec.event
            kind = type(event)
            if kind is CancelRequested:
                if reason is None:
                    reason, undoing = event.reason or "cancelled", False  # type: ignore[attr-defined]
            elif kind is TaskForked:
                if not undoing:
                    reason = None
            elif reason is not None and kind in CALL_EVENTS and getattr(event, "kind", None) == "compensation":
                undoing = True
        return reason if undoing else None

    @property
    def walked(self) -> int:
        """How many recorded events the code has passed."""
        return self._view_to

    def _take(self, i: int) -> None:
        self._taken[i] = 1
        self.left -= 1
        if i >= self._view_to:
            history = self.history
            end = i + 1
            while end < len(history) and type(history[end].event) in PASSIVE:
                end += 1
            self._view_to = end

    def view(self) -> TaskState:
        """The state after every event the code has passed."""
        if self._view_at < self._view_to:
            self._view = fold(self.history[self._view_at : self._view_to], self._view)
            self._view_at = self._view_to
        return self._view

    # ------------------------------------------------------------------ in order
    def _next_in_order(self) -> int | None:
        history, taken, i = self.history, self._taken, self._linear
        while i < len(history) and (taken[i] or type(history[i].event) in _NOT_IN_ORDER):
            i += 1
        self._linear = i
        return i if i < len(history) else None

    def take(self, expected: type[Event], matches: Callable[[Any], bool], requested: str) -> Recorded | None:
        """The record of the next in-order operation, or ``None`` when it has none (it runs live).

        A record of another operation means the code no longer does what it did:
        :class:`NonDeterminismError`, naming both.
        """
        i = self._next_in_order()
        if i is None:
            return None
        rec = self.history[i]
        if type(rec.event) is not expected or not matches(rec.event):
            raise NonDeterminismError(self.task_id, rec.seq, describe(rec.event), requested)
        self._take(i)
        return rec

    def take_if(self, expected: type[Event], matches: Callable[[Any], bool]) -> bool:
        """Take the next in-order record if it is this one; ``False`` (nothing taken) if not."""
        i = self._next_in_order()
        if i is not None and type(self.history[i].event) is expected and matches(self.history[i].event):
            self._take(i)
            return True
        return False

    # ------------------------------------------------------------------ by ordinal
    def call(self, n: int) -> ToolCall | None:
        """Take call ``n``'s events; its record as of the end of the history, or ``None``."""
        indices = self._calls.get(n)
        if indices is None or self._taken[indices[0]]:
            return None
        if not self._compensating and self._undoes and n in self._undoes:
            # A compensation's record, asked for by the code before the run compensates: handed
            # back untaken, for the caller's check to refuse (a compensation is not this call).
            return self.final.call(n)
        for i in indices:
            self._take(i)
        # Nothing but the call's own events changes it: its record now is its record at the end.
        return self.final.call(n)

    def ordinal(self, issued: int) -> int:
        """The ordinal of the ``issued``-th call the code makes: past every retry's compensations."""
        n = issued
        for after, shift in self.retries:
            if n > after:
                n += shift
        return n

    def first_seq_of_call(self, n: int) -> int:
        indices = self._calls.get(n)
        return self.history[indices[0]].seq if indices else 0

    def session(self, s: int) -> Recorded | None:
        """Take conversation operation ``s``'s record, or ``None``."""
        i = self._session.pop(s, None)
        if i is None:
            return None
        self._take(i)
        return self.history[i]

    def first_left(self, *, code_only: bool = False) -> Recorded | None:
        """The earliest record nobody asked for; ``code_only``: leaving out the compensations,
        while the run has not begun to compensate."""
        history, taken = self.history, self._taken
        undoes = self._undoes if code_only and not self._compensating else ()
        for i in range(1, len(history)):
            event = history[i].event
            if not taken[i] and type(event) not in PASSIVE:
                if undoes and type(event) in CALL_EVENTS and event.n in undoes:  # type: ignore[attr-defined]
                    continue
                return history[i]
        return None


class ReleaseGate:
    """Hands recorded results to parallel replayed calls in the order the results were recorded.

    Live, ``asyncio.gather(branch(a), branch(b))`` where each branch awaits one call
    and then issues another gives the second calls their ordinals in the order the
    first ones *finished*. Replayed, every first call is done at once; handing their
    results back in recorded order (one branch runs on to its next await before the
    next result is handed out) makes the branches issue their next calls in the
    same order, so each gets the ordinal — and so the record — it had.

    A result whose turn comes while nobody waits for it yet is waited for a few
    turns of the event loop; after that the earliest-recorded waiting result goes
    first (an ordinal that then does not match its record raises
    :class:`NonDeterminismError`, never a wrong result).
    """

    PATIENCE = 64  # event-loop turns to wait for the call whose result is next

    def __init__(self, finish_order: list[int]) -> None:
        self._order = finish_order
        self._rank = {n: i for i, n in enumerate(finish_order)}
        self._next = 0
        self._given: set[int] = set()
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._scheduled = False
        self._idle = 0

    def _skip_given(self) -> None:
        while self._next < len(self._order) and self._order[self._next] in self._given:
            self._next += 1

    def knows(self, n: int) -> bool:
        """Whether ``n`` (a call's ordinal, or an :func:`answer_turn`) has a turn in the recorded order."""
        return n in self._rank

    def wait(self, n: int) -> asyncio.Future[None]:
        """A future that is done when call ``n``'s turn comes (never before the loop turns once)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[n] = future
        self._schedule()
        return future

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._release)

    def _release(self) -> None:
        self._scheduled = False
        if not self._waiting:
            return
        self._skip_given()
        due = self._order[self._next] if self._next < len(self._order) else None
        if due in self._waiting:
            self._give(due)
        elif self._idle < self.PATIENCE:
            self._idle += 1
        else:
            self._give(min(self._waiting, key=lambda n: self._rank.get(n, -1)))
        if self._waiting:
            self._schedule()

    def _give(self, n: int) -> None:
        self._idle = 0
        self._given.add(n)
        future = self._waiting.pop(n)
        if not future.done():
            future.set_result(None)
