"""The application object: registers tasks and tools, runs and resumes tasks durably."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError

from tether._conflicts import retry_on_conflict
from tether._keys import as_json
from tether._validate import check_id, check_int, check_optional_id, check_positive, check_task_id
from tether.conversation import (
    Session,
    SessionInfo,
    Summarizer,
    TokenCounter,
    delete_session,
    list_sessions,
    open_session,
)
from tether.conversation import stream_id as _session_stream
from tether.errors import (
    Cancelled,
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    InvalidTransition,
    NonDeterminismError,
    RunInterrupted,
    Suspend,
    TaskBusyError,
    TaskDefinitionError,
    TaskFailedError,
    TaskNotFinishedError,
    TaskNotFoundError,
    TetherError,
    ToolError,
)
from tether.events import (
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallStarted,
    CancelRequested,
    DataMigrated,
    Event,
    FailureRecorded,
    InputReceived,
    OutputSet,
    Recorded,
    RetryRequested,
    StatusChanged,
    StepFailed,
)
from tether.log import SnapshotPolicy, TaskLog
from tether.machine import TERMINAL, Phases, Status
from tether.model import Failure, TaskState
from tether.runtime._flow import RUNNING_TASK, Flow, Invoke, drive, drive_async
from tether.runtime.context import (
    NOT_A_TASK_FAILURE,
    AsyncTaskContext,
    ReplayEnd,
    TaskContext,
    _Context,
    upcast_data,
)
from tether.runtime.ledger import Ledger, OnUnknown
from tether.runtime.retry import Retry
from tether.runtime.session import fork_conversation
from tether.runtime.specs import ReplayCheck, TaskSpec, ToolSpec, guarded
from tether.store import DEFAULT_URL, Store, TaskRow
from tether.timetravel import HistoryEntry, ReplayReport, StateDiff, diff_states, history_of, step_bounds
from tether.userstate import UserState

__all__ = ["App", "PendingInput", "TaskHandle", "TaskSummary"]

_log = logging.getLogger("tether")
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


@dataclass(frozen=True)
class TaskHandle:
    """What :meth:`App.run` returns: where the task stands after this run."""

    task_id: str
    status: Status
    output: Any
    failure: Failure | None
    state: TaskState

    @classmethod
    def of(cls, state: TaskState) -> TaskHandle:
        return cls(state.task_id, state.status, state.output, state.failure, state)

    def result(self) -> Any:
        """The task's output. A task that failed or was cancelled raises :class:`~tether.TaskFailedError`
        (with its failure record and how to retry); one that has not finished raises
        :class:`~tether.TaskNotFinishedError` saying what it waits for.

        Example:
            >>> import tether
            >>> app = tether.App("memory://")
            >>> @app.task
            ... def divide(ctx: tether.TaskContext, a: int, b: int) -> float:
            ...     return a / b
            >>> app.run(divide, 1, 2).result()
            0.5
            >>> app.run(divide, 1, 0, task_id="d0").result()
            Traceback (most recent call last):
            ...
            tether.errors.TaskFailedError: task 'd0' failed: ZeroDivisionError: division by zero...
        """
        state = self.state
        if state.status is Status.COMPLETED:
            return state.output
        if state.status in (Status.FAILED, Status.CANCELLED):
            raise TaskFailedError(
                failure_summary(state),
                task_id=state.task_id,
                failure=state.failure.model_dump(mode="json") if state.failure else None,
            )
        waiting = f" for input {state.waiting.key!r}" if state.waiting else ""
        raise TaskNotFinishedError(
            f"task {state.task_id!r} has no result yet: it is {state.status.value}{waiting}",
            task_id=state.task_id,
            status=state.status.value,
        )


_UNWINDING = (StepFailed, CallStarted, CallCompleted, CallAttemptFailed, CallFailed)


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
    seq = failed_at - 1
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
    compensations = {c.n for c in state.calls if c.kind == "compensation"}
    for rec in history:
        n = getattr(rec.event, "n", None)
        if rec.seq > failed_at and n in compensations:
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


def failure_summary(state: TaskState) -> str:
    """One paragraph on why a task failed and what to do about it."""
    if state.status is Status.CANCELLED:
        return f"task {state.task_id!r} was cancelled" + (f": {state.cancel_reason}" if state.cancel_reason else "")
    failure = state.failure
    if failure is None:
        return f"task {state.task_id!r} failed"
    where = "".join(
        [f" at step {failure.step!r}" if failure.step else "", f" in tool {failure.tool!r}" if failure.tool else ""]
    )
    attempts = ""
    if failure.call_key is not None:
        call = next((c for c in state.calls if c.key == failure.call_key), None)
        if call is not None:
            attempts = f" after {len(call.attempts)} attempt{'s' if len(call.attempts) != 1 else ''}"
    return (
        f"task {state.task_id!r} failed{where}{attempts}: {failure.exception_type}: {failure.message}. "
        f"Fix the code, then retry it: app.retry({state.task_id!r}), or "
        f"`tether retry {state.task_id} --app MODULE:APP`"
    )


@dataclass(frozen=True)
class CheckReport:
    """What :meth:`App.check` found: a replay report per task, and tasks of types this app lacks."""

    reports: list[ReplayReport]
    unknown: list[str]
    """Tasks whose type is not a task of this app: not checked."""

    @property
    def diverging(self) -> list[ReplayReport]:
        return [r for r in self.reports if not r.clean]

    @property
    def clean(self) -> bool:
        return not self.diverging

    def __str__(self) -> str:
        lines = [str(r) for r in self.diverging]
        skipped = f"; {len(self.unknown)} of unknown types skipped" if self.unknown else ""
        clean = len(self.reports) - len(self.diverging)
        diverge = len(self.diverging)
        lines.append(f"{len(self.reports)} task(s) checked: {clean} replay cleanly, {diverge} diverge{skipped}")
        return "\n".join(lines)


@dataclass(frozen=True)
class PendingInput:
    """A question a task is waiting on: what :meth:`App.pending_inputs` lists."""

    task_id: str
    type: str
    user_id: str | None
    key: str
    prompt: str | None
    schema: dict[str, Any] | None
    requested_at: datetime
    timeout_at: datetime | None


@dataclass(frozen=True)
class TaskSummary:
    """One line of :meth:`App.list_tasks`: where a task stands."""

    task_id: str
    type: str
    status: Status
    position: str
    waiting_for: str | None
    prompt: str | None
    wakes_at: datetime | None
    held_by: str | None
    user_id: str | None
    version: int
    updated_at: datetime


def check_against_schema(task_id: str, key: str, value: Any, schema: dict[str, Any]) -> None:
    """Refuse a value that does not fit a wait's JSON schema, saying where and why."""
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        details = "; ".join(f"{'/'.join(map(str, e.path)) or '(value)'}: {e.message}" for e in errors[:5])
        raise InvalidInputError(f"input {key!r} for task {task_id!r} does not fit its schema: {details}")


class _Heartbeat:
    """Renews a task's lease in the background while a run holds it."""

    def __init__(self, app: App, task_id: str, token: int) -> None:
        self._app, self._task_id, self._token = app, task_id, token
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._beat, name=f"tether-heartbeat-{task_id}", daemon=True)

    def _beat(self) -> None:
        interval = self._app.lease_ttl / 3
        while not self._stop.wait(interval):
            renewed = self._app.store.renew_lease(
                self._app.tenant, self._task_id, self._token, self._app.lease_ttl, time.time()
            )
            if not renewed:
                self.lost = True  # the next append is refused by its fencing token
                return

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class App:
    """Registers tasks and tools, and runs tasks durably against one store.

    Args:
        url: the store (``sqlite:///tether.db`` by default; ``memory://`` for tests).
        tenant: every task, ledger key and lease is scoped to it.
        snapshots: when to snapshot task state (see :class:`~tether.SnapshotPolicy`).
        lease_ttl: seconds a run holds a task without renewing its lease; a crashed
            run's task can be taken over after that (at once by a process on the same
            machine that sees the holder is gone).
        max_value_bytes: the largest encoded event (a tool result, an input) accepted.
        inline_wait: sleeps and retry backoffs up to this many seconds wait in the running
            process; longer ones suspend the task (``sleeping``) and free the worker.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> @app.tool(retry=tether.Retry(max_attempts=3, backoff=0))
        ... def add(a: int, b: int) -> int:
        ...     return a + b
        >>> @app.task
        ... def sums(ctx: tether.TaskContext, n: int) -> int:
        ...     return sum(ctx.call(add, i, i) for i in range(n))
        >>> run = app.run(sums, 3)
        >>> run.status, run.output
        (<Status.COMPLETED: 'completed'>, 6)
        >>> app.resume(run.task_id).output   # finished: returned as it is, nothing runs again
        6
    """

    def __init__(
        self,
        url: str | Store | None = None,
        *,
        tenant: str = "default",
        snapshots: SnapshotPolicy | None = None,
        lease_ttl: float = 30.0,
        max_value_bytes: int = 16 * 1024 * 1024,
        inline_wait: float = 1.0,
    ) -> None:
        if url is not None and not isinstance(url, str | Store):
            raise ConfigurationError(f"url must be a store URL or a SQLite path, got {type(url).__name__} {url!r}")
        check_id(tenant, "tenant", error=ConfigurationError)
        check_positive(lease_ttl, "lease_ttl")
        check_positive(inline_wait, "inline_wait", zero=True)
        check_int(max_value_bytes, "max_value_bytes", low=1, error=ConfigurationError)
        self.log = TaskLog(url or DEFAULT_URL, tenant=tenant, snapshots=snapshots, max_event_bytes=max_value_bytes)
        self.store = self.log.store
        self.tenant = tenant
        self.lease_ttl = lease_ttl
        self.inline_wait = inline_wait
        self.ledger = Ledger(self.store, tenant)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._tasks: dict[str, TaskSpec] = {}
        self._task_fns: dict[Callable[..., Any], TaskSpec] = {}
        self._tools: dict[Callable[..., Any], ToolSpec] = {}

    # ------------------------------------------------------------------ declaring
    @overload
    def task(self, fn: F) -> F: ...
    @overload
    def task(
        self,
        *,
        name: str | None = None,
        state: type[BaseModel] | None = None,
        upcast: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        phases: Phases | None = None,
    ) -> Callable[[F], F]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        state: type[BaseModel] | None = None,
        upcast: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        phases: Phases | None = None,
    ) -> Any:
        """Register a task: a sync or async function whose first parameter is the context."""

        def register(fn: F) -> F:
            spec = TaskSpec.of(fn, name=name, state=state, upcast=upcast, phases=phases)
            existing = self._tasks.get(spec.name)
            if existing is not None and existing.fn is not fn:
                raise TaskDefinitionError(f"a different task is already registered as {spec.name!r}")
            self._tasks[spec.name] = spec
            self._task_fns[fn] = spec
            return fn

        return register(fn) if fn is not None else register

    @overload
    def tool(self, fn: F) -> F: ...
    @overload
    def tool(
        self,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        readonly: bool = False,
        compensate: Callable[..., Any] | None = None,
        on_unknown: OnUnknown = "retry",
        replay_check: ReplayCheck = "args",
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        readonly: bool = False,
        compensate: Callable[..., Any] | None = None,
        on_unknown: OnUnknown = "retry",
        replay_check: ReplayCheck = "args",
    ) -> Any:
        """Register a tool: its name, retry policy, whether it only reads, and how to undo it.

        ``ctx.call(fn, ...)`` runs it as a recorded call. Called directly outside a task, it is
        the plain function; called directly inside a running task (where it would run
        unrecorded, and again on every resume) it raises, naming ``ctx.call``.

        ``replay_check``: on replay a recorded result is returned only to the same call —
        the same tool with the same arguments (``"args"``, the default). ``"name"``
        compares the tool only, for a deliberate change of arguments that keeps their
        meaning (a reworded prompt, say); the recorded result is then returned to the new
        arguments and an in-doubt call runs again under its old key. Use it knowingly.
        """

        def register(fn: F) -> F:
            spec = ToolSpec.of(
                fn,
                name=name,
                retry=retry,
                readonly=readonly,
                compensate=compensate,
                on_unknown=on_unknown,
                replay_check=replay_check,
            )
            check_id(spec.name, "tool name", error=TaskDefinitionError)
            wrapper = guarded(fn, spec.name)
            self._tools[fn] = self._tools[wrapper] = spec
            return wrapper  # type: ignore[return-value]

        return register(fn) if fn is not None else register

    def _tool_spec(self, fn: Callable[..., Any]) -> ToolSpec:
        spec = self._tools.get(fn)
        if spec is None:
            spec = self._tools[fn] = ToolSpec.of(fn)  # any callable can be a recorded call
        return spec

    def _task_spec(self, task: Callable[..., Any] | str) -> TaskSpec:
        spec = self._tasks.get(task) if isinstance(task, str) else self._task_fns.get(task)
        if spec is None:
            label = task if isinstance(task, str) else getattr(task, "__qualname__", repr(task))
            known = ", ".join(sorted(self._tasks)) or "none"
            raise TaskDefinitionError(f"{label!r} is not a task of this app (registered: {known}); use @app.task")
        return spec

    def _data_model(self, spec: TaskSpec, state: TaskState) -> BaseModel:
        assert spec.state is not None
        return spec.state.model_validate(upcast_data(spec, state))

    # ------------------------------------------------------------------ running
    def start(
        self,
        task: Callable[..., Any] | str,
        *args: Any,
        task_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        **kwargs: Any,
    ) -> TaskHandle:
        """Record a new task without running it (``pending``); an existing ``task_id`` is returned as is."""
        spec = self._task_spec(task)
        return TaskHandle.of(self._create(spec, args, kwargs, task_id, user_id, session_id))

    def _create(
        self,
        spec: TaskSpec,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        task_id: str | None,
        user_id: str | None,
        session_id: str | None,
    ) -> TaskState:
        if task_id is not None:
            check_task_id(task_id)
        check_optional_id(user_id, "user_id")
        check_optional_id(session_id, "session_id")
        if task_id is not None:
            try:
                return self._existing(spec, task_id)
            except TaskNotFoundError:
                pass
        inputs = spec.bind(args, kwargs)
        data = None
        if spec.state is not None:
            try:
                data = spec.state().model_dump(mode="json")
            except ValidationError as exc:
                raise TaskDefinitionError(
                    f"task {spec.name!r}: its state model {spec.state.__name__} needs defaults for every "
                    f"field, so a new task can start with it ({exc.error_count()} fields lack one)"
                ) from None
        try:
            return self.log.create(
                type=spec.name,
                inputs=inputs,
                task_id=task_id,
                user_id=user_id,
                session_id=session_id,
                phases=spec.phases,
                data=data,
                data_version=spec.data_version,
            )
        except ConflictError:
            if task_id is None:
                raise
            # Another caller created it between our look and our write: we get what a later
            # caller gets, the task as it stands (running it then meets its lease).
            return self._existing(spec, task_id)

    def _existing(self, spec: TaskSpec, task_id: str) -> TaskState:
        existing = self.log.load(task_id)
        if existing.type != spec.name:
            raise InvalidInputError(f"task {task_id!r} exists as a {existing.type!r} task, not {spec.name!r}")
        return existing

    def run(
        self,
        task: Callable[..., Any] | str,
        *args: Any,
        task_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        **kwargs: Any,
    ) -> TaskHandle:
        """Run a task here until it completes, fails or suspends.

        With a ``task_id`` that exists, never starts a second copy: resumes it, or
        returns it as it is if it has finished.
        """
        spec = self._task_spec(task)
        return self._drive(
            spec,
            lambda: self._execute(spec, self._create(spec, args, kwargs, task_id, user_id, session_id).task_id),
            "run",
            "run_async",
        )

    async def run_async(
        self,
        task: Callable[..., Any] | str,
        *args: Any,
        task_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        **kwargs: Any,
    ) -> TaskHandle:
        """The async twin of :meth:`run`."""
        spec = self._task_spec(task)
        state = self._create(spec, args, kwargs, task_id, user_id, session_id)
        return await drive_async(self._execute(spec, state.task_id))

    def resume(self, task_id: str) -> TaskHandle:
        """Continue a stored task from its log; recorded steps are not run again."""
        spec = self._spec_of(task_id)
        return self._drive(spec, lambda: self._execute(spec, task_id), "resume", "resume_async")

    async def resume_async(self, task_id: str) -> TaskHandle:
        """The async twin of :meth:`resume`."""
        return await drive_async(self._execute(self._spec_of(task_id), task_id))

    def retry(self, task_id: str, *, actor: str | None = None) -> TaskHandle:
        """Run a failed task again with the code as it is now — after you fixed it.

        Calls recorded before the failure return their results without running; the call
        that gave up gets a fresh round of attempts under its key, and everything after it
        runs. The retry is recorded in the history (``actor``, when, the failure it answered).
        Compensations that ran for the failure are not run again if the task fails again.
        A task that is not failed is refused, naming its status.
        """
        spec = self._spec_of(task_id)
        self._request_retry(task_id, actor)
        return self._drive(spec, lambda: self._execute(spec, task_id), "retry", "retry_async")

    async def retry_async(self, task_id: str, *, actor: str | None = None) -> TaskHandle:
        """The async twin of :meth:`retry`."""
        spec = self._spec_of(task_id)
        self._request_retry(task_id, actor)
        return await drive_async(self._execute(spec, task_id))

    def _request_retry(self, task_id: str, actor: str | None) -> None:
        def request(state: TaskState) -> list[Event]:
            if state.status is not Status.FAILED:
                raise InvalidInputError(
                    f"task {task_id!r} is {state.status.value}; only a failed task can be retried"
                    + (" (a completed task is done)" if state.status is Status.COMPLETED else "")
                )
            return [retry_event(self.log.events(task_id), state, actor)]

        self._append_checked(task_id, request)

    def _append_checked(self, task_id: str, make: Callable[[TaskState], list[Event]]) -> None:
        """Append what ``make`` decides from the latest state, again if another writer got there first."""

        def attempt() -> None:
            state = self.log.load(task_id)
            self.log.append(task_id, make(state), state.version)

        retry_on_conflict(attempt, stream=task_id)

    def get(self, task_id: str) -> TaskHandle:
        """Where a task stands now."""
        return TaskHandle.of(self.log.load(task_id))

    def state(self, task_id: str) -> TaskState:
        return self.log.load(task_id)

    def resolve_call(self, task_id: str, n: int, result: Any) -> TaskState:
        """Settle a call whose outcome is unknown (started, never recorded) with what really happened."""
        state = self.log.load(task_id)
        call = state.call(n)
        if call is None or call.status != "intended":
            status = "missing" if call is None else call.status
            raise InvalidInputError(
                f"call #{n} of task {task_id!r} is {status}; only an unfinished call can be resolved"
            )
        attempt = call.attempts[-1].number if call.attempts else 1
        self.log.append(task_id, [CallCompleted(n=n, result=result, attempt=attempt, duration=0.0)], state.version)
        return self.log.load(task_id)

    # ------------------------------------------------------------------ conversations and users
    def session(
        self,
        session_id: str | None = None,
        *,
        user_id: str | None = None,
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        compact_when_tokens_over: int | None = None,
    ) -> Session:
        """Open a session (one conversation), creating it if it does not exist.

        With ``summarizer`` and ``compact_when_tokens_over``, adding a message compacts the session
        when the turns after its newest summary weigh more than that many tokens.
        """
        check_optional_id(session_id, "session_id")
        check_optional_id(user_id, "user_id")
        return open_session(
            self.log,
            session_id,
            user_id=user_id,
            counter=counter,
            summarizer=summarizer,
            compact_when_tokens_over=compact_when_tokens_over,
        )

    def sessions(self, *, user_id: str | None = None, limit: int = 100, offset: int = 0) -> list[SessionInfo]:
        """Sessions of this tenant (of one user, if given), newest first."""
        return list_sessions(self.log, user_id=user_id, limit=limit, offset=offset)

    def delete_session(self, session_id: str, *, cascade: bool = False) -> int:
        """Delete a session and its messages. Tasks linked to it are deleted with ``cascade=True``;
        without it, a session with tasks is refused, naming how many it would leave orphaned."""
        check_id(session_id, "session_id")
        return delete_session(self.log, session_id, cascade=cascade)

    def user(self, user_id: str, *, schema: type[BaseModel] | None = None) -> UserState:
        """A user's versioned document (preferences, profile), validated by ``schema`` if given."""
        check_id(user_id, "user_id")
        return UserState(self.log, user_id, schema)

    # ------------------------------------------------------------------ people and control
    def send_input(self, task_id: str, key: str, value: Any) -> TaskHandle:
        """Answer (or answer ahead of) ``ctx.wait_for_input(key)``, from any process.

        Checked against the wait's schema when the task is waiting for ``key``; a bad
        value is refused with the validation error and nothing is recorded. The task
        becomes runnable: a worker (or ``app.resume``) continues it.
        """
        check_id(key, "key")
        value = as_json(value)
        def answer() -> TaskHandle:  # a running task appends too: decided again on a conflict
            state = self.log.load(task_id)
            if state.status in TERMINAL:
                raise InvalidInputError(f"task {task_id!r} is {state.status.value}; it takes no more input")
            if key in state.received:
                if state.received[key] == value:
                    return TaskHandle.of(state)  # the same answer twice: nothing new
                raise InvalidInputError(f"task {task_id!r} already has an answer for {key!r}")
            if state.waiting is not None and state.waiting.key != key:
                raise InvalidInputError(
                    f"task {task_id!r} waits for input {state.waiting.key!r}, not {key!r}: "
                    f"send it with key {state.waiting.key!r}"
                )
            if state.waiting is not None and state.waiting.key == key and state.waiting.input_schema:
                check_against_schema(task_id, key, value, state.waiting.input_schema)
            self.log.append(task_id, [InputReceived(key=key, value=value)], state.version)
            return TaskHandle.of(self.log.load(task_id))

        return retry_on_conflict(answer, stream=task_id)

    def pending_inputs(self, user_id: str | None = None, *, limit: int = 100) -> list[PendingInput]:
        """What tasks are waiting for, with their prompts, oldest question first."""
        found = []
        for row in self.log.list(status=Status.AWAITING_INPUT, user_id=user_id, limit=limit):
            try:
                waiting = self.log.load(row.task_id).waiting
            except TetherError as exc:  # one unreadable stream must not hide the others
                _log.warning("task %s cannot be read: %s", row.task_id, exc)
                continue
            if waiting is not None:
                found.append(
                    PendingInput(
                        row.task_id,
                        row.type,
                        row.user_id,
                        waiting.key,
                        waiting.prompt,
                        waiting.input_schema,
                        waiting.requested_at,
                        waiting.timeout_at,
                    )
                )
        return sorted(found, key=lambda p: p.requested_at)

    def list_tasks(
        self,
        *,
        status: Status | str | list[Status | str] | None = None,
        type: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[TaskSummary]:
        """Tasks, newest first, with where each stands: position, what it waits for, who holds it."""
        summaries = []
        now = time.time()
        for row in self.log.list(
            status=status, type=type, user_id=user_id, session_id=session_id, limit=limit, offset=offset
        ):
            held = row.lease_owner if row.lease_owner and (row.lease_expires or 0) > now else None
            try:
                state = self.log.load(row.task_id)
            except TetherError as exc:  # one unreadable stream must not hide the others
                summaries.append(_unreadable(row, held, exc))
                continue
            summaries.append(
                TaskSummary(
                    task_id=row.task_id,
                    type=row.type,
                    status=state.status,
                    position=state.position,
                    waiting_for=state.waiting.key if state.waiting else None,
                    prompt=state.waiting.prompt if state.waiting else None,
                    wakes_at=state.wake_at,
                    held_by=held,
                    user_id=row.user_id,
                    version=state.version,
                    updated_at=state.updated_at,
                )
            )
        return summaries

    def cancel(self, task_id: str, reason: str = "cancelled") -> TaskHandle:
        """Cancel a task that has not finished; its completed calls are compensated in reverse order.

        Idempotent: cancelling a cancelled task returns it as it is. A task running in
        another process loses its lease and stops at its next step.
        """
        state = self.log.load(task_id)
        if state.status is Status.CANCELLED:
            return TaskHandle.of(state)
        if state.status in TERMINAL:
            raise InvalidTransition("status", state.status.value, Status.CANCELLED.value, [])
        if state.cancel_reason is None:

            def request() -> TaskState | None:
                current = self.log.load(task_id)
                if current.status in TERMINAL or current.cancel_reason is not None:
                    return current  # finished meanwhile, or another caller asked first
                self.log.append(task_id, [CancelRequested(reason=reason)], current.version)
                return None

            # Under contention the request is recorded or the call fails: never a run without it.
            done = retry_on_conflict(request, stream=task_id)
            if done is not None and done.status in TERMINAL:
                return TaskHandle.of(done)
        spec = self._task_spec(state.type)
        return self._drive(spec, lambda: self._execute(spec, task_id, force=True), "cancel", "cancel")

    def run_worker(
        self, *, concurrency: int = 1, idle_exit: bool = False, poll: float = 0.5, grace: float = 30.0
    ) -> int:
        """Claim and run runnable tasks until stopped (SIGTERM, SIGINT), or until idle with ``idle_exit``.

        Returns how many task runs it carried out.
        """
        check_int(concurrency, "concurrency", low=1, high=1024, error=ConfigurationError)
        check_positive(poll, "poll")
        check_positive(grace, "grace", zero=True)
        from tether.runtime.worker import Worker

        return Worker(self, concurrency=concurrency, idle_exit=idle_exit, poll=poll, grace=grace).run()

    def _run_claimed(self, task_id: str, token: int) -> TaskHandle:
        """Carry out one run of a task a worker claimed (it holds the lease ``token``)."""
        try:
            spec = self._task_spec(self.log.load(task_id).type)
        except TetherError:
            self.store.release_lease(self.tenant, task_id, token)
            raise
        return self._drive(
            spec, lambda: self._execute(spec, task_id, token=token), "run", "run_async", interruptible=False
        )

    def _drive(
        self, spec: TaskSpec, make_flow: Callable[[], Flow[T]], name: str, twin: str, *, interruptible: bool = True
    ) -> T:
        """Run a flow with the driver the task needs: in plain Python, or on a fresh event loop for an
        async task (refused inside a running loop, before anything is done, pointing at ``twin``).

        ``interruptible``: SIGTERM stops the run like Ctrl-C does — cleanly, the lease released and
        the task left resumable (a worker has its own SIGTERM grace, so it passes ``False``)."""
        try:
            with _sigterm_as_interrupt(interruptible):
                if spec.is_async:
                    _no_running_loop(name, twin)
                    return asyncio.run(drive_async(make_flow()))
                return drive(make_flow())
        except RunInterrupted as stop:
            raise stop.with_traceback(None) from None  # one line saying how to resume, not tether's insides

    # ------------------------------------------------------------------ time travel
    def history(self, task_id: str) -> list[HistoryEntry]:
        """Every event with its seq, time, type, a one-line summary, and the step it fell in."""
        return history_of(self.log.events(task_id))

    def state_at(self, task_id: str, seq: int) -> TaskState:
        """The state right after event ``seq``."""
        return self.log.state_at(task_id, seq)

    def state_before(self, task_id: str, step: int | str) -> TaskState:
        """The state just before step ``step`` (1-based, in the order the task ran them, or a name)."""
        start, _ = step_bounds(self.log.events(task_id), step)
        return self.log.state_at(task_id, start - 1)

    def state_after(self, task_id: str, step: int | str) -> TaskState:
        """The state right after step ``step`` ended (completed or failed)."""
        _, end = step_bounds(self.log.events(task_id), step)
        if end is None:
            raise InvalidInputError(f"step {step!r} of task {task_id!r} has not ended")
        return self.log.state_at(task_id, end)

    def diff(self, task_id: str, a: int, b: int, *, other: str | None = None) -> StateDiff:
        """An RFC 6902 patch from the state after event ``a`` to the state after ``b`` —
        of ``other`` when given (a fork against its parent, say)."""
        second = other or task_id
        return diff_states(
            self.log.state_at(task_id, a),
            self.log.state_at(second, b),
            a_label=f"{task_id}@{a}",
            b_label=f"{second}@{b}",
        )

    def fork(
        self, task_id: str, *, at: int, inputs: dict[str, Any] | None = None, new_id: str | None = None
    ) -> TaskHandle:
        """A new task whose history is ``task_id``'s up to event ``at`` (by reference), pending.

        Resuming it runs the task's code from that point; the parent is untouched.
        ``inputs`` replaces the task's inputs for the fork (to try it another way).
        """
        check_int(at, "at", low=1)
        if new_id is not None:
            check_task_id(new_id, "new_id")
        row = self.log.task_row(task_id, "forked")  # a task, not one of tether's own streams
        if inputs is not None:
            self._task_spec(row.type)  # the code must be known to rerun it
            inputs = as_json(inputs)
        at_state = self.log.state_at(task_id, at)  # also checks ``at``
        new_id = new_id or uuid.uuid4().hex
        if self.store.get_task(self.tenant, new_id) is not None:
            raise ConflictError(new_id, expected=0, actual=None)
        session = self._branch_conversation(at_state, f"{at_state.session_id}@{new_id}")
        try:
            return TaskHandle.of(self.log.fork(task_id, at, new_id=new_id, inputs=inputs, session_id=session))
        except BaseException:
            self._drop_branch(session)
            raise

    def _branch_conversation(self, at_state: TaskState, new_session_id: str) -> str | None:
        if at_state.session_id is None:
            return None
        if self.store.get_task(self.tenant, _session_stream(new_session_id)) is not None:
            raise ConflictError(_session_stream(new_session_id), expected=0, actual=None)
        return fork_conversation(self.log, at_state, new_session_id)

    def _drop_branch(self, session: str | None) -> None:
        """Undo a conversation branch made for a fork that could not be made: a refusal writes nothing."""
        if session is not None:
            self.store.delete_task(self.tenant, _session_stream(session))

    def rewind(self, task_id: str, *, to: int) -> TaskHandle:
        """Go back to event ``to`` and try again: ``task_id`` becomes a fork of itself at ``to``.

        The abandoned branch stays listable as ``{task_id}~N`` (its state says which task
        took its place). A task that a live worker holds is refused with ``TaskBusyError``.
        """
        check_int(to, "to", low=1)
        self.log.task_row(task_id, "rewound")
        token = self._acquire(task_id)
        try:
            n = 1
            while self.store.get_task(self.tenant, f"{task_id}~{n}") is not None:
                n += 1
            archive = f"{task_id}~{n}"
            at_state = self.log.state_at(task_id, to)  # also checks ``to``
            session = self._branch_conversation(at_state, f"{at_state.session_id}@{task_id}.{n}")
            self.store.release_lease(self.tenant, task_id, token)
            try:
                return TaskHandle.of(self.log.rewind(task_id, to, archive_id=archive, session_id=session))
            except BaseException:
                self._drop_branch(session)
                raise
        except BaseException:
            self.store.release_lease(self.tenant, task_id, token)
            raise

    def replay(self, task_id: str, upto: int | None = None) -> ReplayReport:
        """Run the task's current code against its recorded log, executing no tool and writing
        nothing; report the first divergence, or that it replays cleanly. Run it before you
        deploy changed agent code."""
        if upto is not None:
            check_int(upto, "upto", low=1)
        spec = self._spec_of(task_id)
        return self._drive(spec, lambda: self._replay(spec, task_id, upto), "replay", "replay")

    def _replay(self, spec: TaskSpec, task_id: str, upto: int | None) -> Flow[ReplayReport]:
        history = self.log.events(task_id, upto=upto)
        state = self.log.state_at(task_id, history[-1].seq)
        context_type = AsyncTaskContext if spec.is_async else TaskContext
        ctx = context_type(self, spec, state, history, None)
        ctx._replay_only = True
        recorded = len(history)
        running = RUNNING_TASK.set(task_id)
        try:
            outcome = yield Invoke(spec.fn, (ctx,), spec.inputs_for_call(state.inputs))
        except ReplayEnd:
            return ReplayReport(task_id, True, ctx._record.walked, recorded, "reached the end of the record")
        except (Suspend, Cancelled):
            return ReplayReport(task_id, True, ctx._record.walked, recorded, "reached the end of the record")
        finally:
            ctx._end()
            RUNNING_TASK.reset(running)
        assert outcome is not None
        if isinstance(outcome.value, NonDeterminismError):
            return ReplayReport(task_id, False, ctx._record.walked, recorded, str(outcome.value), outcome.value)
        head = ctx._record.first_left()
        if head is not None:
            error = NonDeterminismError(
                task_id,
                head.seq,
                f"more work ({head.event.event_type})",
                "the task to end" if outcome.ok else f"it to raise {outcome.value!r}",
            )
            return ReplayReport(task_id, False, ctx._record.walked, recorded, str(error), error)
        if outcome.ok:
            if state.status is Status.COMPLETED and state.output != as_json(outcome.value):
                return ReplayReport(
                    task_id,
                    False,
                    ctx._record.walked,
                    recorded,
                    f"the code now returns {outcome.value!r}; the record has {state.output!r}",
                )
            return ReplayReport(task_id, True, ctx._record.walked, recorded, "the code returns")
        error = outcome.value
        error_type = error.error_type if isinstance(error, ToolError) else type(error).__name__
        walked = ctx._record.walked
        if isinstance(error, NOT_A_TASK_FAILURE):  # the replay itself could not go on: never "clean"
            stopped = f"the replay stopped: {type(error).__name__}: {error}"
            return ReplayReport(task_id, False, walked, recorded, stopped)
        if state.failure is not None:
            if state.failure.exception_type != error_type:
                return ReplayReport(
                    task_id,
                    False,
                    walked,
                    recorded,
                    f"the code now raises {error_type}; the record failed with {state.failure.exception_type}",
                )
            return ReplayReport(task_id, True, walked, recorded, f"the code raises {error_type}, as recorded")
        if ctx._record.done:  # the record ends here: a live run would fail the task at this point
            return ReplayReport(task_id, True, walked, recorded, f"the code raises {error_type} where the record ends")
        return ReplayReport(
            task_id, False, walked, recorded, f"the code now raises {error_type}; the record goes on without a failure"
        )

    def check(self, *, finished: int = 0, limit: int = 100_000) -> CheckReport:
        """Replay every task that has not finished (and the ``finished`` most recent finished ones)
        against the code as it is now, running and writing nothing: what a deploy would break.

        Run it in CI before you deploy changed task code (``tether check --app module:app``).
        """
        if type(finished) is not int or finished < 0:
            raise InvalidInputError(f"finished must be an int >= 0, got {finished!r}")
        open_statuses = [s for s in Status if s not in TERMINAL]
        rows = self.log.list(status=open_statuses, limit=limit)
        if finished:
            rows += self.log.list(status=list(TERMINAL), limit=finished)
        reports: list[ReplayReport] = []
        unknown: list[str] = []
        for row in rows:
            try:
                spec = self._task_spec(row.type)
            except TaskDefinitionError:
                unknown.append(row.task_id)
                continue
            reports.append(self._drive(spec, partial(self._replay, spec, row.task_id, None), "check", "check"))
        return CheckReport(reports=reports, unknown=unknown)

    def _spec_of(self, task_id: str) -> TaskSpec:
        return self._task_spec(self.log.load(task_id).type)

    # ------------------------------------------------------------------ the run
    def _acquire(self, task_id: str, *, force: bool = False) -> int:
        now = time.time()
        token = self.store.acquire_lease(self.tenant, task_id, self.worker_id, self.lease_ttl, now)
        if token is not None:
            return token
        row = self.log.get(task_id)
        if row.lease_owner is not None and (force or _owner_is_dead(row.lease_owner)):
            token = self.store.acquire_lease(
                self.tenant, task_id, self.worker_id, self.lease_ttl, now, steal_from=row.lease_owner
            )
            if token is not None:
                return token
        raise TaskBusyError(task_id, owner=row.lease_owner, expires=row.lease_expires)

    def _execute(
        self, spec: TaskSpec, task_id: str, *, token: int | None = None, force: bool = False
    ) -> Flow[TaskHandle]:
        """Run (or replay, then continue) a task while holding its lease: ``token``, or one taken here."""
        ended: Callable[[], None] | None = None
        if token is None:
            state = self.log.load(task_id)
            if state.status in TERMINAL:
                return TaskHandle.of(state)
            token = self._acquire(task_id, force=force)
        try:
            with _Heartbeat(self, task_id, token):
                history = self.log.events(task_id)
                # The state at the end of that history: from memory when this log just loaded it.
                state = self.log.cached(task_id, history[-1].seq)
                if state.status in TERMINAL:
                    return TaskHandle.of(state)
                context_type = AsyncTaskContext if spec.is_async else TaskContext
                ctx = context_type(self, spec, state, history, token)
                ended = ctx._end
                if state.status is not Status.RUNNING:
                    ctx._append([StatusChanged(status=Status.RUNNING.value)])
                if spec.state is not None and spec.data_version is not None and state.data_version != spec.data_version:
                    migrated = self._data_model(spec, state).model_dump(mode="json")
                    ctx._append(
                        [DataMigrated(data=migrated, from_version=state.data_version, to_version=spec.data_version)]
                    )
                running = RUNNING_TASK.set(task_id)
                try:
                    outcome = yield Invoke(spec.fn, (ctx,), spec.inputs_for_call(state.inputs))
                except KeyboardInterrupt as stop:
                    raise RunInterrupted(task_id, stop) from None
                except Suspend:
                    return TaskHandle.of(ctx._latest)  # waiting or sleeping: no process needs to stay
                except Cancelled as cancel:
                    yield from self._end_cancelled(ctx, cancel.reason)
                    return TaskHandle.of(ctx._latest)
                finally:
                    RUNNING_TASK.reset(running)
                assert outcome is not None
                if ctx._cancel_reason is not None and not isinstance(outcome.value, NOT_A_TASK_FAILURE):
                    yield from self._end_cancelled(ctx, ctx._cancel_reason)
                elif outcome.ok:
                    head = ctx._record.first_left()
                    if head is not None:
                        raise NonDeterminismError(
                            task_id, head.seq, f"more work ({head.event.event_type})", "the task to return"
                        )
                    try:
                        ctx._append([OutputSet(output=outcome.value), StatusChanged(status=Status.COMPLETED.value)])
                    except InvalidInputError as exc:
                        yield from self._fail(ctx, exc)
                else:
                    if isinstance(outcome.value, NOT_A_TASK_FAILURE):
                        raise outcome.value
                    yield from self._fail(ctx, outcome.value)
                return TaskHandle.of(ctx._latest)
        finally:
            if ended is not None:
                ended()  # a parallel branch still going records nothing more
            try:
                self.log.snapshot_if_due(task_id)
                self.store.release_lease(self.tenant, task_id, token)
            except TetherError:
                pass  # the lease runs out by itself; the snapshot is only a cache

    def _end_cancelled(self, ctx: _Context, reason: str) -> Flow[None]:
        """Run the compensations of completed calls in reverse order, then mark the task cancelled."""
        yield from ctx._compensate_flow()
        ctx._append([StatusChanged(status=Status.CANCELLED.value, reason=reason)])

    def _fail(self, ctx: _Context, error: BaseException) -> Flow[None]:
        """Record the failure, run the compensations in reverse order, and mark the task failed."""
        if ctx._latest.failure is None:
            ctx._append([_failure_event(ctx, error)])
        yield from ctx._compensate_flow()
        ctx._append([StatusChanged(status=Status.FAILED.value, reason=f"{type(error).__name__}: {error}")])

    def close(self) -> None:
        self.store.close()


def _failure_event(ctx: _Context, error: BaseException) -> FailureRecorded:
    state = ctx._latest
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


@contextmanager
def _sigterm_as_interrupt(active: bool) -> Iterator[None]:
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


def _unreadable(row: TaskRow, held: str | None, exc: TetherError) -> TaskSummary:
    """A listing's line for a task whose log cannot be read: what its index row says, and why."""
    _log.warning("task %s cannot be read: %s", row.task_id, exc)
    try:
        status = Status(row.status)
    except ValueError:
        status = Status.FAILED
    return TaskSummary(
        task_id=row.task_id,
        type=row.type,
        status=status,
        position=f"unreadable: {type(exc).__name__}: {exc}",
        waiting_for=None,
        prompt=None,
        wakes_at=None,
        held_by=held,
        user_id=row.user_id,
        version=row.version,
        updated_at=datetime.fromtimestamp(row.updated_at, tz=UTC),
    )


def _owner_is_dead(owner: str) -> bool:
    """True when ``owner`` names a process on this machine that no longer exists."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _no_running_loop(name: str, twin: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise TetherError(f"app.{name}() of an async task was called inside a running event loop; await app.{twin}()")
