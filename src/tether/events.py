"""Events — facts about a task, named in the past tense — and the pure fold.

``TaskState = fold(events)``. :func:`apply` is the only place where task state
changes: it takes a state and one recorded event and returns a new state,
leaving its input untouched (unchanged parts are shared, never copied deeply).

An event holds only what changed: one call's result, one observation. Storage
grows with the deltas, never with the size of the state.

Example:
    >>> from tether.events import Recorded, TaskCreated, PlanSet, fold
    >>> state = fold([
    ...     Recorded(1, 0.0, TaskCreated(type="demo", task_id="t1", tenant="default")),
    ...     Recorded(2, 1.0, PlanSet(steps=["search", "book"])),
    ... ])
    >>> state.position
    'step 1 of 2; none committed'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel

from tether.errors import (
    InvalidTransition,
    SchemaVersionError,
    TetherError,
    UnknownEventTypeError,
)
from tether.machine import Phases, Status, check_status
from tether.model import (
    Attempt,
    Decision,
    Failure,
    Observation,
    ParentRef,
    Step,
    TaskState,
    ToolCall,
    Waiting,
)

__all__ = [
    "EVENT_TYPES",
    "CallAttemptFailed",
    "CallCompleted",
    "CallFailed",
    "CallStarted",
    "DataMigrated",
    "DataUpdated",
    "DecisionMade",
    "Event",
    "FailureRecorded",
    "InputReceived",
    "InputRequested",
    "ObservationRecorded",
    "OutputSet",
    "PhaseChanged",
    "PlanSet",
    "Recorded",
    "StatusChanged",
    "StepCompleted",
    "StepFailed",
    "StepStarted",
    "TaskCreated",
    "Upcasters",
    "apply",
    "fold",
]


class Event:
    """Base of every event. Subclasses are frozen, slotted dataclasses.

    ``version`` is the shape's schema version; records stored under an older
    version are migrated on read by :class:`Upcasters`.
    """

    __slots__ = ()
    version: ClassVar[int] = 1
    event_type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


EVENT_TYPES: dict[str, type[Event]] = {}


def _event(cls: type[Any]) -> type[Any]:
    """Register an event class under its own name and make it a frozen slotted dataclass."""
    cls = dataclass(frozen=True, slots=True)(cls)
    cls.event_type = cls.__name__
    EVENT_TYPES[cls.__name__] = cls
    return cls


@_event
class TaskCreated(Event):
    type: str
    task_id: str
    tenant: str
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    user_id: str | None = None
    session_id: str | None = None
    phases: dict[str, list[str]] | None = None
    phase: str | None = None
    data: dict[str, Any] | None = None
    data_version: int | None = None
    parent: dict[str, Any] | None = None


@_event
class StatusChanged(Event):
    status: str
    reason: str | None = None
    wake_at: float | None = None


@_event
class PlanSet(Event):
    steps: list[str]


@_event
class StepStarted(Event):
    name: str


@_event
class StepCompleted(Event):
    name: str


@_event
class StepFailed(Event):
    name: str
    error: str


@_event
class CallStarted(Event):
    """The intent of one attempt of a call, committed before the tool runs."""

    n: int
    key: str
    tool: str
    args: dict[str, Any]
    attempt: int
    kind: str = "call"
    compensates: int | None = None


@_event
class CallCompleted(Event):
    """A call's verbatim result. A readonly call has no ``CallStarted``, so it carries key, tool and args."""

    n: int
    result: Any
    attempt: int
    duration: float
    key: str | None = None
    tool: str | None = None
    args: dict[str, Any] | None = None
    kind: str = "call"


@_event
class CallAttemptFailed(Event):
    n: int
    attempt: int
    error_type: str
    message: str
    traceback: str | None
    duration: float
    backoff: float | None = None


@_event
class CallFailed(Event):
    """The call gave up: no attempt is left, or the error is not one to retry."""

    n: int
    reason: str


@_event
class DecisionMade(Event):
    name: str
    choice: Any
    rationale: str
    alternatives: list[Any] | None = None


@_event
class ObservationRecorded(Event):
    key: str
    value: Any
    source: str | None = None
    as_of: str | None = None


@_event
class DataUpdated(Event):
    """Changed fields of the task's typed data (only those that changed)."""

    fields: dict[str, Any]
    data_version: int | None = None


@_event
class DataMigrated(Event):
    """The task's typed data rewritten by upcasters to a newer model version (replaces it whole)."""

    data: dict[str, Any]
    from_version: int | None
    to_version: int


@_event
class InputRequested(Event):
    key: str
    prompt: str | None = None
    schema: dict[str, Any] | None = None
    timeout_at: float | None = None


@_event
class InputReceived(Event):
    key: str
    value: Any


@_event
class PhaseChanged(Event):
    phase: str


@_event
class OutputSet(Event):
    output: Any


@_event
class FailureRecorded(Event):
    exception_type: str
    message: str
    traceback: str | None = None
    step: str | None = None
    tool: str | None = None
    call_key: str | None = None
    input: Any = None
    output: Any = None


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event as stored: its sequence number in the stream and when it was appended."""

    seq: int
    at: float
    event: Event

    @property
    def time(self) -> datetime:
        return _ts(self.at)


# --------------------------------------------------------------------------- upcasting

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Upcasters:
    """Migrations of stored event shapes: ``(type, from_version) → fn(data) -> data``.

    Old records are migrated on read, one version at a time, so upgrading tether
    never strands stored tasks.

    Example:
        >>> ups = Upcasters()
        >>> @ups.register("ObservationRecorded", 0)
        ... def name_became_key(data):
        ...     data = dict(data)
        ...     data["key"] = data.pop("name")
        ...     return data
        >>> ups.decode("ObservationRecorded", 0, {"name": "price", "value": 3}).key
        'price'
    """

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}

    def register(self, type_name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        def decorator(fn: Upcaster) -> Upcaster:
            self._steps[(type_name, from_version)] = fn
            return fn

        return decorator

    def decode(self, type_name: str, version: int, data: dict[str, Any]) -> Event:
        """Build the current event object from a stored record, migrating it if it is older."""
        cls = EVENT_TYPES.get(type_name)
        if cls is None:
            raise UnknownEventTypeError(
                f"unknown event type {type_name!r}; known types: {', '.join(sorted(EVENT_TYPES))}"
            )
        if version > cls.version:
            raise SchemaVersionError(
                f"event {type_name} has schema version {version}, newer than this tether "
                f"knows ({cls.version}); upgrade tether to read it",
                found=version,
                supported=cls.version,
            )
        while version < cls.version:
            step = self._steps.get((type_name, version))
            if step is None:
                raise SchemaVersionError(
                    f"event {type_name} is stored at schema version {version} and no upcaster "
                    f"migrates it to {version + 1} (current {cls.version})",
                    found=version,
                    supported=cls.version,
                )
            data = step(data)
            version += 1
        try:
            return cls(**data)
        except TypeError as exc:
            raise UnknownEventTypeError(
                f"stored {type_name} (schema {version}) does not match its class: {exc}"
            ) from exc


DEFAULT_UPCASTERS = Upcasters()


# --------------------------------------------------------------------------- the fold


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}
_Model = TypeVar("_Model", bound=BaseModel)


def _make(cls: type[_Model], **values: Any) -> _Model:
    """Build a record from values the fold already knows are valid, without re-validating.

    The fold runs on every append and on every load; pydantic validation of data
    that came out of our own events would be most of its cost. Missing fields take
    their declared defaults.
    """
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        defaults = _DEFAULTS[cls] = {
            name: f.get_default(call_default_factory=True)
            for name, f in cls.model_fields.items()
            if not f.is_required()
        }
    record = object.__new__(cls)
    object.__setattr__(record, "__dict__", {**defaults, **values})
    object.__setattr__(record, "__pydantic_fields_set__", set(values))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


def _evolve(record: _Model, changes: dict[str, Any]) -> _Model:
    """A copy of a frozen record with some fields replaced; the input is untouched."""
    new = object.__new__(type(record))
    object.__setattr__(new, "__dict__", {**record.__dict__, **changes})
    object.__setattr__(new, "__pydantic_fields_set__", record.__pydantic_fields_set__ | changes.keys())
    object.__setattr__(new, "__pydantic_extra__", None)
    object.__setattr__(new, "__pydantic_private__", None)
    return new


def _replace_call(state: TaskState, n: int, changes: dict[str, Any]) -> tuple[ToolCall, ...]:
    calls = state.calls
    if not 0 < n <= len(calls):
        raise TetherError(f"event refers to call #{n}, but task {state.task_id!r} has {len(calls)} calls")
    return (*calls[: n - 1], _evolve(calls[n - 1], changes), *calls[n:])


def _replace_step(state: TaskState, name: str, changes: dict[str, Any]) -> tuple[Step, ...]:
    """Update the first unfinished step of that name (else the last one); a new name joins the plan."""
    plan = list(state.plan)
    match = next((i for i, step in enumerate(plan) if step.name == name and step.status != "completed"), None)
    if match is None:
        match = next((i for i in range(len(plan) - 1, -1, -1) if plan[i].name == name), None)
    if match is None:
        plan.append(_make(Step, name=name, **changes))  # ctx.step works without ctx.plan
    else:
        plan[match] = _evolve(plan[match], changes)
    return tuple(plan)


def _created(rec: Recorded, ev: TaskCreated) -> TaskState:
    at = _ts(rec.at)
    return _make(
        TaskState,
        task_id=ev.task_id,
        tenant=ev.tenant,
        user_id=ev.user_id,
        session_id=ev.session_id,
        type=ev.type,
        inputs=ev.inputs,
        phases=ev.phases,
        phase=ev.phase,
        data=ev.data or {},
        data_version=ev.data_version,
        parent=_make(ParentRef, **ev.parent) if ev.parent else None,
        version=rec.seq,
        created_at=at,
        updated_at=at,
    )


# One rule per event type: (state, event, time of the event, its epoch) -> changed fields.
_Rule = Callable[[TaskState, Any, datetime, float], dict[str, Any]]
_RULES: dict[type[Event], _Rule] = {}


def _rule(event_type: type[Event]) -> Callable[[_Rule], _Rule]:
    def register(fn: _Rule) -> _Rule:
        _RULES[event_type] = fn
        return fn

    return register


@_rule(StatusChanged)
def _status_changed(state: TaskState, ev: StatusChanged, at: datetime, epoch: float) -> dict[str, Any]:
    target = Status(ev.status)
    check_status(state.status, target)
    changes: dict[str, Any] = {
        "status": target,
        "wake_at": _ts(ev.wake_at) if ev.wake_at is not None else None,
    }
    if target is not Status.AWAITING_INPUT:
        changes["waiting"] = None
    return changes


@_rule(PlanSet)
def _plan_set(state: TaskState, ev: PlanSet, at: datetime, epoch: float) -> dict[str, Any]:
    return {"plan": tuple(_make(Step, name=name) for name in ev.steps)}


@_rule(StepStarted)
def _step_started(state: TaskState, ev: StepStarted, at: datetime, epoch: float) -> dict[str, Any]:
    return {"plan": _replace_step(state, ev.name, {"status": "running", "started_at": at})}


@_rule(StepCompleted)
def _step_completed(state: TaskState, ev: StepCompleted, at: datetime, epoch: float) -> dict[str, Any]:
    return {"plan": _replace_step(state, ev.name, {"status": "completed", "finished_at": at, "error": None})}


@_rule(StepFailed)
def _step_failed(state: TaskState, ev: StepFailed, at: datetime, epoch: float) -> dict[str, Any]:
    return {"plan": _replace_step(state, ev.name, {"status": "failed", "finished_at": at, "error": ev.error})}


@_rule(CallStarted)
def _call_started(state: TaskState, ev: CallStarted, at: datetime, epoch: float) -> dict[str, Any]:
    attempt = _make(Attempt, number=ev.attempt, started_at=at)
    if ev.n == len(state.calls) + 1:
        call = _make(
            ToolCall,
            n=ev.n,
            key=ev.key,
            tool=ev.tool,
            args=ev.args,
            kind=ev.kind,
            compensates=ev.compensates,
            attempts=(attempt,),
            started_at=at,
        )
        return {"calls": (*state.calls, call)}
    previous = state.calls[ev.n - 1].attempts if 0 < ev.n <= len(state.calls) else ()
    return {"calls": _replace_call(state, ev.n, {"attempts": (*previous, attempt), "status": "intended"})}


@_rule(CallCompleted)
def _call_completed(state: TaskState, ev: CallCompleted, at: datetime, epoch: float) -> dict[str, Any]:
    if ev.n == len(state.calls) + 1 and ev.key is not None:
        # A readonly call: no intent was written, this event is the whole record.
        started = _ts(epoch - ev.duration)
        attempt = _make(Attempt, number=ev.attempt, started_at=started, finished_at=at, duration=ev.duration)
        call = _make(
            ToolCall,
            n=ev.n,
            key=ev.key,
            tool=ev.tool or "?",
            args=ev.args or {},
            kind=ev.kind,
            readonly=True,
            status="completed",
            result=ev.result,
            attempts=(attempt,),
            started_at=started,
            finished_at=at,
        )
        return {"calls": (*state.calls, call)}
    current = state.call(ev.n)
    attempts = current.attempts if current else ()
    if attempts and attempts[-1].number == ev.attempt:
        attempts = (*attempts[:-1], _evolve(attempts[-1], {"finished_at": at, "duration": ev.duration}))
    else:  # a readonly retry writes no intent: this event is the whole attempt
        started = _ts(epoch - ev.duration)
        attempt = _make(Attempt, number=ev.attempt, started_at=started, finished_at=at, duration=ev.duration)
        attempts = (*attempts, attempt)
    changes = {"status": "completed", "result": ev.result, "finished_at": at, "attempts": attempts}
    return {"calls": _replace_call(state, ev.n, changes)}


@_rule(CallAttemptFailed)
def _attempt_failed(state: TaskState, ev: CallAttemptFailed, at: datetime, epoch: float) -> dict[str, Any]:
    current = state.call(ev.n)
    attempts = current.attempts if current else ()
    update = {
        "finished_at": at,
        "duration": ev.duration,
        "error_type": ev.error_type,
        "message": ev.message,
        "traceback": ev.traceback,
        "backoff": ev.backoff,
    }
    if attempts and attempts[-1].number == ev.attempt:
        attempts = (*attempts[:-1], _evolve(attempts[-1], update))
    else:
        attempts = (*attempts, _make(Attempt, number=ev.attempt, started_at=_ts(epoch - ev.duration), **update))
    return {"calls": _replace_call(state, ev.n, {"attempts": attempts})}


@_rule(CallFailed)
def _call_failed(state: TaskState, ev: CallFailed, at: datetime, epoch: float) -> dict[str, Any]:
    return {"calls": _replace_call(state, ev.n, {"status": "failed", "finished_at": at})}


@_rule(DecisionMade)
def _decision_made(state: TaskState, ev: DecisionMade, at: datetime, epoch: float) -> dict[str, Any]:
    decision = _make(
        Decision, name=ev.name, choice=ev.choice, rationale=ev.rationale, alternatives=ev.alternatives, at=at
    )
    return {"decisions": (*state.decisions, decision)}


@_rule(ObservationRecorded)
def _observed(state: TaskState, ev: ObservationRecorded, at: datetime, epoch: float) -> dict[str, Any]:
    observation = _make(
        Observation,
        key=ev.key,
        value=ev.value,
        source=ev.source,
        as_of=datetime.fromisoformat(ev.as_of) if ev.as_of else None,
        recorded_at=at,
    )
    return {"observations": {**state.observations, ev.key: observation}}


@_rule(DataUpdated)
def _data_updated(state: TaskState, ev: DataUpdated, at: datetime, epoch: float) -> dict[str, Any]:
    changes: dict[str, Any] = {"data": {**state.data, **ev.fields}}
    if ev.data_version is not None:
        changes["data_version"] = ev.data_version
    return changes


@_rule(DataMigrated)
def _data_migrated(state: TaskState, ev: DataMigrated, at: datetime, epoch: float) -> dict[str, Any]:
    return {"data": ev.data, "data_version": ev.to_version}


@_rule(InputRequested)
def _input_requested(state: TaskState, ev: InputRequested, at: datetime, epoch: float) -> dict[str, Any]:
    waiting = _make(
        Waiting,
        key=ev.key,
        prompt=ev.prompt,
        input_schema=ev.schema,
        timeout_at=_ts(ev.timeout_at) if ev.timeout_at is not None else None,
        requested_at=at,
    )
    return {"waiting": waiting}


@_rule(InputReceived)
def _input_received(state: TaskState, ev: InputReceived, at: datetime, epoch: float) -> dict[str, Any]:
    return {"received": {**state.received, ev.key: ev.value}}


@_rule(PhaseChanged)
def _phase_changed(state: TaskState, ev: PhaseChanged, at: datetime, epoch: float) -> dict[str, Any]:
    if state.phases is None:
        raise InvalidTransition("phase", state.phase, ev.phase, [])
    Phases(state.phases).check(state.phase, ev.phase)
    return {"phase": ev.phase}


@_rule(OutputSet)
def _output_set(state: TaskState, ev: OutputSet, at: datetime, epoch: float) -> dict[str, Any]:
    return {"output": ev.output}


@_rule(FailureRecorded)
def _failure_recorded(state: TaskState, ev: FailureRecorded, at: datetime, epoch: float) -> dict[str, Any]:
    failure = _make(
        Failure,
        at=at,
        step=ev.step,
        tool=ev.tool,
        call_key=ev.call_key,
        input=ev.input,
        output=ev.output,
        exception_type=ev.exception_type,
        message=ev.message,
        traceback=ev.traceback,
    )
    return {"failure": failure}


def apply(state: TaskState | None, rec: Recorded) -> TaskState:
    """Return the state after ``rec``. Pure: ``state`` is not modified.

    Raises :class:`InvalidTransition` for a status or phase move the machines forbid.
    """
    ev = rec.event
    if state is None:
        if not isinstance(ev, TaskCreated):
            raise TetherError(f"a task's first event must be TaskCreated, got {type(ev).__name__}")
        return _created(rec, ev)
    rule = _RULES.get(type(ev))
    if rule is None:
        if isinstance(ev, TaskCreated):
            raise TetherError(f"task {state.task_id!r} already exists; TaskCreated can only be its first event")
        raise UnknownEventTypeError(f"apply() has no rule for {type(ev).__name__}")
    at = _ts(rec.at)
    changes = rule(state, ev, at, rec.at)
    changes["version"] = rec.seq
    changes["updated_at"] = at
    return _evolve(state, changes)


def fold(events: Iterable[Recorded], state: TaskState | None = None) -> TaskState:
    """Fold recorded events, in order, onto ``state`` (or from nothing)."""
    for rec in events:
        state = apply(state, rec)
    if state is None:
        raise TetherError("fold() needs at least a TaskCreated event when it starts from nothing")
    return state
