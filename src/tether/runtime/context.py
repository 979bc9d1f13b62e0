"""The task context: what a task's code uses to record its work, and how it replays.

On resume a task's function runs again from the top. The context walks the
task's recorded events alongside the code: each operation that was recorded
(a call, a step, a decision, an observation...) is matched with its record and
returns what was recorded, without executing or writing anything. Once the
record runs out, operations run and are written. ``ctx.state`` and ``ctx.data``
show the state *as of the point the code has reached*, so a replayed branch
sees the same values it saw the first time.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import traceback
import types
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
from pydantic import BaseModel, ValidationError

from tether._keys import args_hash, as_json, call_key, json_default
from tether.errors import (
    Cancelled,
    ConflictError,
    InputTimeout,
    InvalidInputError,
    LeaseLostError,
    NonDeterminismError,
    OutcomeUnknownError,
    SchemaVersionError,
    StoreUnavailableError,
    Suspend,
    TetherError,
    ToolError,
)
from tether.events import (
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallStarted,
    CancelRequested,
    DataUpdated,
    DecisionMade,
    Event,
    InputReceived,
    InputRejected,
    InputRequested,
    InputTimedOut,
    ObservationRecorded,
    PatchMarked,
    PhaseChanged,
    PlanSet,
    Recorded,
    SleepScheduled,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
)
from tether.machine import Status
from tether.model import TaskState, ToolCall
from tether.runtime._flow import CURRENT_CALL, Flow, Invoke, Wait, _tuple_new, drive, drive_async, invoke
from tether.runtime._replay import ReleaseGate, Replay, describe
from tether.runtime.handles import check_against_schema
from tether.runtime.session import TaskSession
from tether.runtime.specs import TaskSpec, ToolSpec

if TYPE_CHECKING:
    from tether.runtime.app import App

__all__ = ["AsyncTaskContext", "CallInfo", "TaskContext", "current_call"]

# Errors that say "this run cannot go on here", not "this task failed": they leave the task
# as it is (no failure record, no step marked failed) and reach the caller.
NOT_A_TASK_FAILURE = (
    NonDeterminismError,
    OutcomeUnknownError,
    ConflictError,
    SchemaVersionError,
    StoreUnavailableError,
)

# What another process may append to a task while a run holds it (send_input, cancel).
_EXTERNAL = (InputReceived, CancelRequested)


class ReplayEnd(BaseException):
    """Stops a replay where the record runs out, before anything would run or be written."""

    def __init__(self, cursor: int) -> None:
        super().__init__(cursor)
        self.cursor = cursor


class CallInfo(NamedTuple):
    """The call running right now, as the tool sees it through :func:`current_call`."""

    task_id: str
    n: int
    tool: str
    key: str
    attempt: int


def current_call() -> CallInfo:
    """The recorded call this code runs inside: its idempotency ``key``, ``attempt`` and ``task_id``.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> @app.tool
        ... def send_invite(to: str) -> str:
        ...     return tether.current_call().key   # pass it to the mail API as its idempotency key
        >>> @app.task
        ... def invite(ctx):
        ...     return ctx.call(send_invite, "ada@example.com")
        >>> app.run(invite, task_id="t1").output
        't1:1:send_invite:...'
    """
    info: CallInfo | None = CURRENT_CALL.get()
    if info is None:
        raise TetherError("current_call() is only available inside a tool run by ctx.call()")
    return info


class _Issued(NamedTuple):
    """A call as the code issued it: its ordinal, what it runs, and its record if it has one."""

    n: int
    spec: ToolSpec
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    arguments: dict[str, Any]
    key: str
    record: ToolCall | None


class RunEnded(BaseException):
    """Raised in a parallel branch that tries to record after its run stopped (suspended, failed,
    ended): the branch's work is left as the record says, and a later run takes it up again."""


def _excerpt(arguments: Any, limit: int = 80) -> str:
    text = orjson.dumps(arguments, default=json_default).decode() if arguments is not None else ""
    text = text[1:-1] if text.startswith("{") else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Context:
    """What sync and async contexts share: everything but the operations that wait."""

    def __init__(self, app: App, spec: TaskSpec, state: TaskState, history: list[Recorded], fence: int | None):
        self._app = app
        self._spec = spec
        self._task_id = state.task_id
        self._version = state.version  # the latest version: appends go on from it
        self._record = Replay(state.task_id, history, state)
        self._fence = fence
        self._n = 0  # ordinal of the last call issued
        self._s = 0  # ordinal of the last conversation operation issued
        self._compensations: list[tuple[int, ToolSpec, Any]] = []
        self._data_cache: tuple[int, BaseModel] | None = None
        self._cancel_reason = state.cancel_reason
        self._compensating = False
        self._replay_only = False
        self._ended = False
        self._owner = threading.get_ident()  # the thread the task's code runs in
        self._lock = threading.RLock()  # ctx.map's threads record through one writer
        self._inflight = 0  # live calls issued and not ended (more than one: a parallel batch)
        self._undelivered = 0  # replayed calls issued whose recorded outcome the code has not received
        self._deferred: list[Event] = []  # recorded reads, written with the next append
        self._session: TaskSession | None = None
        self.scratch: dict[str, Any] = {}
        """Working memory for the current step: never persisted, emptied at every step boundary."""

    # ------------------------------------------------------------------ reading
    @property
    def task_id(self) -> str:
        return self._task_id

    @property
    def state(self) -> TaskState:
        """The task's state as of the point the code has reached (read-only)."""
        if self.live:
            return self._latest
        return self._record.view()

    @property
    def _latest(self) -> TaskState:
        return self._app.log.cached(self._task_id, self._version)

    @property
    def live(self) -> bool:
        """``False`` while the code is still replaying recorded history."""
        return self._record.done

    @property
    def data(self) -> BaseModel:
        """The task's typed data (``@app.task(state=Model)``), validated from the recorded fields."""
        model = self._spec.state
        if model is None:
            raise TetherError(f"task {self._spec.name!r} declares no state model; use @app.task(state=Model)")
        state = self.state
        if self._data_cache is None or self._data_cache[0] != state.version:
            self._data_cache = (state.version, _read_only(model).model_validate(upcast_data(self._spec, state)))
        return self._data_cache[1]

    @property
    def session(self) -> TaskSession:
        """The task's conversation: the session named by ``session_id`` when the task started, or one
        made for it (named after the task). Its reads and appends are part of the task's record:
        an append happens once however often the task is resumed, a replay sees what the first
        run saw, and a fork sees the conversation as it was at the fork point."""
        if self._session is None:
            self._session = TaskSession(self, self._record.final.session_id or self._task_id)
        return self._session

    # ------------------------------------------------------------------ replay
    def _replayed(self, expected: type[Event], matches: Callable[[Any], bool], requested: str) -> Recorded | None:
        """The recorded event this operation corresponds to, or ``None`` when it runs live."""
        recorded = self._record.take(expected, matches, requested)
        if recorded is None:
            self._check_nothing_left(requested)
        return recorded

    def _check_nothing_left(self, requested: str) -> None:
        """An operation with no record runs live — unless records the code has not asked for remain
        while nothing else is under way (no parallel call in flight or waiting for its recorded
        result): then the code no longer does what it did, and running it would write a history
        that cannot be replayed."""
        if self._record.done or self._undelivered or self._inflight:
            return
        head = self._record.first_left()
        if head is not None:
            raise NonDeterminismError(self._task_id, head.seq, describe(head.event), requested)

    def _replayed_if(self, expected: type[Event], matches: Callable[[Any], bool]) -> bool:
        """Consume the next recorded event if it is this one; ``False`` (and nothing consumed) if not."""
        return self._record.take_if(expected, matches)

    def _append(self, events: list[Event]) -> None:
        log = self._app.log
        if self._replay_only:
            raise ReplayEnd(self._record.walked)  # a replay never writes, whatever asks it to
        with self._lock:
            if self._ended:
                raise RunEnded(f"task {self._task_id!r}: this run has stopped; a later run takes the work up")
            if self._deferred:
                events = [*self._deferred, *events]
            while True:
                try:
                    # No snapshot mid-run: the run holds the task, and snapshots once when it stops.
                    self._version = log.append(
                        self._task_id, events, self._version, fence=self._fence, snapshot=False
                    )
                    self._deferred.clear()
                    return
                except LeaseLostError:
                    raise
                except ConflictError:
                    self._take_external()

    def _defer(self, event: Event) -> None:
        """Record ``event`` with the next append: a read that nothing depends on until something is written."""
        with self._lock:
            self._deferred.append(event)

    def _take_external(self) -> None:
        """Accept what another process appended meanwhile (an answer, a cancel); anything else is a conflict."""
        newer = self._app.log.events(self._task_id, after=self._version)
        for rec in newer:
            if not isinstance(rec.event, _EXTERNAL):
                raise ConflictError(self._task_id, expected=self._version, actual=newer[-1].seq)
            if isinstance(rec.event, CancelRequested):
                self._cancel_reason = rec.event.reason or "cancelled"
        if not newer:
            raise ConflictError(self._task_id, expected=self._version, actual=None)
        self._version = newer[-1].seq

    def _going_live(self) -> None:
        """Called before an operation runs live: a cancelled task stops here, before doing anything,
        and so does a replay (``app.replay``), which never runs or writes anything."""
        if self._replay_only:
            raise ReplayEnd(self._record.walked)
        if self._cancel_reason is not None and not self._compensating:
            raise Cancelled(self._cancel_reason)

    def _suspend(self, status: str, wake_at: float | None, reason: str) -> None:
        self._going_live()  # a cancelled task does not go back to waiting
        self._append([StatusChanged(status=status, wake_at=wake_at)])
        raise Suspend(reason)

    def _answered(self) -> bool:
        """Whether the recorded history goes on past this point (so a wait or sleep here ended)."""
        return not self._record.done

    def _end(self) -> None:
        """The run stopped: a parallel branch still going records nothing more."""
        with self._lock:
            self._ended = True

    def _check_thread(self, operation: str) -> None:
        if threading.get_ident() != self._owner:
            raise TetherError(
                f"{operation} was called from a thread task {self._task_id!r} did not start: a call's identity "
                "(its ordinal and idempotency key) comes from the order the task issues it, which another thread "
                "cannot keep. Run calls in parallel threads with ctx.map(tool, items), or in an async task with "
                "asyncio.gather(ctx.call(...), ...)"
            )

    def _issue_session_op(self) -> int:
        self._check_thread("ctx.session")
        with self._lock:
            self._s += 1
            return self._s

    # ------------------------------------------------------------------ recording
    def plan(self, steps: list[str]) -> None:
        """Declare the plan: the named steps, in order. ``ctx.state.position`` counts them."""
        steps = [str(s) for s in steps]
        if self._replayed(PlanSet, lambda e: e.steps == steps, f"plan({steps!r})") is None:
            self._going_live()
            self._append([PlanSet(steps=steps)])

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Mark a plan step: started on entry, completed on a clean exit, failed on an exception."""
        self.scratch.clear()
        if self._replayed(StepStarted, lambda e: e.name == name, f"step({name!r})") is None:
            self._going_live()
            self._append([StepStarted(name=name)])
        try:
            yield
        except NOT_A_TASK_FAILURE:
            raise  # the run cannot go on here; the step did not fail
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            if self._replayed(StepFailed, lambda e: e.name == name, f"failure of step {name!r}") is None:
                self._append([StepFailed(name=name, error=error)])
            raise
        else:
            if self._replayed(StepCompleted, lambda e: e.name == name, f"end of step {name!r}") is None:
                self._append([StepCompleted(name=name)])
        finally:
            self.scratch.clear()

    def decide(self, name: str, choice: Any, rationale: str, alternatives: list[Any] | None = None) -> Any:
        """Record a decision with its rationale; returns the choice (on replay, the recorded one)."""
        recorded = self._replayed(DecisionMade, lambda e: e.name == name, f"decide({name!r})")
        if recorded is not None:
            return recorded.event.choice  # type: ignore[attr-defined]
        self._going_live()
        self._append([DecisionMade(name=name, choice=choice, rationale=rationale, alternatives=alternatives)])
        return choice

    def observe(self, key: str, value: Any, source: str | None = None, as_of: datetime | None = None) -> None:
        """Record a fact learned along the way (key → value), where it came from and as of when."""
        if self._replayed(ObservationRecorded, lambda e: e.key == key, f"observe({key!r})") is None:
            self._going_live()
            stamp = as_of.isoformat() if as_of is not None else None
            self._append([ObservationRecorded(key=key, value=value, source=source, as_of=stamp)])

    def update(self, **fields: Any) -> BaseModel:
        """Change fields of the typed data; validated first, and only the changed fields are recorded."""
        model = self._spec.state
        if model is None:
            raise TetherError(f"task {self._spec.name!r} declares no state model; use @app.task(state=Model)")
        current = self.data
        unknown = set(fields) - set(model.model_fields)
        if unknown:
            raise InvalidInputError(f"{model.__name__} has no field(s) {', '.join(sorted(unknown))}")
        try:
            updated = model.model_validate({**current.model_dump(), **fields})
        except ValidationError as exc:
            raise InvalidInputError(f"invalid update of {model.__name__}: {exc}") from None
        before, after = current.model_dump(mode="json"), updated.model_dump(mode="json")
        changed = {k: after[k] for k in fields if before.get(k) != after[k]}
        # Matched by kind only: a model upgraded since may name the same change differently.
        recorded = self._replayed(DataUpdated, lambda e: True, f"update({', '.join(sorted(changed))})")
        if recorded is None and changed:
            self._going_live()
            self._append([DataUpdated(fields=changed)])
        return self.data

    def patched(self, name: str) -> bool:
        """Change a task's code while tasks are in flight: ``True`` where a run reaches this point
        under the new code, ``False`` where it replays a history recorded before the patch.

        Example — three stages of adding a tone check before an email::

            if ctx.patched("tone-check"):          # stage 1: both paths, old tasks replay the old one
                text = ctx.call(check_tone, text)
            ctx.call(send_email, text)

            ctx.deprecate_patch("tone-check")      # stage 2, once no task needs the old path
            text = ctx.call(check_tone, text)
            ctx.call(send_email, text)

            text = ctx.call(check_tone, text)      # stage 3, once no task replays stage 1's marker
            ctx.call(send_email, text)

        ``tether check --app module:app`` tells you before a deploy which stored tasks the new
        code would not replay.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"a patch needs a non-empty name, got {name!r}")
        if self._record.take_if(PatchMarked, lambda e: e.name == name):
            return True
        if not self._record.done:
            return False  # the recorded history went past this point without the patch
        self._going_live()
        self._defer(PatchMarked(name=name))  # written with the next append, like a read
        return True

    def deprecate_patch(self, name: str) -> None:
        """Stage 2 of a patch: the new path is the only path; a marker recorded by stage 1 is passed over."""
        self._record.take_if(PatchMarked, lambda e: e.name == name)

    def transition(self, phase: str) -> None:
        """Move the task's phase machine (``@app.task(phases=Phases(...))``); illegal moves raise."""
        if self._replayed(PhaseChanged, lambda e: e.phase == phase, f"transition({phase!r})") is None:
            self._going_live()
            self._append([PhaseChanged(phase=phase)])

    # ------------------------------------------------------------------ calls
    def _issue(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Issued:
        """Give a call its identity as the code issues it: the next ordinal, in program order."""
        self._check_thread("ctx.call()")
        spec = self._app._tool_spec(fn)
        arguments = spec.bind(args, kwargs)
        with self._lock:
            self._n += 1
            n = self._record.ordinal(self._n)
            record = self._record.call(n)
            # A call with no record is not checked against records left ahead of it: in a parallel
            # batch a sibling issued after it may be recorded while it is not (a readonly call that
            # had not finished). Its identity is its ordinal: an inserted or removed call shifts the
            # ordinals of the recorded ones after it, and they refuse.
            if record is None or record.status == "intended":
                self._inflight += 1  # it will run: issued and not yet ended
            else:
                self._undelivered += 1  # its recorded outcome is handed back when the code awaits it
        key = call_key(self._task_id, n, spec.name, arguments)
        if record is not None:
            self._check_same_call(n, record, spec, arguments)
            key = record.key  # retries keep the key the call was first given
        return _tuple_new(_Issued, (n, spec, args, kwargs, arguments, key, record))

    def _check_same_call(self, n: int, record: ToolCall, spec: ToolSpec, arguments: dict[str, Any]) -> None:
        """A recorded result goes only to the same call: same position, same tool, same arguments."""
        same = record.tool == spec.name
        if same and spec.replay_check == "args":
            same = record.key.rpartition(":")[2] == args_hash(arguments)
        if not same:
            raise NonDeterminismError(
                self._task_id,
                self._record.first_seq_of_call(n),
                f"call #{n} {record.tool}({_excerpt(record.args)})",
                f"call #{n} {spec.name}({_excerpt(as_json(arguments))})",
            )

    def _call_flow(
        self,
        issued: _Issued,
        compensate: Callable[..., Any] | None = None,
        kind: str = "call",
        compensates: int | None = None,
        readonly: bool | None = None,
    ) -> Flow[Any]:
        """The recorded call, written once for sync and async (see :mod:`tether.runtime._flow`)."""
        n, spec, _, _, _, key, record = issued
        readonly = spec.readonly if readonly is None else readonly
        undo = compensate or spec.compensate
        if record is not None and record.status != "intended":
            with self._lock:
                self._undelivered -= 1
        if record is not None:
            if record.status == "completed":
                result = spec.rehydrate(record.result)
                if undo is not None:
                    self._compensations.append((n, self._app._tool_spec(undo), record.result))
                return result
            last = record.attempts[-1]
            if record.status == "failed":
                raise ToolError(
                    spec.name,
                    key=key,
                    error_type=last.error_type or "Error",
                    message=last.message or "",
                    attempts=sum(1 for a in record.attempts if a.error_type not in (None, "Interrupted")),
                    traceback=last.traceback,
                )
        with self._running():
            return (yield from self._live_call(issued, undo, kind, compensates, readonly))

    @contextmanager
    def _running(self) -> Iterator[None]:
        """A live call, counted in ``_inflight`` from its issue until it ends."""
        try:
            yield
        finally:
            self._settled()

    def _settled(self) -> None:
        with self._lock:
            self._inflight -= 1

    def _live_call(
        self, issued: _Issued, undo: Callable[..., Any] | None, kind: str, compensates: int | None, readonly: bool
    ) -> Flow[Any]:
        """A call with no outcome recorded: run it (again, under the same key), record each attempt."""
        n, spec, args, kwargs, arguments, key, record = issued
        attempt = 1
        if record is not None:
            last = record.attempts[-1]
            self._going_live()  # the record ends inside this call: what follows is live
            if last.finished_at is None:
                # The process stopped inside this attempt: the effect may or may not have happened.
                if spec.on_unknown == "raise":
                    raise OutcomeUnknownError(key)
                if callable(spec.on_unknown):
                    found = yield Invoke(spec.on_unknown, (key,))
                    assert found is not None
                    if not found.ok:
                        raise found.value
                    if found.value is not None:
                        self._append([CallCompleted(n=n, result=found.value, attempt=last.number, duration=0.0)])
                        if undo is not None:
                            self._compensations.append((n, self._app._tool_spec(undo), found.value))
                        return spec.rehydrate(found.value)
                stopped = time.time() - last.started_at.timestamp()
                self._append(
                    [
                        CallAttemptFailed(
                            n=n,
                            attempt=last.number,
                            error_type="Interrupted",
                            message="the process stopped during this attempt",
                            traceback=None,
                            duration=stopped,
                            backoff=0.0,
                        )
                    ]
                )
            elif last.backoff:
                # Stopped (or suspended) during the backoff: wait only what is left of it.
                assert last.finished_at is not None
                until = last.finished_at.timestamp() + last.backoff
                yield from self._backoff(until)
            attempt = last.number + 1
        # Attempts that ended in an error count against the policy; one cut short by a crash
        # does not (it is run again: at-least-once), though it keeps its number in the record;
        # nor do the attempts before a retry of the task (a retry is a fresh round).
        errors = 0
        if record is not None:
            errors = sum(
                1
                for a in record.attempts
                if a.error_type not in (None, "Interrupted") and a.number > record.retried_after
            )
        task_id = self._task_id
        exists = record is not None

        def intent(attempt: int) -> CallStarted:
            return CallStarted(
                n=n, key=key, tool=spec.name, args=arguments, attempt=attempt, kind=kind, compensates=compensates
            )

        self._going_live()
        while True:
            if not readonly:
                self._append([intent(attempt)])
                exists = True
            current = _tuple_new(CallInfo, (task_id, n, spec.name, key, attempt))
            outcome = yield invoke(spec.fn, args, kwargs, current)
            assert outcome is not None
            if outcome.ok:
                value = outcome.value
                try:
                    # Live code gets what replay will get: the result's JSON form (as the tool's
                    # return annotation promises, for a model), never the object it happened to be.
                    recorded = as_json(value)
                    # A readonly call has no intent: its completion carries the call's identity.
                    done = CallCompleted(
                        n=n,
                        result=recorded,
                        attempt=attempt,
                        duration=outcome.duration,
                        kind=kind,
                        key=None if exists else key,
                        tool=None if exists else spec.name,
                        args=None if exists else arguments,
                    )
                    self._append([done])
                except InvalidInputError as exc:
                    # The value cannot be stored: fail the call, never half-write it.
                    failure: BaseException = type(exc)(
                        f"tool {spec.name!r} returned a {type(value).__name__} that cannot be stored: {exc}"
                    )
                    retry = False
                    errors += 1
                else:
                    if undo is not None:
                        self._compensations.append((n, self._app._tool_spec(undo), recorded))
                    return spec.rehydrate(recorded)
            else:
                failure = outcome.value
                errors += 1
                retry = spec.retry.should_retry(failure, attempt=errors)
            backoff = spec.retry.delay(attempt) if retry else None
            tb = "".join(traceback.format_exception(failure))
            events: list[Event] = []
            if not exists:  # a readonly call that failed: its record starts with this attempt
                events.append(intent(attempt))
                exists = True
            events.append(
                CallAttemptFailed(
                    n=n,
                    attempt=attempt,
                    error_type=type(failure).__name__,
                    message=str(failure),
                    traceback=tb,
                    duration=outcome.duration,
                    backoff=backoff,
                )
            )
            if backoff is None:
                exhausted = errors >= spec.retry.max_attempts
                events.append(CallFailed(n=n, reason="no attempts left" if exhausted else "error not retried"))
            self._append(events)
            if backoff is None:
                raise ToolError(
                    spec.name,
                    key=key,
                    error_type=type(failure).__name__,
                    message=str(failure),
                    attempts=errors,
                    traceback=tb,
                ) from failure
            yield from self._backoff(time.time() + backoff)
            attempt += 1

    def _backoff(self, until: float) -> Flow[None]:
        """Wait until ``until``: here if it is short, else as a durable sleep that frees the worker."""
        remaining = until - time.time()
        if remaining <= 0:
            return
        self._going_live()
        # A long wait frees the worker (a durable sleep) — unless other calls of the task run
        # beside this one: suspending would abandon them mid-flight, so it waits here.
        if remaining > self._app.inline_wait and self._inflight <= 1:
            self._suspend(Status.SLEEPING.value, until, f"retry backoff until {until}")
        yield Wait(remaining)

    def _wait_flow(self, key: str, prompt: str | None, timeout: float | None, schema: Any) -> Flow[Any]:
        json_schema, model = _input_schema(schema)
        recorded = self._replayed(InputRequested, lambda e: e.key == key, f"wait_for_input({key!r})")
        if recorded is None:
            self._going_live()
            timeout_at = time.time() + timeout if timeout is not None else None
            self._append([InputRequested(key=key, prompt=prompt, schema=json_schema, timeout_at=timeout_at)])
        else:
            timeout_at = recorded.event.timeout_at  # type: ignore[attr-defined]
        if self._replayed_if(InputTimedOut, lambda e: e.key == key):
            raise InputTimeout(self._task_id, key)
        self._replayed_if(InputRejected, lambda e: e.key == key)
        received = self._latest.received
        if key in received:
            value = received[key]
            rejected = None
            if json_schema is not None and recorded is None:  # sent before it was asked for: check now
                try:
                    check_against_schema(self._task_id, key, value, json_schema)
                except InvalidInputError as exc:
                    rejected = str(exc)
            if rejected is None:
                return model.model_validate(value) if model is not None else value
            # A bad early answer does not fail the task: it is discarded, with the reason, and the
            # task waits for a good one.
            self._append([InputRejected(key=key, reason=rejected)])
        if self._answered():
            head = self._record.first_left()
            assert head is not None
            raise NonDeterminismError(self._task_id, head.seq, describe(head.event), f"the answer to {key!r}")
        if timeout_at is not None and time.time() >= timeout_at:
            self._going_live()
            self._append([InputTimedOut(key=key)])
            raise InputTimeout(self._task_id, key)
        self._suspend(Status.AWAITING_INPUT.value, timeout_at, f"waiting for input {key!r}")
        yield Wait(0)  # never reached: a generator, so sync and async share this flow

    def _sleep_flow(self, seconds: float) -> Flow[None]:
        recorded = self._replayed(SleepScheduled, lambda e: True, f"sleep({seconds})")
        if recorded is None:
            self._going_live()
            until = time.time() + seconds
            self._append([SleepScheduled(until=until)])
        else:
            until = recorded.event.until  # type: ignore[attr-defined]
            if self._answered():
                return  # the code went on after this sleep before: it is over
        yield from self._backoff(until)

    def _fetch_flow(self, issued: _Issued, ttl: float) -> Flow[Any]:
        """A recorded read of outside state: replay returns what was read; live, a read of the same
        thing recorded less than ``ttl`` seconds ago is served again, an older one is read afresh."""
        if issued.record is None and ttl > 0:
            n, spec, _, _, arguments, key, _ = issued
            arguments = as_json(arguments)
            now = time.time()
            for earlier in reversed(self._latest.calls):
                if earlier.kind != "fetch" or earlier.tool != spec.name or earlier.args != arguments:
                    continue
                fresh = earlier.finished_at is not None and now - earlier.finished_at.timestamp() < ttl
                if earlier.status == "completed" and fresh:
                    self._going_live()
                    served = CallCompleted(
                        n=n,
                        result=earlier.result,
                        attempt=1,
                        duration=0.0,
                        key=key,
                        tool=spec.name,
                        args=arguments,
                        kind="fetch",
                    )
                    try:
                        self._append([served])
                    finally:
                        self._settled()
                    return spec.rehydrate(earlier.result)
                break
        return (yield from self._call_flow(issued, kind="fetch", readonly=True))

    def _compensate_flow(self) -> Flow[None]:
        """Undo completed calls in reverse order, each as its own recorded call."""
        self._compensating = True
        # A call compensated before (by a failure a retry answered) is not compensated twice.
        done = {c.compensates for c in self._latest.calls if c.kind == "compensation" and c.status == "completed"}
        # In reverse order of the calls' ordinals (parallel calls finish in any order).
        for n, spec, result in sorted(self._compensations, key=lambda c: c[0], reverse=True):
            if n in done:
                continue
            issued = self._issue(spec.fn, (result,), {})
            try:
                yield from self._call_flow(issued, kind="compensation", compensates=n)
            except ToolError:
                continue  # recorded; it must not hide the original failure


@functools.cache
def _read_only(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` as ``ctx.data`` hands it out: assigning a field raises, naming ``ctx.update``
    (the assignment would change this object and record nothing)."""

    def __setattr__(self: BaseModel, name: str, value: Any) -> None:  # noqa: N807
        raise TetherError(
            f"ctx.data is read-only: assigning {model.__name__}.{name} would record nothing. "
            f"Use ctx.update({name}=...), which validates and records the change"
        )

    def __eq__(self: BaseModel, other: object) -> bool:  # noqa: N807
        return isinstance(other, model) and self.model_dump() == other.model_dump()

    namespace = {
        "__setattr__": __setattr__,
        "__eq__": __eq__,
        "__hash__": model.__hash__,
        "__module__": model.__module__,
        "__qualname__": model.__qualname__,
    }
    return type(model.__name__, (model,), namespace)


def _check_ttl(ttl: float) -> None:
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not ttl >= 0:
        raise InvalidInputError(f"ttl must be a number of seconds >= 0, got {ttl!r}")


def _check_concurrency(max_concurrency: int | None) -> None:
    if max_concurrency is not None and (type(max_concurrency) is not int or max_concurrency < 1):
        raise InvalidInputError(f"max_concurrency must be None or an int >= 1, got {max_concurrency!r}")


def _first_error(outcomes: list[tuple[bool, Any]]) -> BaseException | None:
    """What a batch raises: a stop of the run (suspension, lost lease...) before any call's failure,
    and of the failures, the first in input order."""
    errors: list[BaseException] = [value for ok, value in outcomes if not ok]
    stops = [e for e in errors if not isinstance(e, ToolError)]
    return (stops or errors)[0] if errors else None


class TaskContext(_Context):
    """The context a sync task receives as its first argument.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> @app.tool(readonly=True)
        ... def search_flights(dest: str) -> list:
        ...     return [{"id": "BA117", "price": 420}]
        >>> @app.task
        ... def book_trip(ctx: tether.TaskContext, dest: str) -> dict:
        ...     ctx.plan(["search", "pick"])
        ...     with ctx.step("search"):
        ...         flights = ctx.call(search_flights, dest)
        ...     with ctx.step("pick"):
        ...         return ctx.decide("flight", flights[0], rationale="cheapest")
        >>> app.run(book_trip, "NYC").output
        {'id': 'BA117', 'price': 420}
    """

    def call(
        self, fn: Callable[..., Any], *args: Any, compensate: Callable[..., Any] | None = None, **kwargs: Any
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as a recorded call and return its result.

        Its intent is committed before it runs and its result after; on replay the
        recorded result is returned without running it. ``compensate(result)`` is
        called, recorded, if the task later fails.
        """
        return drive(self._call_flow(self._issue(fn, args, kwargs), compensate))

    def map(self, fn: Callable[..., Any], items: Iterable[Any], *, max_concurrency: int | None = None) -> list[Any]:
        """Call ``fn(item)`` for every item as recorded calls running in parallel threads; the
        results come back in input order.

        Each call gets its ordinal (so its idempotency key) from its item's position, whatever
        order the calls finish in. On resume, finished calls return their results, unfinished
        ones run again under the same key, unstarted ones start. If calls fail, the first
        failure in input order is raised once every call has ended (all are recorded).

        Example:
            >>> import tether
            >>> app = tether.App("memory://")
            >>> @app.tool(readonly=True)
            ... def price(city: str) -> int:
            ...     return len(city) * 100
            >>> @app.task
            ... def compare(ctx: tether.TaskContext) -> list:
            ...     return ctx.map(price, ["Paris", "Rome", "Oslo"], max_concurrency=2)
            >>> app.run(compare).output
            [500, 400, 400]
        """
        _check_concurrency(max_concurrency)
        issued = [self._issue(fn, (item,), {}) for item in items]
        outcomes: list[tuple[bool, Any]] = [(True, None)] * len(issued)
        live: list[int] = []
        for i, call in enumerate(issued):
            if call.record is not None and call.record.status in ("completed", "failed"):
                outcomes[i] = _outcome_of(partial(drive, self._call_flow(call)))
            else:
                live.append(i)
        if live:
            workers = min(len(live), max_concurrency or len(live))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"tether-map-{self._task_id}") as pool:
                futures = [(i, pool.submit(drive, self._call_flow(issued[i]))) for i in live]
                for i, future in futures:
                    outcomes[i] = _outcome_of(future.result)
        error = _first_error(outcomes)
        if error is not None:
            raise error
        return [value for _, value in outcomes]

    def wait_for_input(
        self, key: str, prompt: str | None = None, timeout: float | None = None, schema: Any = None
    ) -> Any:
        """Wait for a person (``app.send_input(task_id, key, value)``); the process need not stay alive.

        The request is committed and the task suspends (``awaiting_input``) until the
        answer arrives; input sent before the request is used at once. ``schema`` (a
        pydantic model or a JSON schema) validates the answer when it is sent; with a
        model, the answer comes back as one. After ``timeout`` seconds without an answer,
        :class:`~tether.InputTimeout` is raised here, and the task may catch it.
        """
        return drive(self._wait_flow(key, prompt, timeout, schema))

    def sleep(self, seconds: float) -> None:
        """A durable sleep: short ones wait here; longer ones free the worker and resume when due."""
        drive(self._sleep_flow(seconds))

    def fetch(self, fn: Callable[..., Any], *args: Any, ttl: float = 0, **kwargs: Any) -> Any:
        """Read outside state (a calendar, a row) through ``fn``, recorded for audit and replay.

        On replay the recorded value is returned (history is history). Live, a value this task
        read less than ``ttl`` seconds ago is used again; an older one is read again, never stale.
        """
        _check_ttl(ttl)
        return drive(self._fetch_flow(self._issue(fn, args, kwargs), ttl))


@types.coroutine
def _next_turn() -> Generator[None, None, None]:
    """Yield to the event loop once (what ``asyncio.sleep(0)`` does, without its machinery)."""
    yield


def _outcome_of(run: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, run()
    except BaseException as exc:  # collected: every call of the batch ends before one is raised
        return False, exc


class AsyncTaskContext(_Context):
    """The context an ``async`` task receives: the same, with ``await ctx.call(...)``.

    Calls may run in parallel (``asyncio.gather``, ``TaskGroup``, ``as_completed``): each
    call's ordinal — so its idempotency key — is fixed when the code issues it.

    Example:
        >>> import asyncio, tether
        >>> app = tether.App("memory://")
        >>> @app.tool(readonly=True)
        ... async def lookup(q: str) -> str:
        ...     return q.upper()
        >>> @app.task
        ... async def research(ctx: tether.AsyncTaskContext, queries: list) -> list:
        ...     return await asyncio.gather(*(ctx.call(lookup, q) for q in queries))
        >>> app.run(research, ["a", "b"]).output
        ['A', 'B']
    """

    def __init__(self, app: App, spec: TaskSpec, state: TaskState, history: list[Recorded], fence: int | None):
        super().__init__(app, spec, state, history, fence)
        self._gate = ReleaseGate(self._record.finish_order)

    def call(
        self, fn: Callable[..., Any], *args: Any, compensate: Callable[..., Any] | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        """Like :meth:`TaskContext.call`; ``fn`` may be a coroutine function. Await the result.

        The call is issued (given its ordinal) here, when ``ctx.call`` is called, not when it is
        awaited, so calls gathered together keep the order the code wrote them in.
        """
        return self._run_call(self._issue(fn, args, kwargs), compensate)

    async def _run_call(self, issued: _Issued, compensate: Callable[..., Any] | None = None) -> Any:
        await self._turn(issued)
        return await drive_async(self._call_flow(issued, compensate))

    async def _turn(self, issued: _Issued) -> None:
        """Let the other branches run before this call does, live and on replay alike.

        Live, every call yields to the event loop once before it runs, so parallel branches
        issue their calls (and get their ordinals) in the order they were started; on replay
        a recorded result waits for its turn in the order results were recorded. Both ways
        the branches interleave the same, so each call gets the ordinal it had.
        """
        record = issued.record
        if record is not None and record.status in ("completed", "failed"):
            await self._gate.wait(issued.n)
        else:
            await _next_turn()

    async def map(
        self, fn: Callable[..., Any], items: Iterable[Any], *, max_concurrency: int | None = None
    ) -> list[Any]:
        """Like :meth:`TaskContext.map`, as concurrent coroutines (``fn`` may be a coroutine function)."""
        _check_concurrency(max_concurrency)
        issued = [self._issue(fn, (item,), {}) for item in items]
        limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None

        async def one(call: _Issued) -> tuple[bool, Any]:
            try:
                if limit is None:
                    return True, await self._run_call(call)
                async with limit:
                    return True, await self._run_call(call)
            except BaseException as exc:  # collected: every call of the batch ends before one is raised
                return False, exc

        outcomes = list(await asyncio.gather(*(one(call) for call in issued)))
        error = _first_error(outcomes)
        if error is not None:
            raise error
        return [value for _, value in outcomes]

    async def wait_for_input(
        self, key: str, prompt: str | None = None, timeout: float | None = None, schema: Any = None
    ) -> Any:
        """Like :meth:`TaskContext.wait_for_input`."""
        return await drive_async(self._wait_flow(key, prompt, timeout, schema))

    async def sleep(self, seconds: float) -> None:
        """Like :meth:`TaskContext.sleep`."""
        await drive_async(self._sleep_flow(seconds))

    def fetch(
        self, fn: Callable[..., Any], *args: Any, ttl: float = 0, **kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        """Like :meth:`TaskContext.fetch`; ``fn`` may be a coroutine function. Await the result."""
        _check_ttl(ttl)
        return self._run_fetch(self._issue(fn, args, kwargs), ttl)

    async def _run_fetch(self, issued: _Issued, ttl: float) -> Any:
        await self._turn(issued)
        return await drive_async(self._fetch_flow(issued, ttl))


def _input_schema(schema: Any) -> tuple[dict[str, Any] | None, type[BaseModel] | None]:
    """A wait's schema as stored (JSON schema) and, for a model, the model to rebuild the answer with."""
    if schema is None:
        return None, None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema(), schema
    if isinstance(schema, dict):
        return schema, None
    raise InvalidInputError(f"schema= takes a pydantic model class or a JSON schema dict, got {schema!r}")


def upcast_data(spec: TaskSpec, state: TaskState) -> dict[str, Any]:
    """The task's stored data, migrated to the model's current ``schema_version``."""
    data = dict(state.data)
    stored = state.data_version
    current = spec.data_version
    if stored is None or current is None or stored == current:
        return data
    if stored > current:
        raise SchemaVersionError(
            f"task {state.task_id!r} stores {spec.state.__name__ if spec.state else 'data'} at schema version "
            f"{stored}, newer than the code's {current}",
            found=stored,
            supported=current,
        )
    version = stored
    while version < current:
        step = spec.upcast.get(version)
        if step is None:
            raise SchemaVersionError(
                f"task {state.task_id!r} stores its data at schema version {version} and the model is at "
                f"{current}, but no upcaster is registered for {version} (upcast={{{version}: fn}})",
                found=version,
                supported=current,
            )
        data = step(data)
        version += 1
    data["schema_version"] = current
    return data
