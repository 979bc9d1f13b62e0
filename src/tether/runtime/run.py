"""The run: one execution of a task's code while holding its lease — replay up to the end of the
record, then live work — and the paths out of it (completed, suspended, failed with compensation,
cancelled, interrupted). ``App``, the worker and time travel call this room; it calls no facade."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from tether.canonical import as_json
from tether.errors import (
    Cancelled,
    InvalidInputError,
    NonDeterminismError,
    OutcomeUnknownError,
    RunInterrupted,
    Suspend,
    TetherError,
    ToolError,
)
from tether.events import (
    CALL_EVENTS,
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallInDoubt,
    CallStarted,
    CancelRequested,
    DataMigrated,
    Event,
    FailureRecorded,
    OutputSet,
    Recorded,
    RetryRequested,
    RunTraced,
    StatusChanged,
    StepFailed,
    TaskForked,
    in_doubt_call,
)
from tether.log.call_reads import calls_from
from tether.model import TaskState
from tether.model.status import TERMINAL, Status
from tether.runtime._flow import RUNNING_TASK, Commit, Flow, Invoke, Io, Outcome, Wait, drive, drive_async
from tether.runtime._recording import NOT_A_TASK_FAILURE, Recorder, ReplayEnd, upcast_data
from tether.runtime._replay import describe
from tether.runtime.calls import Calls
from tether.runtime.context import AsyncTaskContext, TaskContext
from tether.runtime.handles import TaskHandle
from tether.runtime.leases import Heartbeat, acquire
from tether.runtime.specs import TaskSpec
from tether.telemetry import hooks as telemetry
from tether.timetravel import ReplayReport

if TYPE_CHECKING:
    from tether.runtime.engine import Engine

__all__ = ["drive_task", "execute", "replay", "retry_event"]

T = TypeVar("T")

Opener = Callable[[], tuple[Recorded | None, TaskState]]
"""What creates (or finds) the task a run opens: its first record when it created it, and its state."""


def execute(
    engine: Engine,
    spec: TaskSpec,
    task: str | Opener,
    *,
    token: int | None = None,
    force: bool = False,
    at: int | None = None,
) -> Flow[TaskHandle]:
    """Run (or replay, then continue) a task while holding its lease: ``token``, or one taken here.
    ``task``: its id, or what creates it (or finds it) and returns its state.

    Its store I/O is yielded (``Io``, ``Commit``): an async task's event loop never waits on it.
    What a run reads and takes before its code runs (the task, its lease, its record) is one
    ``Io``; so is what it does once the code has stopped (the state it ends in read, a snapshot
    if one is due, the lease released): an async run crosses to a thread twice, not five times.

    An async run counts among those sharing the commit thread from before it opens until it has
    let go: while it opens, another run's records are not written on their (shared) loop."""
    if not spec.is_async:
        return (yield from _held(engine, spec, task, token, force, at))
    engine.commits.run_started()
    try:
        return (yield from _held(engine, spec, task, token, force, at))
    finally:
        engine.commits.run_ended()


def _held(
    engine: Engine, spec: TaskSpec, task: str | Opener, token: int | None, force: bool, at: int | None = None
) -> Flow[TaskHandle]:
    """``execute``'s run: opened, its code run under the lease's heartbeat, then let go."""
    closed = False  # the driver dropped the flow (GeneratorExit): it can yield nothing more
    rec: Recorder | None = None
    stopped = False  # the run ended the way it returns (not raised): its handle is the latest state
    run: telemetry.Run | None = None
    error: BaseException | None = None
    latest = None
    opened = yield Io(_open, (engine, task, token, force, spec.is_async, at))
    if isinstance(opened, TaskHandle):
        return opened  # finished already: nothing to hold
    task_id, token, history, state = opened
    try:
        with Heartbeat(engine.store, engine.tenant, task_id, token, engine.lease_ttl):
            if state.status in TERMINAL:
                return TaskHandle.of(state)
            rec = Recorder(engine, spec, state, history, token)
            run = telemetry.run_began(state, history, engine.worker_id)
            rec.trace = run.trace if run is not None else None
            yield from _code(rec, spec, state)
            stopped = True
    except GeneratorExit as exit:
        closed, error = True, exit
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        if rec is not None:
            rec.end()  # a parallel branch still going records nothing more
        if closed:
            _let_go(engine, task_id, token, None)
        else:
            latest = yield Io(_let_go, (engine, task_id, token, rec if stopped else None))
        telemetry.run_ended(run, latest, error)
    assert latest is not None
    return TaskHandle.of(latest)


def _open(
    engine: Engine, task: str | Opener, token: int | None, force: bool, read_calls: bool = False, at: int | None = None
) -> TaskHandle | tuple[str, int, list[Recorded], TaskState]:
    """What a run needs before its code runs: the task (created by ``task`` when it is not an id),
    the lease (``token``, or taken here) and the task's record; or the task's handle when it has
    finished and there is nothing to run.

    A task ``task`` creates is created held by this run (lease token 1), and its record is the one
    event it was created with: no lease to take and nothing to read back. Whatever another process
    appends meanwhile (a cancel) is met by the run's first write, as at any other point.
    ``read_calls``: read every call's record now (an async run's, whose replay would read those
    not in memory on its event loop: put away when a run stopped, or not read since a load)."""
    if isinstance(task, str):
        task_id, state = task, None
    else:
        first, state = task()
        if first is not None:
            engine.log.hold(state.task_id)
            return state.task_id, 1, [first], state
        task_id = state.task_id
    if token is None:
        state = state or engine.log.load(task_id)
        if state.status in TERMINAL:
            return TaskHandle.of(state)
        _check_settled(state)
        if _waits_unanswered(state):
            return TaskHandle.of(state)
        if at is not None and _inside_a_call(state):
            at = None  # the holder may be doing that call's effect right now: it carries the request out
        token = acquire(engine.store, engine.tenant, task_id, engine.worker_id, engine.lease_ttl, force=force, at=at)
    engine.log.hold(task_id)
    try:
        history, state = _record_of(engine, task_id)
        if read_calls:  # an async run's replay reads its calls on its loop: every record read here, off it,
            state.calls.read_all(calls_from(history, state))  # from the events just read, not the store again
    except BaseException:
        _let_go(engine, task_id, token, None)
        raise
    return task_id, token, history, state


def _waits_unanswered(state: TaskState) -> bool:
    """Whether the task waits for an input that has not come, with no timeout due and no cancel:
    a run would replay to the same wait and record it again (two status changes, every time).
    What a worker would claim of it (the answer, the timeout, the cancel) is what a run acts on."""
    if state.status is not Status.AWAITING_INPUT or state.waiting is None or state.cancel_reason is not None:
        return False
    return state.wake_at is None or state.wake_at.timestamp() > time.time()


def _inside_a_call(state: TaskState) -> bool:
    """Whether the task's record ends inside an attempt of a side-effecting call: its intent is
    written and its outcome is not (a readonly call writes no intent, and has no effect to lose).

    A live holder that wrote nothing since a cancel request (``acquire``'s ``at``) may still be in
    such an attempt, begun before the request. Taking its lease then would cut the attempt off with
    its effect done: the new holder finds the call in doubt and would run it again under its key (a
    compensation, which goes on past a cancel) or stop for the cancel with the effect left
    uncompensated (any other call). So such a lease is not taken: the holder's next write meets the
    request, and it carries the cancel out itself."""
    for n in state.calls.open_ordinals():
        call = state.call(n)
        if (
            call is not None
            and call.status == "intended"
            and (not call.attempts or call.attempts[-1].finished_at is None)
        ):
            return True
    return False


def _check_settled(state: TaskState) -> None:
    """Raise the :class:`OutcomeUnknownError` a task waiting on its call in doubt stops at, before the
    run takes its lease: until a person settles the call, a run of it writes nothing at all (unless
    a cancel came, which the run carries out)."""
    n = in_doubt_call(state.waiting.key) if state.waiting is not None else None
    call = state.call(n) if n is not None else None
    if call is not None and call.status == "intended" and state.cancel_reason is None:
        raise OutcomeUnknownError(call.key, task_id=state.task_id, n=call.n, tool=call.tool)


def _code(rec: Recorder, spec: TaskSpec, state: TaskState) -> Flow[None]:
    """The task's code, and what the run records around it; returns once the run has stopped the
    way it returns a handle (completed, failed, cancelled, suspended)."""
    calls = Calls(rec)
    ctx = (AsyncTaskContext if spec.is_async else TaskContext)(rec, calls)
    yield from _begin(rec, spec, state)
    running = RUNNING_TASK.set(rec.task_id)
    try:
        try:
            outcome = yield from _task_code(spec, ctx, state)
        except KeyboardInterrupt as stop:
            raise RunInterrupted(rec.task_id, stop) from None
        except Cancelled as cancel:
            yield from end_cancelled(rec, calls, cancel.reason)
            return
        finally:
            RUNNING_TASK.reset(running)
        assert outcome is not None
        yield from _end(rec, calls, outcome)
    except Suspend:
        # Waiting or sleeping: no process needs to stay. A compensation's long retry backoff too: the
        # task sleeps, and the run that wakes it replays to its end and goes on compensating. What an
        # async task's other branches still write (a wait's own record, when a branch that went live
        # after the wait was decided stopped the code first) is written before the run lets go.
        while rec.branches:
            yield Wait(0.001)
        return


def _task_code(spec: TaskSpec, ctx: TaskContext | AsyncTaskContext, state: TaskState) -> Flow[Outcome]:
    """The task's code, run. What stops a branch of an ``asyncio.TaskGroup`` without failing the task
    (a wait, a durable sleep, a cancel, a replay reaching the end of the record) reaches the run
    wrapped in a group: it is raised as the branch raised it, as ``asyncio.gather`` would."""
    try:
        outcome: Outcome = yield Invoke(spec.fn, (ctx,), spec.inputs_for_call(state.inputs))
    except BaseExceptionGroup as group:
        signals, rest = group.split(_SIGNALS)
        if signals is None or rest is not None:
            raise
        leaves = list(_leaves(signals))
        raise next((e for e in leaves if isinstance(e, Cancelled)), leaves[0]) from None
    return outcome


_SIGNALS = (Suspend, Cancelled, ReplayEnd)


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from _leaves(error)
        else:
            yield error


def _begin(rec: Recorder, spec: TaskSpec, state: TaskState) -> Flow[None]:
    """What a run records before the task's code runs: the task running again, and its data
    migrated to the version the code declares. With a record to replay, they are written when the
    code goes live, or with its first write (:meth:`Recorder.defer_until_live`): code that no longer
    replays the history (a divergence, raised) leaves the task as it was — waiting, sleeping."""
    begun: list[Event] = []
    if state.status is not Status.RUNNING:
        begun.append(StatusChanged(status=Status.RUNNING.value))
    if rec.cancel_reason is not None and state.cancel_reason is None:
        # A fork carrying its parent's cancel (:meth:`Replay.carried_cancel`) records it as its own.
        begun.append(CancelRequested(reason=rec.cancel_reason))
    if spec.state is not None and spec.data_version is not None and state.data_version != spec.data_version:
        migrated = spec.state.model_validate(upcast_data(spec, state)).model_dump(mode="json")
        to = spec.data_version
        begun.append(DataMigrated(data=migrated, from_version=state.data_version, to_version=to))
    traced = rec.trace.traced() if rec.trace is not None else None
    if traced is not None:
        begun.append(traced)  # where this run's trace is, for the runs after it: written with what it begins with
    if begun and rec.cursor.done:
        yield Commit(rec.writer, begun)
    elif begun:
        rec.defer_until_live(begun)


def _end(rec: Recorder, calls: Calls, outcome: Outcome) -> Flow[None]:
    """The way out of a run whose code returned or raised: cancelled (a cancel came meanwhile),
    completed with its output, or failed with compensation. What stops the run itself (a lost
    lease, a non-determinism) is raised, recording nothing."""
    if rec.cancel_reason is not None and not isinstance(outcome.value, NOT_A_TASK_FAILURE):
        yield from end_cancelled(rec, calls, rec.cancel_reason)
    elif outcome.ok:
        # Only the code's records count as work it left: a run woken in the compensations of a task
        # whose returned value could not be stored meets them here, and fails that value again below.
        left = rec.cursor.first_left(code_only=True)
        if left is not None:
            raise NonDeterminismError(
                rec.task_id, left.seq, f"more work ({left.event.event_type})", "the task to return"
            )
        try:
            done = [OutputSet(output=outcome.value), StatusChanged(status=Status.COMPLETED.value)]
            yield Commit(rec.writer, done)
        except InvalidInputError as exc:
            yield from fail(rec, calls, exc)
    else:
        if isinstance(outcome.value, NOT_A_TASK_FAILURE):
            if isinstance(outcome.value, OutcomeUnknownError):
                yield from _park(rec, outcome.value)
            raise outcome.value
        yield from fail(rec, calls, outcome.value)


def _park(rec: Recorder, error: OutcomeUnknownError) -> Flow[None]:
    """Leave a task whose call is in doubt waiting for a person (``on_unknown="raise"``), so that no
    worker takes it up again and again, each run meeting the same doubt: it waits on the call's key
    (:func:`in_doubt_key`) until ``app.resolve_call`` settles the call (a run of a task already
    waiting on it stops before it takes the lease: :func:`_check_settled`). Nothing is written by a
    replay, which writes nothing, nor for a ledger key, which is not this task's call."""
    n = error.n
    if error.task_id != rec.task_id or n is None or rec.replay_only:
        return
    rec.going_live()
    while rec.branches:  # an async task's calls under way beside it end first, recorded (as for a wait)
        yield Wait(0.001)
    parked = [
        CallInDoubt(n=n, key=error.key, tool=error.tool or "?"),
        StatusChanged(status=Status.AWAITING_INPUT.value, reason=f"call #{n} is in doubt"),
    ]
    yield Commit(rec.writer, parked)


def _record_of(engine: Engine, task_id: str) -> tuple[list[Recorded], TaskState]:
    """The task's history and the state at its end (from memory when this log just loaded it)."""
    history = engine.log.events(task_id)
    return history, engine.log.load_as_writer(task_id, history[-1].seq)


def _let_go(engine: Engine, task_id: str, token: int, rec: Recorder | None) -> TaskState | None:
    """The end of a run: the state it ends in (``rec``'s latest, with every call's record, which its
    handle gives; read here, off an async task's loop, whose thread must never wait on the log's
    locks), a snapshot if one is due, the log's hold on the task's memory and the lease released
    (also when the read fails). Read first: the log then puts the records it keeps away."""
    latest = None
    try:
        if rec is not None:
            latest = rec.latest
    finally:
        try:
            engine.log.release(task_id)
            engine.store.release_lease(engine.tenant, task_id, token)
        except TetherError:
            pass  # the lease runs out by itself; the snapshot is only a cache
    return latest


def end_cancelled(rec: Recorder, calls: Calls, reason: str) -> Flow[None]:
    """Run the compensations of completed calls in reverse order, then mark the task cancelled."""
    yield from calls.compensate()
    yield Commit(rec.writer, [StatusChanged(status=Status.CANCELLED.value, reason=reason)])


def fail(rec: Recorder, calls: Calls, error: BaseException) -> Flow[None]:
    """Record the failure, run the compensations in reverse order, and mark the task failed."""
    if rec.latest.failure is None:
        yield Commit(rec.writer, [failure_event(rec.latest, error)])
    yield from calls.compensate()
    yield Commit(rec.writer, [StatusChanged(status=Status.FAILED.value, reason=f"{type(error).__name__}: {error}")])


def failure_event(state: TaskState, error: BaseException) -> FailureRecorded:
    step = next((s.name for s in state.plan if s.status == "failed"), None)
    if isinstance(error, ToolError):
        call = next((c for c in state.calls if c.key == error.key), None)
        return FailureRecorded(
            exception_type=error.error_type,
            message=error.error_message,
            traceback=error.traceback,
            step=step,
            tool=error.tool,
            call_key=error.key,
            input=call.args if call else None,
            output=None,
        )
    return FailureRecorded(
        exception_type=type(error).__name__,
        message=str(error),
        traceback="".join(traceback.format_exception(error)),
        step=step,
    )


def replay(engine: Engine, spec: TaskSpec, task_id: str, upto: int | None) -> Flow[ReplayReport]:
    """Run the task's current code against its record, executing nothing and writing nothing: the
    code, then the compensations a failure or a cancel ran after it, as the run went (see ``_end``)."""
    history = engine.log.events(task_id, upto=upto)
    state = engine.log.state_at(task_id, history[-1].seq)
    rec = Recorder(engine, spec, state, history, None, replay_only=True)
    if state.status is Status.FAILED:  # a cancel asked for while the failure compensated came too
        rec.cancel_reason = None  # late for the run, which ended failed: replayed as the failure it was
    calls = Calls(rec)
    ctx = (AsyncTaskContext if spec.is_async else TaskContext)(rec, calls)
    recorded = len(history)
    running = RUNNING_TASK.set(task_id)
    outcome: Outcome | None = None  # None: the code stopped for the cancel
    try:
        try:
            outcome = yield from _task_code(spec, ctx, state)
        except Cancelled:
            pass
        finally:
            RUNNING_TASK.reset(running)
        if outcome is not None and outcome.ok and not _cancelled(rec, outcome):
            outcome = _as_recorded(outcome)
        diverged = yield from _replay_compensations(rec, calls, state, outcome)
    except (ReplayEnd, Suspend):
        return ReplayReport(task_id, True, rec.cursor.walked, recorded, "reached the end of the record")
    finally:
        rec.end()
    if diverged is not None:
        return ReplayReport(task_id, False, rec.cursor.walked, recorded, str(diverged), diverged)
    if outcome is None or _cancelled(rec, outcome):
        return _cancelled_verdict(rec, recorded)
    return _verdict(rec, state, outcome, recorded)


def _as_recorded(outcome: Outcome) -> Outcome:
    """What the code returned, as ``_end`` records it: a value that cannot be stored fails the task."""
    try:
        as_json(outcome.value)
    except InvalidInputError as exc:
        return Outcome(False, exc, outcome.duration)
    return outcome


def _cancelled(rec: Recorder, outcome: Outcome) -> bool:
    """Whether a run whose code ended with ``outcome`` ends cancelled (``_end``'s first way out)."""
    return rec.cancel_reason is not None and not isinstance(outcome.value, NOT_A_TASK_FAILURE)


def _replay_compensations(
    rec: Recorder, calls: Calls, state: TaskState, outcome: Outcome | None
) -> Flow[NonDeterminismError | None]:
    """The compensations a live run runs where the code ended (cancelled, or failed), replayed from
    their records; the divergence, if the code now compensates otherwise. A compensation past the end
    of a record that goes on (a crash, ``upto``) stops the replay there, as any live work does."""
    if outcome is not None and not _cancelled(rec, outcome):
        if outcome.ok or isinstance(outcome.value, NOT_A_TASK_FAILURE):
            return None  # completed, or the run itself stopped: nothing is compensated
    try:
        yield from calls.compensate()
    except NonDeterminismError as error:
        return error
    except ReplayEnd:
        if state.status not in TERMINAL:
            return None
        last = rec.cursor.history[-1].seq
        return NonDeterminismError(
            rec.task_id, last, f"the end of the task ({state.status.value})", "a compensation it did not run"
        )
    return None


def _cancelled_verdict(rec: Recorder, recorded: int) -> ReplayReport:
    """A replay that stopped for the task's cancel and replayed its compensations."""
    walked = rec.cursor.walked
    left = rec.cursor.first_left()
    if left is not None:
        error = NonDeterminismError(rec.task_id, left.seq, f"more work ({describe(left.event)})", "the task to end")
        return ReplayReport(rec.task_id, False, walked, recorded, str(error), error)
    stopped = "the code stops for the cancel and compensates, as recorded"
    return ReplayReport(rec.task_id, True, walked, recorded, stopped)


def _verdict(rec: Recorder, state: TaskState, outcome: Outcome, recorded: int) -> ReplayReport:
    """What a replay found, from how the code ended against the record: clean, or where they part."""
    task_id = rec.task_id
    walked = rec.cursor.walked
    if isinstance(outcome.value, NonDeterminismError):
        return ReplayReport(task_id, False, walked, recorded, str(outcome.value), outcome.value)
    if outcome.ok and state.failure is not None:
        found = f"the code now returns; the record failed with {state.failure.exception_type}"
        return ReplayReport(task_id, False, walked, recorded, found)
    left = rec.cursor.first_left()
    if left is not None:
        error = NonDeterminismError(
            task_id,
            left.seq,
            f"more work ({describe(left.event)})",
            "the task to end" if outcome.ok else f"it to raise {outcome.value!r}",
        )
        return ReplayReport(task_id, False, walked, recorded, str(error), error)
    if outcome.ok:
        if state.status is Status.COMPLETED and state.output != as_json(outcome.value):
            found = f"the code now returns {outcome.value!r}; the record has {state.output!r}"
            return ReplayReport(task_id, False, walked, recorded, found)
        return ReplayReport(task_id, True, walked, recorded, "the code returns")
    return _failure_verdict(rec, state, outcome.value, recorded)


def _failure_verdict(rec: Recorder, state: TaskState, error: BaseException, recorded: int) -> ReplayReport:
    """A replay whose code raised, every record walked: the failure the record has, or where it ends."""
    task_id, walked = rec.task_id, rec.cursor.walked
    error_type = error.error_type if isinstance(error, ToolError) else type(error).__name__
    if isinstance(error, NOT_A_TASK_FAILURE):  # the replay itself could not go on: never "clean"
        stopped = f"the replay stopped: {type(error).__name__}: {error}"
        return ReplayReport(task_id, False, walked, recorded, stopped)
    if state.status is Status.COMPLETED:
        return ReplayReport(task_id, False, walked, recorded, f"the code now raises {error_type}; the record completed")
    if state.failure is not None:
        if state.failure.exception_type != error_type:
            found = f"the code now raises {error_type}; the record failed with {state.failure.exception_type}"
            return ReplayReport(task_id, False, walked, recorded, found)
        return ReplayReport(task_id, True, walked, recorded, f"the code raises {error_type}, as recorded")
    if rec.cursor.done:  # the record ends here: a live run would fail the task at this point
        return ReplayReport(task_id, True, walked, recorded, f"the code raises {error_type} where the record ends")
    return ReplayReport(
        task_id, False, walked, recorded, f"the code now raises {error_type}; the record goes on without a failure"
    )


_UNWINDING = (StepFailed, CallStarted, CallCompleted, CallAttemptFailed, CallFailed)
_RUN_BEGINS = (StatusChanged, DataMigrated, RunTraced)  # what a run writes as it begins


def _before_forks(by_seq: dict[int, Recorded], failed_at: int, compensations: set[int]) -> tuple[int, int]:
    """Where the walk back over a failure's records starts (the seq before ``failed_at``), and where
    the failure began to be recorded (its compensations follow). A fork made in a failure's records
    (at the step that failed, at the failure record, among its compensations, at its end) fails again
    when it runs, and records the failure as its own after its fork point and its run's beginning:
    the walk passes over those, and over the parent's record of the same failure (with what followed
    it: compensations, the status), to the records the fork shares with its parent — the failure as
    it unwound — as a retry of the parent does."""
    seq, began = failed_at - 1, failed_at
    while True:
        at = seq
        while at in by_seq and isinstance(by_seq[at].event, _RUN_BEGINS):
            at -= 1
        if at not in by_seq or not isinstance(by_seq[at].event, TaskForked):
            return seq, began
        seq = at - 1
        while seq in by_seq and _after_failure(by_seq[seq].event, compensations):
            seq -= 1
        if seq not in by_seq or not isinstance(by_seq[seq].event, FailureRecorded):
            return at - 1, began  # forked in the unwinding, before the failure was recorded
        began = seq
        seq -= 1


def _after_failure(event: Event, compensations: set[int]) -> bool:
    """Whether ``event`` is what a run records after a failure record: compensations, the status."""
    if isinstance(event, _RUN_BEGINS):
        return True
    return type(event) in CALL_EVENTS and getattr(event, "n", None) in compensations


def retry_event(history: list[Recorded], state: TaskState, actor: str | None) -> RetryRequested:
    """The record of a retry: which of the failure's records a replay passes over, which calls run again."""
    failed_at = max((r.seq for r in history if type(r.event) is FailureRecorded), default=None)
    if failed_at is None:
        raise InvalidInputError(f"task {state.task_id!r} has no failure record to retry from")
    by_seq = {r.seq: r for r in history}
    retired: list[int] = []
    calls: list[int] = []
    failed_key = state.failure.call_key if state.failure else None
    failed_call = next((c.n for c in state.calls if failed_key is not None and c.key == failed_key), None)
    compensations = {c.n for c in state.calls if c.kind == "compensation"}
    seq, began = _before_forks(by_seq, failed_at, compensations)
    # The failure as it unwound: the steps it failed and the calls that gave up, back to the last
    # thing the code did in order (the events of parallel calls that ended meanwhile stay).
    while seq in by_seq and isinstance(by_seq[seq].event, _UNWINDING):
        event = by_seq[seq].event
        if isinstance(event, StepFailed):
            retired.append(seq)
        elif isinstance(event, CallFailed):
            retired.append(seq)
            calls.append(event.n)
        seq -= 1
    if failed_call is not None and failed_call not in calls:
        gave_up = [r.seq for r in history if isinstance(r.event, CallFailed) and r.event.n == failed_call]
        retired.extend(gave_up)
        calls.append(failed_call)
    for rec in history:
        n = getattr(rec.event, "n", None)
        if rec.seq > began and n in compensations:
            retired.append(rec.seq)
    ordinary = [c.n for c in state.calls if c.kind != "compensation"]
    after_n = max(ordinary, default=0)
    highest = max((c.n for c in state.calls), default=0)
    failure = state.failure
    return RetryRequested(
        failure_type=failure.exception_type if failure else "unknown",
        failure_message=failure.message if failure else "",
        retired=sorted(retired),
        calls=sorted(calls),
        after_n=after_n,
        shift=highest - after_n,
        actor=actor,
    )


def drive_task(
    spec: TaskSpec, make_flow: Callable[[], Flow[T]], name: str, twin: str, *, interruptible: bool = True
) -> T:
    """Run a flow with the driver the task needs: in plain Python, or on a fresh event loop for an
    async task (refused inside a running loop, before anything is done, pointing at ``twin``).

    ``interruptible``: SIGTERM stops the run like Ctrl-C does — cleanly, the lease released and
    the task left resumable (a worker has its own SIGTERM grace, so it passes ``False``)."""
    try:
        with sigterm_as_interrupt(interruptible):
            if spec.is_async:
                no_running_loop(name, twin)
                return _run_async(make_flow())
            return drive(make_flow())
    except RunInterrupted as stop:
        raise stop.with_traceback(None) from None  # one line saying how to resume, not tether's insides


def _run_async(flow: Flow[T]) -> T:
    """``asyncio.run`` of the flow, its result handed back beside the loop's main task, not as
    that task's result: when the loop closes, ``asyncio.run`` formats the task's repr (to put
    back the SIGINT handler), and the repr of a run's result holds the task's whole state.

    So is an interrupt that stops the run (``KeyboardInterrupt``, ``SystemExit``): asyncio raises
    those through the loop and leaves the task holding them, never retrieved, often in a cycle with
    the run's frames; whenever the collector then frees it, in whatever code is running, asyncio
    logs "Task exception was never retrieved" with a traceback (formatting one inside another
    ``ast.parse`` fails that parse on CPython 3.11: ``SystemError: AST constructor recursion depth
    mismatch``)."""
    box: list[T] = []
    stopped: list[BaseException] = []

    async def main() -> None:
        try:
            box.append(await drive_async(flow))
        except (KeyboardInterrupt, SystemExit) as stop:
            stopped.append(stop)

    try:
        asyncio.run(main())
    finally:
        if stopped:
            # The run's own account of its stop (RunInterrupted), over the interrupt a branch raised
            # through the loop, if one did: that one led to it, as the closing loop cancelled the run.
            raise stopped[0]
    return box[0]


@contextmanager
def sigterm_as_interrupt(active: bool) -> Iterator[None]:
    """While a run goes on in the main thread, SIGTERM raises KeyboardInterrupt, so it stops cleanly."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main interpreter's main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def no_running_loop(name: str, twin: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise TetherError(f"app.{name}() of an async task was called inside a running event loop; await app.{twin}()")
