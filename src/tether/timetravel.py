"""Time travel: every event in words, the state around any step, diffs, and replays.

History is the event log itself; the state before and after any event is a
fold of its prefix (``TaskLog.state_at``), so nothing here stores anything new.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

import jsonpatch
import orjson

from tether.errors import InvalidInputError, NonDeterminismError
from tether.events import (
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallStarted,
    CancelRequested,
    DataMigrated,
    DataUpdated,
    DecisionMade,
    Event,
    FailureRecorded,
    InputReceived,
    InputRequested,
    InputTimedOut,
    ObservationRecorded,
    OutputSet,
    PhaseChanged,
    PlanSet,
    Recorded,
    RetryRequested,
    SessionRead,
    SessionWritten,
    SleepScheduled,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
    TaskArchived,
    TaskCreated,
    TaskForked,
)
from tether.model import TaskState

__all__ = [
    "HistoryEntry",
    "ReplayReport",
    "StateDiff",
    "describe",
    "diff_states",
    "history_of",
    "step_bounds",
    "step_ref",
]


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _by(actor: str | None) -> str:
    """`` by ACTOR`` for the write actions that say who made them (fork, rewind, answer, cancel, retry)."""
    return f" by {actor}" if actor else ""


def describe(event: Event) -> str:
    """One line, for people, of what an event says."""
    match event:
        case TaskCreated():
            return f"created {event.type} with {_short(event.inputs)}"
        case TaskForked():
            return f"forked from {event.parent_task_id} at event {event.at}{_by(event.actor)}"
        case TaskArchived():
            return f"set aside by a rewind{_by(event.actor)}; {event.successor} took its place"
        case StatusChanged():
            return f"status → {event.status}" + (f" ({event.reason})" if event.reason else "")
        case PlanSet():
            return f"plan: {', '.join(event.steps)}"
        case StepStarted():
            return f"step {event.name!r} started"
        case StepCompleted():
            return f"step {event.name!r} completed"
        case StepFailed():
            return f"step {event.name!r} failed: {event.error}"
        case CallStarted():
            what = "compensation" if event.kind == "compensation" else "call"
            return f"{what} #{event.n} {event.tool}({_short(event.args, 40)}) attempt {event.attempt} started"
        case CallCompleted():
            head = f"call #{event.n} {event.tool}" if event.tool else f"call #{event.n}"
            return f"{head} returned {_short(event.result, 50)} in {event.duration:.3f}s"
        case CallAttemptFailed():
            then = f", retry in {event.backoff:.2f}s" if event.backoff is not None else ""
            return f"call #{event.n} attempt {event.attempt} failed: {event.error_type}: {event.message}{then}"
        case CallFailed():
            return f"call #{event.n} gave up ({event.reason})"
        case DecisionMade():
            return f"decided {event.name}: {_short(event.choice, 40)} — {event.rationale}"
        case ObservationRecorded():
            return f"observed {event.key} = {_short(event.value, 50)}" + (
                f" (from {event.source})" if event.source else ""
            )
        case DataUpdated():
            return f"data: {_short(event.fields)}"
        case DataMigrated():
            return f"data migrated from version {event.from_version} to {event.to_version}"
        case InputRequested():
            return f"waiting for {event.key!r}" + (f": {event.prompt}" if event.prompt else "")
        case InputReceived():
            return f"received {event.key!r} = {_short(event.value, 50)}{_by(event.actor)}"
        case InputTimedOut():
            return f"no answer for {event.key!r} in time"
        case SleepScheduled():
            return f"sleep until {datetime.fromtimestamp(event.until).isoformat(timespec='seconds')}"
        case CancelRequested():
            return f"cancellation requested{_by(event.actor)}: {event.reason}"
        case PhaseChanged():
            return f"phase → {event.phase}"
        case OutputSet():
            return f"output {_short(event.output)}"
        case FailureRecorded():
            return f"failed: {event.exception_type}: {event.message}" + (f" in {event.tool}" if event.tool else "")
        case RetryRequested():
            again = f"; call #{', #'.join(map(str, event.calls))} runs again" if event.calls else ""
            return f"retried{_by(event.actor)} after {event.failure_type}: {event.failure_message}{again}"
        case SessionWritten() if event.last < event.first:
            return f"conversation {event.session_id}: nothing to compact"
        case SessionWritten():
            span = f"{event.first}" if event.first == event.last else f"{event.first}–{event.last}"
            return f"conversation {event.session_id}: added {', '.join(event.roles)} (messages {span})"
        case SessionRead():
            return f"conversation {event.session_id}: read as of message {event.upto}"
        case _:
            return event.event_type


@dataclass(frozen=True)
class HistoryEntry:
    """One event of a task's history, in words, with the step it belongs to."""

    seq: int
    at: datetime
    type: str
    summary: str
    step: str | None
    """The plan step this event happened in (``None`` outside any step)."""
    boundary: str | None
    """``"before step N"`` on a step's first event, ``"after step N"`` on its last."""
    event: Event = field(repr=False, compare=False)


def _entry(
    seq: int, at: datetime, type: str, summary: str, step: str | None, boundary: str | None, event: Event
) -> HistoryEntry:
    """A :class:`HistoryEntry` built without the frozen dataclass's ``__init__``, which sets each
    field through ``object.__setattr__``: a history builds one per event, and that was a third of
    the time a 3,000-event history took. The result is equal to ``HistoryEntry(...)``."""
    entry = object.__new__(HistoryEntry)
    entry.__dict__.update(seq=seq, at=at, type=type, summary=summary, step=step, boundary=boundary, event=event)
    return entry


def history_of(records: list[Recorded]) -> list[HistoryEntry]:
    entries = []
    current: str | None = None
    ordinal = 0
    for rec in records:
        ev = rec.event
        boundary = None
        if isinstance(ev, StepStarted):
            ordinal += 1
            current = ev.name
            boundary = f"before step {ordinal}"
        step = current
        if isinstance(ev, StepCompleted | StepFailed):
            boundary = f"after step {ordinal}"
            current = None
        entries.append(_entry(rec.seq, rec.time, ev.event_type, describe(ev), step, boundary, ev))
    return entries


def step_bounds(records: list[Recorded], step: int | str) -> tuple[int, int | None]:
    """``(seq of the step's StepStarted, seq of its StepCompleted/StepFailed or None)``.

    ``step`` is the step's 1-based ordinal in the order the task ran them, or its name
    (the first step of that name).
    """
    ordinal = 0
    start: int | None = None
    name: str | None = None
    for rec in records:
        ev = rec.event
        if isinstance(ev, StepStarted) and start is None:
            ordinal += 1
            if step == ordinal or step == ev.name:
                start, name = rec.seq, ev.name
        elif isinstance(ev, StepCompleted | StepFailed) and start is not None and ev.name == name:
            return start, rec.seq
    if start is None:
        raise InvalidInputError(f"the task has no step {step!r} (it ran {ordinal} steps)")
    return start, None


@dataclass(frozen=True)
class StateDiff:
    """An RFC 6902 JSON patch from one state to another, and a readable rendering of it."""

    a: str
    b: str
    patch: list[dict[str, Any]]

    def render(self) -> str:
        if not self.patch:
            return f"{self.a} and {self.b} are the same"
        lines = [f"{self.a} → {self.b}"]
        for op in self.patch:
            path = op["path"]
            if op["op"] == "add":
                lines.append(f"  + {path}: {_short(op['value'], 80)}")
            elif op["op"] == "remove":
                lines.append(f"  - {path}")
            elif op["op"] == "replace":
                lines.append(f"  ~ {path}: {_short(op['value'], 80)}")
            else:
                lines.append(f"  {op['op']} {op.get('from', '')} → {path}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def _as_document(state: TaskState) -> Any:
    return orjson.loads(state.model_dump_json())


def diff_states(a: TaskState, b: TaskState, *, a_label: str, b_label: str) -> StateDiff:
    patch = jsonpatch.make_patch(_as_document(a), _as_document(b))
    return StateDiff(a_label, b_label, list(patch))


@dataclass(frozen=True)
class ReplayReport:
    """What ``app.replay`` found: whether the current code replays the recorded log."""

    task_id: str
    clean: bool
    replayed: int
    """How many recorded events the replay walked through."""
    recorded: int
    outcome: str
    divergence: NonDeterminismError | None = None

    def __str__(self) -> str:
        if self.clean:
            return f"{self.task_id}: replays cleanly ({self.replayed} of {self.recorded} events; {self.outcome})"
        return f"{self.task_id}: diverges — {self.outcome}"


@overload
def step_ref(text: str) -> int | str: ...
@overload
def step_ref(text: None) -> None: ...
def step_ref(text: str | None) -> int | str | None:
    """A step as people type it: its 1-based number (all digits) or its name."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text
