"""The fold's rules: one per event type, each changing a draft of the state (``_RULES``).

A new event type needs a rule here, and a test in ``tests/unit/test_fold_rules.py`` (a test fails
without one).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from tether.errors import InvalidTransition
from tether.events._draft import _Draft, _evolve, _make
from tether.events.base import Event, Recorded, from_epoch
from tether.events.calls import CallAttemptFailed, CallCompleted, CallFailed, CallInDoubt, CallStarted, in_doubt_key
from tether.events.knowledge import (
    DataMigrated,
    DataUpdated,
    DecisionMade,
    InputReceived,
    InputRejected,
    InputRequested,
    InputTimedOut,
    ObservationRecorded,
)
from tether.events.observability import RunTraced, UsageRecorded
from tether.events.session import SessionRead, SessionWritten
from tether.events.task import (
    CancelRequested,
    FailureRecorded,
    OutputSet,
    PatchMarked,
    PhaseChanged,
    PlanSet,
    RetryRequested,
    SleepScheduled,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
    TaskArchived,
    TaskCreated,
    TaskForked,
)
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
from tether.model.calls import call_index
from tether.model.status import TERMINAL, Phases, Status, check_status

__all__ = ["_RULES", "_created"]


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
    at = from_epoch(rec.at)
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
        trace={"origin": ev.trace} if ev.trace else None,
        version=rec.seq,
        created_at=at,
        updated_at=at,
    )


# One rule per event type: it changes the draft, given the event, its time and its epoch.


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
        trace=None,  # a fork's runs tell a story of their own
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
    if d.values["status"] not in TERMINAL:
        # Set aside: its successor goes on in its place, and nothing runs it again (a worker took a
        # waiting or sleeping one when due, and its code made its calls a second time).
        d.values["status"] = Status.CANCELLED
        d.values["wake_at"] = None
        d.values["waiting"] = None


@_rule(StatusChanged)
def _status_changed(d: _Draft, ev: StatusChanged, at: datetime, epoch: float) -> None:
    target = Status(ev.status)
    check_status(d.values["status"], target)
    d.values["status"] = target
    d.values["wake_at"] = from_epoch(ev.wake_at) if ev.wake_at is not None else None
    if target is not Status.AWAITING_INPUT and target is not Status.RUNNING:
        # A run that resumes a waiting task passes through running on its way back to the same
        # question (replayed, not asked again): the question stays open until it is answered
        # (InputReceived), times out (InputTimedOut) or the task stops waiting (another status).
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
        started = from_epoch(epoch - ev.duration)
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
        started = from_epoch(epoch - ev.duration)
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
        attempts = (*attempts, _make(Attempt, number=ev.attempt, started_at=from_epoch(epoch - ev.duration), **update))
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


@_rule(UsageRecorded)
def _usage_recorded(d: _Draft, ev: UsageRecorded, at: datetime, epoch: float) -> None:
    # Several reports for one call add up: a model call made of parts reports each.
    usage: dict[int, Any] = d.own_dict("usage")  # type: ignore[assignment]  # keyed by call ordinal
    before = usage.get(ev.call, {})
    entry = {"at": epoch, "model": ev.model or before.get("model")}
    for name in ("input_tokens", "output_tokens", "cost"):
        value, earlier = getattr(ev, name), before.get(name)
        entry[name] = value if earlier is None else earlier if value is None else earlier + value
    usage[ev.call] = entry


@_rule(RunTraced)
def _run_traced(d: _Draft, ev: RunTraced, at: datetime, epoch: float) -> None:
    d.values["trace"] = {"origin": ev.origin, "run": ev.run}


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
        timeout_at=from_epoch(ev.timeout_at) if ev.timeout_at is not None else None,
        requested_at=at,
    )


@_rule(CallInDoubt)
def _call_in_doubt(d: _Draft, ev: CallInDoubt, at: datetime, epoch: float) -> None:
    # A wait like any other (listed, shown, never claimed until settled), on a key of tether's own:
    # the settlement (``app.resolve_call``) answers it.
    d.values["waiting"] = _make(
        Waiting,
        key=in_doubt_key(ev.n),
        prompt=(
            f"call #{ev.n} {ev.tool}() (key {ev.key!r}) started but its result was never recorded: it may or "
            "may not have happened. Check the other system, then settle it: tether resolve TASK "
            f"{ev.n} --result JSON if it happened, --not-happened to run it again under its key"
        ),
        input_schema=None,
        timeout_at=None,
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
        _retry_call(d, n)
    if any(step.status == "failed" for step in values["plan"]):
        plan = d.own_list("plan")
        again = {"status": "running", "finished_at": None, "error": None}
        plan[:] = [_evolve(step, again) if step.status == "failed" else step for step in plan]


def _retry_call(d: _Draft, n: int) -> None:
    """What a retry does to one of the calls it sends to run again: a fresh round of attempts."""
    call = d.call(n)
    last = call.attempts[-1].number if call.attempts else 0
    d.replace_call(n, {"status": "intended", "finished_at": None, "retried_after": last})


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
