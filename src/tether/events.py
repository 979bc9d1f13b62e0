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
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple, TypeVar, dataclass_transform

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
    call_index,
)

__all__ = [
    "EVENT_TYPES",
    "CallAttemptFailed",
    "CallCompleted",
    "CallFailed",
    "CallStarted",
    "CancelRequested",
    "DataMigrated",
    "DataUpdated",
    "DecisionMade",
    "Event",
    "FailureRecorded",
    "InputReceived",
    "InputRejected",
    "InputRequested",
    "InputTimedOut",
    "ObservationRecorded",
    "OutputSet",
    "PatchMarked",
    "PhaseChanged",
    "PlanSet",
    "Recorded",
    "RetryRequested",
    "SessionRead",
    "SessionWritten",
    "SleepScheduled",
    "StatusChanged",
    "StepCompleted",
    "StepFailed",
    "StepStarted",
    "TaskArchived",
    "TaskCreated",
    "TaskForked",
    "Upcasters",
    "apply",
    "fold",
]


class Event:
    """Base of every event. Subclasses are slotted dataclasses, never changed once made.

    ``version`` is the shape's schema version; records stored under an older
    version are migrated on read by :class:`Upcasters`.
    """

    __slots__ = ()
    version: ClassVar[int] = 1
    event_type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


EVENT_TYPES: dict[str, type[Event]] = {}
_E = TypeVar("_E", bound=Event)


@dataclass_transform()
def _event(cls: type[_E]) -> type[_E]:
    """Register an event class under its own name and make it a slotted dataclass.

    Events are facts and tether never changes one once made; they are not
    ``frozen`` only because a frozen dataclass costs three times as much to build,
    and one is built for every step a task takes.
    """
    cls = dataclass(slots=True)(cls)
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
class TaskForked(Event):
    """The first event of a fork: it shares its parent's events up to ``at`` and goes on from there."""

    task_id: str
    parent_task_id: str
    at: int
    inputs: dict[str, Any] | None = None
    session_id: str | None = None
    """The fork's own branch of its parent's conversation, when the parent had one."""
    actor: str | None = None
    """Who made the fork (an API key's name, a user name), when the caller said."""


@_event
class TaskArchived(Event):
    """This branch was set aside by a rewind: it now lives as ``task_id``, and ``successor`` took its place."""

    task_id: str
    successor: str
    actor: str | None = None
    """Who rewound the task, when the caller said."""


@_event
class StatusChanged(Event):
    status: str
    reason: str | None = None
    wake_at: float | None = None


@_event
class PlanSet(Event):
    steps: list[str]


@_event
class SessionRead(Event):
    """The task read its conversation (``ctx.session``) as it stood at session version ``upto``.

    ``s`` is the conversation operation's ordinal in the task (like a call's ``n``): a
    replay gives read ``s`` exactly what it saw the first time.
    """

    s: int
    session_id: str
    upto: int


@_event
class SessionWritten(Event):
    """The task appended session events ``first``..``last`` (messages, or a summary) as operation ``s``."""

    s: int
    session_id: str
    first: int
    last: int
    roles: list[str] = dataclasses.field(default_factory=list)
    """The roles of the messages written (``summary`` for a compaction), for history and ``show``."""


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
    actor: str | None = None
    """Who answered (an API key's name, a user name), when the caller said."""


@_event
class InputRejected(Event):
    """An answer sent before the task asked did not fit the wait's schema when it asked: discarded."""

    key: str
    reason: str


@_event
class InputTimedOut(Event):
    """Nobody answered before the wait's timeout: the task sees ``InputTimeout`` at that point."""

    key: str


@_event
class SleepScheduled(Event):
    """A durable sleep until ``until`` (epoch seconds)."""

    until: float


@_event
class CancelRequested(Event):
    reason: str | None = None
    actor: str | None = None
    """Who asked for the cancellation, when the caller said."""


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


@_event
class PatchMarked(Event):
    """The task's code took the new path of ``ctx.patched(name)``: replays take it again."""

    name: str


@_event
class RetryRequested(Event):
    """A failed task was sent to run again with the code as it is now (``app.retry``).

    ``retired`` are the seqs of the failure's own records (the call's give-up, the failed
    steps, the compensations that ran): a replay passes over them. The failed call gets a
    fresh round of attempts under its key. ``after_n``/``shift``: calls the code issues after
    call ``after_n`` take ordinals ``shift`` higher, past the compensations' ordinals.
    """

    failure_type: str
    failure_message: str
    retired: list[int] = dataclasses.field(default_factory=list)
    calls: list[int] = dataclasses.field(default_factory=list)
    """Ordinals of calls whose give-up was retired: they run again."""
    after_n: int = 0
    shift: int = 0
    actor: str | None = None
    """Who asked for the retry, when the caller said."""


class Recorded(NamedTuple):
    """An event as stored: its sequence number in the stream and when it was appended (epoch seconds)."""

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


class _Draft:
    """A private, mutable working copy of a state while a batch of events is folded onto it.

    Collections are copied the first time a rule changes them (once per batch), so
    folding k events onto a state costs O(state + k), not O(state × k). The input
    state is never touched; :meth:`freeze` makes the new immutable state.
    """

    __slots__ = ("owned", "values")

    def __init__(self, state: TaskState) -> None:
        self.values = dict(state.__dict__)
        self.owned: set[str] = set()

    def own_list(self, name: str) -> list[Any]:
        if name not in self.owned:
            self.values[name] = list(self.values[name])
            self.owned.add(name)
        return self.values[name]  # type: ignore[no-any-return]

    def own_dict(self, name: str) -> dict[str, Any]:
        if name not in self.owned:
            self.values[name] = dict(self.values[name])
            self.owned.add(name)
        return self.values[name]  # type: ignore[no-any-return]

    def call_at(self, n: int) -> int:
        i = call_index(self.values["calls"], n)
        if i is None:
            raise TetherError(f"event refers to call #{n}, but task {self.values['task_id']!r} has no such call")
        return i

    def call(self, n: int) -> ToolCall:
        return self.values["calls"][self.call_at(n)]  # type: ignore[no-any-return]

    def replace_call(self, n: int, changes: dict[str, Any]) -> None:
        i = self.call_at(n)
        calls = self.own_list("calls")
        calls[i] = _evolve(calls[i], changes)

    def open_call(self, call: ToolCall) -> None:
        """Add a new call in ordinal order (parallel calls open in the order they finish)."""
        calls = self.own_list("calls")
        if not calls or calls[-1].n < call.n:
            calls.append(call)
        else:
            calls.insert(bisect_left(calls, call.n, key=lambda c: c.n), call)

    def freeze(self, template: TaskState) -> TaskState:
        values = self.values
        for name in self.owned:
            if type(values[name]) is list:
                values[name] = tuple(values[name])
        new = object.__new__(type(template))
        object.__setattr__(new, "__dict__", values)
        object.__setattr__(new, "__pydantic_fields_set__", template.__pydantic_fields_set__ | values.keys())
        object.__setattr__(new, "__pydantic_extra__", None)
        object.__setattr__(new, "__pydantic_private__", None)
        return new


def _replace_step(d: _Draft, name: str, changes: dict[str, Any]) -> None:
    """Update the first unfinished step of that name (else the last one); a new name joins the plan."""
    plan = d.own_list("plan")
    match = next((i for i, step in enumerate(plan) if step.name == name and step.status != "completed"), None)
    if match is None:
        match = next((i for i in range(len(plan) - 1, -1, -1) if plan[i].name == name), None)
    if match is None:
        plan.append(_make(Step, name=name, **changes))  # ctx.step works without ctx.plan
    else:
        plan[match] = _evolve(plan[match], changes)


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


# One rule per event type: it changes the draft, given the event, its time and its epoch.
_Rule = Callable[[_Draft, Any, datetime, float], None]
_RULES: dict[type[Event], _Rule] = {}


def _rule(event_type: type[Event]) -> Callable[[_Rule], _Rule]:
    def register(fn: _Rule) -> _Rule:
        _RULES[event_type] = fn
        return fn

    return register


@_rule(TaskForked)
def _task_forked(d: _Draft, ev: TaskForked, at: datetime, epoch: float) -> None:
    # A new task: it starts pending, whatever its parent was doing at that point.
    values = d.values
    values.update(
        task_id=ev.task_id,
        parent=_make(ParentRef, task_id=ev.parent_task_id, seq=ev.at),
        status=Status.PENDING,
        output=None,
        failure=None,
        cancel_reason=None,
        wake_at=None,
        superseded_by=None,
        created_at=at,
    )
    if ev.inputs is not None:
        values["inputs"] = ev.inputs
    if ev.session_id is not None:
        values["session_id"] = ev.session_id


@_rule(TaskArchived)
def _task_archived(d: _Draft, ev: TaskArchived, at: datetime, epoch: float) -> None:
    d.values["task_id"] = ev.task_id
    d.values["superseded_by"] = ev.successor


@_rule(StatusChanged)
def _status_changed(d: _Draft, ev: StatusChanged, at: datetime, epoch: float) -> None:
    target = Status(ev.status)
    check_status(d.values["status"], target)
    d.values["status"] = target
    d.values["wake_at"] = _ts(ev.wake_at) if ev.wake_at is not None else None
    if target is not Status.AWAITING_INPUT:
        d.values["waiting"] = None


@_rule(PlanSet)
def _plan_set(d: _Draft, ev: PlanSet, at: datetime, epoch: float) -> None:
    d.values["plan"] = [_make(Step, name=name) for name in ev.steps]
    d.owned.add("plan")


def _attach_session(d: _Draft, session_id: str, version: int) -> None:
    values = d.values
    if values["session_id"] != session_id:
        values["session_id"] = session_id  # the conversation made for a task that named none
    if version > values["session_version"]:
        values["session_version"] = version


@_rule(SessionRead)
def _session_read(d: _Draft, ev: SessionRead, at: datetime, epoch: float) -> None:
    _attach_session(d, ev.session_id, ev.upto)


@_rule(SessionWritten)
def _session_written(d: _Draft, ev: SessionWritten, at: datetime, epoch: float) -> None:
    _attach_session(d, ev.session_id, ev.last)
    plan = d.values["plan"]
    running = next((i for i in range(len(plan) - 1, -1, -1) if plan[i].status == "running"), None)
    if running is not None:  # the messages a step added show with the step
        step = plan[running]
        added = (*step.messages, *range(ev.first, ev.last + 1))
        d.own_list("plan")[running] = _evolve(step, {"messages": added})


@_rule(StepStarted)
def _step_started(d: _Draft, ev: StepStarted, at: datetime, epoch: float) -> None:
    _replace_step(d, ev.name, {"status": "running", "started_at": at})


@_rule(StepCompleted)
def _step_completed(d: _Draft, ev: StepCompleted, at: datetime, epoch: float) -> None:
    _replace_step(d, ev.name, {"status": "completed", "finished_at": at, "error": None})


@_rule(StepFailed)
def _step_failed(d: _Draft, ev: StepFailed, at: datetime, epoch: float) -> None:
    _replace_step(d, ev.name, {"status": "failed", "finished_at": at, "error": ev.error})


@_rule(CallStarted)
def _call_started(d: _Draft, ev: CallStarted, at: datetime, epoch: float) -> None:
    attempt = _make(Attempt, number=ev.attempt, started_at=at)
    if call_index(d.values["calls"], ev.n) is None:
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
        d.open_call(call)
    else:
        previous = d.call(ev.n).attempts
        d.replace_call(ev.n, {"attempts": (*previous, attempt), "status": "intended"})


@_rule(CallCompleted)
def _call_completed(d: _Draft, ev: CallCompleted, at: datetime, epoch: float) -> None:
    if ev.key is not None and call_index(d.values["calls"], ev.n) is None:
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
        d.open_call(call)
        return
    attempts = d.call(ev.n).attempts
    if attempts and attempts[-1].number == ev.attempt:
        attempts = (*attempts[:-1], _evolve(attempts[-1], {"finished_at": at, "duration": ev.duration}))
    else:  # a readonly retry writes no intent: this event is the whole attempt
        started = _ts(epoch - ev.duration)
        attempt = _make(Attempt, number=ev.attempt, started_at=started, finished_at=at, duration=ev.duration)
        attempts = (*attempts, attempt)
    d.replace_call(ev.n, {"status": "completed", "result": ev.result, "finished_at": at, "attempts": attempts})


@_rule(CallAttemptFailed)
def _attempt_failed(d: _Draft, ev: CallAttemptFailed, at: datetime, epoch: float) -> None:
    attempts = d.call(ev.n).attempts
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
    d.replace_call(ev.n, {"attempts": attempts})


@_rule(CallFailed)
def _call_failed(d: _Draft, ev: CallFailed, at: datetime, epoch: float) -> None:
    d.replace_call(ev.n, {"status": "failed", "finished_at": at})


@_rule(DecisionMade)
def _decision_made(d: _Draft, ev: DecisionMade, at: datetime, epoch: float) -> None:
    decision = _make(
        Decision, name=ev.name, choice=ev.choice, rationale=ev.rationale, alternatives=ev.alternatives, at=at
    )
    d.own_list("decisions").append(decision)


@_rule(ObservationRecorded)
def _observed(d: _Draft, ev: ObservationRecorded, at: datetime, epoch: float) -> None:
    d.own_dict("observations")[ev.key] = _make(
        Observation,
        key=ev.key,
        value=ev.value,
        source=ev.source,
        as_of=datetime.fromisoformat(ev.as_of) if ev.as_of else None,
        recorded_at=at,
    )


@_rule(DataUpdated)
def _data_updated(d: _Draft, ev: DataUpdated, at: datetime, epoch: float) -> None:
    d.own_dict("data").update(ev.fields)
    if ev.data_version is not None:
        d.values["data_version"] = ev.data_version


@_rule(DataMigrated)
def _data_migrated(d: _Draft, ev: DataMigrated, at: datetime, epoch: float) -> None:
    d.values["data"] = ev.data
    d.owned.discard("data")
    d.values["data_version"] = ev.to_version


@_rule(InputRequested)
def _input_requested(d: _Draft, ev: InputRequested, at: datetime, epoch: float) -> None:
    d.values["waiting"] = _make(
        Waiting,
        key=ev.key,
        prompt=ev.prompt,
        input_schema=ev.schema,
        timeout_at=_ts(ev.timeout_at) if ev.timeout_at is not None else None,
        requested_at=at,
    )


@_rule(InputReceived)
def _input_received(d: _Draft, ev: InputReceived, at: datetime, epoch: float) -> None:
    d.own_dict("received")[ev.key] = ev.value
    waiting = d.values["waiting"]
    if waiting is not None and waiting.key == ev.key:
        d.values["waiting"] = None


@_rule(InputRejected)
def _input_rejected(d: _Draft, ev: InputRejected, at: datetime, epoch: float) -> None:
    d.own_dict("received").pop(ev.key, None)


@_rule(InputTimedOut)
def _input_timed_out(d: _Draft, ev: InputTimedOut, at: datetime, epoch: float) -> None:
    waiting = d.values["waiting"]
    if waiting is not None and waiting.key == ev.key:
        d.values["waiting"] = None


@_rule(SleepScheduled)
def _sleep_scheduled(d: _Draft, ev: SleepScheduled, at: datetime, epoch: float) -> None:
    return None  # the wake-up time goes on the status change that suspends the task


@_rule(CancelRequested)
def _cancel_requested(d: _Draft, ev: CancelRequested, at: datetime, epoch: float) -> None:
    d.values["cancel_reason"] = ev.reason or "cancelled"


@_rule(PhaseChanged)
def _phase_changed(d: _Draft, ev: PhaseChanged, at: datetime, epoch: float) -> None:
    phases = d.values["phases"]
    if phases is None:
        raise InvalidTransition("phase", d.values["phase"], ev.phase, [])
    Phases(phases).check(d.values["phase"], ev.phase)
    d.values["phase"] = ev.phase


@_rule(OutputSet)
def _output_set(d: _Draft, ev: OutputSet, at: datetime, epoch: float) -> None:
    d.values["output"] = ev.output


@_rule(PatchMarked)
def _patch_marked(d: _Draft, ev: PatchMarked, at: datetime, epoch: float) -> None:
    pass  # a marker for replay; it changes no state


@_rule(RetryRequested)
def _retry_requested(d: _Draft, ev: RetryRequested, at: datetime, epoch: float) -> None:
    values = d.values
    values.update(status=Status.PENDING, failure=None, output=None, wake_at=None)
    for n in ev.calls:
        call = d.call(n)
        last = call.attempts[-1].number if call.attempts else 0
        d.replace_call(n, {"status": "intended", "finished_at": None, "retried_after": last})
    if any(step.status == "failed" for step in values["plan"]):
        plan = d.own_list("plan")
        again = {"status": "running", "finished_at": None, "error": None}
        plan[:] = [_evolve(step, again) if step.status == "failed" else step for step in plan]


@_rule(FailureRecorded)
def _failure_recorded(d: _Draft, ev: FailureRecorded, at: datetime, epoch: float) -> None:
    d.values["failure"] = _make(
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
