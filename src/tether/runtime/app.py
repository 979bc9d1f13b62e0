"""The application object: registers tasks and tools, runs and resumes tasks durably."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar, overload

from pydantic import BaseModel, ValidationError

from tether.canonical import as_json
from tether.checks import check_id, check_input_key, check_int, check_optional_id, check_positive, check_task_id
from tether.conversation import (
    Session,
    SessionInfo,
    Summarizer,
    TokenCounter,
    delete_session,
    list_sessions,
    open_session,
)
from tether.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    InvalidTransition,
    TaskBusyError,
    TaskDefinitionError,
    TaskNotFoundError,
    TetherError,
)
from tether.events import (
    CancelRequested,
    Event,
    InputReceived,
    Recorded,
)
from tether.log import SnapshotPolicy, TaskLog
from tether.log.conflicts import retry_on_conflict
from tether.log.heads import read_head
from tether.model import TaskState
from tether.model.status import TERMINAL, Phases, Status
from tether.runtime._flow import RUNNING_TASK, async_twin, drive_async
from tether.runtime._time_travel import TimeTravel
from tether.runtime.calls import UNSET, settled_call
from tether.runtime.engine import Engine
from tether.runtime.handles import (
    CheckReport,
    PendingInput,
    TaskHandle,
    TaskSummary,
    check_against_schema,
    failure_summary,
)
from tether.runtime.ledger import Ledger, OnUnknown
from tether.runtime.listing import pending_inputs, task_summaries
from tether.runtime.retry import Retry
from tether.runtime.run import drive_task, execute, retry_event
from tether.runtime.specs import Registry, ReplayCheck, TaskSpec, ToolSpec, guarded
from tether.store import Closing, Store
from tether.telemetry import UsageReader
from tether.telemetry import hooks as telemetry
from tether.timetravel import HistoryEntry, ReplayReport, StateDiff
from tether.userstate import UserState

__all__ = ["App", "CheckReport", "PendingInput", "TaskHandle", "TaskSummary", "check_against_schema", "failure_summary"]

_log = logging.getLogger("tether")
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class App(Closing):
    """Registers tasks and tools, and runs tasks durably against one store.

    Args:
        url: the store: a URL (``memory://`` for tests), a SQLite path, or a :class:`~tether.store.Store`.
            Without one, ``$TETHER_URL``, then ``sqlite:///tether.db`` (:func:`tether.store.resolve_url`,
            the order the CLI's ``--db`` follows too).
        tenant: every task, ledger key and lease is scoped to it.
        snapshots: when to snapshot task state (see :class:`~tether.SnapshotPolicy`).
        lease_ttl: seconds a run holds a task without renewing its lease; a crashed
            run's task can be taken over after that (at once by a process on the same
            machine that sees the holder is gone).
        max_value_bytes: the largest encoded event (a tool result, an input) accepted.
        inline_wait: sleeps and retry backoffs up to this many seconds wait in the running
            process; longer ones suspend the task (``sleeping``) and free the worker.
        cache_bytes: about how many bytes of tasks' events the app keeps folded in memory, the
            tasks it ran or read most recently first (a task it runs is read from its store again
            only when it was dropped). Memory stays bounded however many tasks a worker or a
            server goes through.

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
        >>> app.close()

    An app is a context manager, ``with`` or ``async with``: it is closed when the block ends.
    Each read and control method has an async twin named ``<method>_async`` (``get_async``,
    ``send_input_async``, ``cancel_async``, …) whose store I/O runs off the event loop.
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
        cache_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        if url is not None and not isinstance(url, str | Store):
            raise ConfigurationError(f"url must be a store URL or a SQLite path, got {type(url).__name__} {url!r}")
        check_id(tenant, "tenant", error=ConfigurationError)
        check_positive(lease_ttl, "lease_ttl")
        check_positive(inline_wait, "inline_wait", zero=True)
        check_int(max_value_bytes, "max_value_bytes", low=1, error=ConfigurationError)
        log = TaskLog(
            url,
            tenant=tenant,
            snapshots=snapshots,
            max_event_bytes=max_value_bytes,
            cache_bytes=cache_bytes,
        )
        self.engine = Engine(log, lease_ttl=lease_ttl, inline_wait=inline_wait)
        """What the runtime's parts share (the log, the registered code, the commit thread, the lease's
        time): a run, a worker and time travel take it, never the app."""
        self._travel = TimeTravel(self.engine)
        self.usage = UsageReader(log)  # app.usage(task_id), app.usage(by="user", since="7d")

    # ------------------------------------------------------------------ what it runs on
    @property
    def log(self) -> TaskLog:
        """The task log this app reads and writes."""
        return self.engine.log

    @property
    def store(self) -> Store:
        return self.engine.store

    @property
    def tenant(self) -> str:
        return self.engine.tenant

    @property
    def registry(self) -> Registry:
        """The tasks and tools registered with ``@app.task`` and ``@app.tool``."""
        return self.engine.registry

    @property
    def ledger(self) -> Ledger:
        """Exactly-once effects outside a task's calls, by key (``app.ledger.once``)."""
        return self.engine.ledger

    @property
    def worker_id(self) -> str:
        """Who holds the leases this app takes: ``host:pid:suffix``."""
        return self.engine.worker_id

    @property
    def lease_ttl(self) -> float:
        return self.engine.lease_ttl

    @property
    def inline_wait(self) -> float:
        return self.engine.inline_wait

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
            self.registry.add_task(TaskSpec.of(fn, name=name, state=state, upcast=upcast, phases=phases))
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
            self.registry.add_tool(spec, fn, wrapper)
            return wrapper  # type: ignore[return-value]

        return register(fn) if fn is not None else register

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
        spec = self.registry.task(task)
        _, state = self._create(spec, args, kwargs, task_id, user_id, session_id)
        return TaskHandle.of(state)

    def _create(
        self,
        spec: TaskSpec,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        task_id: str | None,
        user_id: str | None,
        session_id: str | None,
        *,
        holder: tuple[str, float] | None = None,
    ) -> tuple[Recorded | None, TaskState]:
        """The task these arguments make, created (held by ``holder``, when given) with its first
        record; or the existing task ``task_id`` names, as it stands, with no record.

        A new task is written at once, without looking first: a run of a new task costs one write,
        not a read and a write. An existing ``task_id`` is met as the write's conflict (or, when
        these arguments do not fit the task, looked up: an existing task is returned whatever they
        are, as before)."""
        if task_id is not None:
            check_task_id(task_id)
        check_optional_id(user_id, "user_id")
        check_optional_id(session_id, "session_id")
        try:
            inputs = spec.bind(args, kwargs)
            data = _initial_data(spec)
        except TetherError:
            if task_id is not None:
                with contextlib.suppress(TaskNotFoundError):
                    return None, self._existing(spec, task_id)
            raise  # the arguments' error: there is no such task to return
        try:
            return self.log.create_record(
                type=spec.name,
                inputs=inputs,
                task_id=task_id,
                user_id=user_id,
                session_id=session_id,
                phases=spec.phases,
                data=data,
                data_version=spec.data_version,
                holder=holder,
                trace=telemetry.caller_trace(),
            )
        except ConflictError:
            if task_id is None:
                raise
            # The task exists (created before, or by another caller between our look and our write):
            # we get it as it stands (running it then meets its lease).
            return None, self._existing(spec, task_id)

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
        spec = self.registry.task(task)
        create = functools.partial(
            self._create, spec, args, kwargs, task_id, user_id, session_id, holder=(self.worker_id, self.lease_ttl)
        )
        return drive_task(spec, lambda: execute(self.engine, spec, create), "run", "run_async")

    async def run_async(
        self,
        task: Callable[..., Any] | str,
        *args: Any,
        task_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        **kwargs: Any,
    ) -> TaskHandle:
        """The async twin of :meth:`run`. Its store I/O runs off the event loop."""
        spec = self.registry.task(task)
        # Created (or found) in the same trip off the loop as the lease is taken and the record read.
        create = functools.partial(
            self._create, spec, args, kwargs, task_id, user_id, session_id, holder=(self.worker_id, self.lease_ttl)
        )
        return await drive_async(execute(self.engine, spec, create))

    def resume(self, task_id: str) -> TaskHandle:
        """Continue a stored task from its log; recorded steps are not run again."""
        spec = self.engine.spec_of(task_id)
        return drive_task(spec, lambda: execute(self.engine, spec, task_id), "resume", "resume_async")

    async def resume_async(self, task_id: str) -> TaskHandle:
        """The async twin of :meth:`resume`. Its store I/O runs off the event loop."""
        return await drive_async(execute(self.engine, await _off_loop(self.engine.spec_of, task_id), task_id))

    def retry(self, task_id: str, *, actor: str | None = None) -> TaskHandle:
        """Run a failed task again with the code as it is now — after you fixed it.

        Calls recorded before the failure return their results without running; the call
        that gave up gets a fresh round of attempts under its key, and everything after it
        runs. The retry is recorded in the history (``actor``: who asked, e.g. a user or an API
        key's name; when; the failure it answered). Compensations that ran for the failure are
        not run again if the task fails again.
        A task that is not failed is refused, naming its status.
        """
        spec = self.engine.spec_of(task_id)
        self.request_retry(task_id, actor=actor)
        return drive_task(spec, lambda: execute(self.engine, spec, task_id), "retry", "retry_async")

    async def retry_async(self, task_id: str, *, actor: str | None = None) -> TaskHandle:
        """The async twin of :meth:`retry`. Its store I/O runs off the event loop."""
        spec = await _off_loop(self.engine.spec_of, task_id)
        await _off_loop(functools.partial(self.request_retry, actor=actor), task_id)
        return await drive_async(execute(self.engine, spec, task_id))

    def request_retry(self, task_id: str, *, actor: str | None = None) -> TaskHandle:
        """Record a retry of a failed task without running it: a worker (or ``resume``) runs it.

        What :meth:`retry` records first; a server without the task's code calls this.
        """
        check_optional_id(actor, "actor")

        def request(state: TaskState) -> list[Event]:
            if state.status is not Status.FAILED:
                raise InvalidInputError(
                    f"task {task_id!r} is {state.status.value}; only a failed task can be retried"
                    + (" (a completed task is done)" if state.status is Status.COMPLETED else "")
                )
            return [retry_event(self.log.events(task_id), state, actor)]

        self._append_checked(task_id, request)
        return TaskHandle.of(self.log.load(task_id))

    def _append_checked(self, task_id: str, make: Callable[[TaskState], list[Event]]) -> None:
        """Append what ``make`` decides from the latest state, again if another writer got there first."""

        def attempt() -> None:
            state = self.log.load(task_id)
            self.log.append(task_id, make(state), state.version)

        retry_on_conflict(attempt, stream=task_id)

    def get(self, task_id: str) -> TaskHandle:
        """Where a task stands now: read off its index row (one read, whatever its length); its full
        state is loaded when the handle's ``state`` is first asked for."""
        row = self.log.get(task_id)
        head = read_head(row)
        if head is None:  # written before tether kept heads, and not appended to since
            return replace(TaskHandle.of(self.log.load(task_id)), parked=row.parked)
        load = functools.partial(self.log.load, task_id)
        return TaskHandle(
            task_id, head.status, head.output, head.failure, head.position, head.waiting, _load=load, parked=row.parked
        )

    def state(
        self,
        task_id: str,
        *,
        at: int | None = None,
        before_step: int | str | None = None,
        after_step: int | str | None = None,
    ) -> TaskState:
        """The task's state now — or right after event ``at``, or just before or right after a step
        (its 1-based number in the order the task ran them, or its name): at most one of the three."""
        if sum(x is not None for x in (at, before_step, after_step)) > 1:
            raise InvalidInputError("give at most one of at, before_step and after_step")
        if at is not None:
            return self.state_at(task_id, at)
        if before_step is not None:
            return self.state_before(task_id, before_step)
        if after_step is not None:
            return self.state_after(task_id, after_step)
        return self.log.load(task_id)

    def resolve_call(
        self, task_id: str, n: int, result: Any = UNSET, *, happened: bool = True, actor: str | None = None
    ) -> TaskState:
        """Settle a call whose outcome is unknown (started, never recorded) with what really happened:
        its ``result``, which the task gets as the call's; or ``happened=False``, and the next run runs
        it again under its key. A task waiting on the call (``on_unknown="raise"``) is runnable again
        at once; ``actor`` (who settled it) is recorded. Refused while a process holds the task."""
        check_optional_id(actor, "actor")
        state = self.log.load(task_id)
        row = self.store.get_task(self.tenant, task_id)
        held = row.held_by(time.time()) if row is not None else None
        self.log.append(task_id, settled_call(state, n, result, happened, held_by=held, actor=actor), state.version)
        return self.log.load(task_id)

    # ------------------------------------------------------------------ people and control
    def send_input(self, task_id: str, key: str, value: Any, *, actor: str | None = None) -> TaskHandle:
        """Answer (or answer ahead of) ``ctx.wait_for_input(key)``, from any process.

        Checked against the wait's schema when the task is waiting for ``key``; a bad
        value is refused with the validation error and nothing is recorded. The task
        becomes runnable: a worker (or ``app.resume``) continues it. ``actor`` (who answered:
        a user, an API key's name) is recorded with the answer and shown in the history.
        """
        check_input_key(key)
        check_optional_id(actor, "actor")
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
            self.log.append(task_id, [InputReceived(key=key, value=value, actor=actor)], state.version)
            return TaskHandle.of(self.log.load(task_id))

        return retry_on_conflict(answer, stream=task_id)

    def pending_inputs(self, user_id: str | None = None, *, limit: int = 100) -> list[PendingInput]:
        """What tasks are waiting for, with their prompts, oldest question first."""
        return pending_inputs(self.log, self.log.list(status=Status.AWAITING_INPUT, user_id=user_id, limit=limit))

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
        rows = self.log.list(
            status=status, type=type, user_id=user_id, session_id=session_id, limit=limit, offset=offset
        )
        return task_summaries(self.log, rows, time.time())

    def cancel(self, task_id: str, reason: str = "cancelled", *, actor: str | None = None) -> TaskHandle:
        """Cancel a task that has not finished; its completed calls are compensated in reverse order.

        Idempotent: cancelling a cancelled task returns it as it is. A task running in another
        process loses its lease and stops at its next step — unless that run has already taken the
        request in (it wrote after it: a worker woken by the request, compensating) or is inside a
        side-effecting call (its effect may be under way): then it carries the cancel out itself,
        once, and this waits for it to end (for at most twice the lease's time, then raises
        :class:`TaskBusyError`; the request stays recorded). Asked from inside the task's own run (a
        tool of it), it records the request and returns: the run carries it out at its next step.
        ``actor`` (who asked) is recorded with the request and shown in the history.
        """
        state, requested = self._request_cancel(task_id, reason, actor)
        if state.status in TERMINAL:
            return TaskHandle.of(state)
        if RUNNING_TASK.get() == task_id:  # asked by the task's own run (a tool of it): it meets the request
            return TaskHandle.of(state)  # at its next write and carries it out; waiting here would wait on itself
        spec = self.registry.task(state.type)
        deadline = time.monotonic() + 2 * self.lease_ttl
        while True:  # not a conflict retry: a wait for the run that holds the task to carry the cancel out
            done = self._cancel_here(spec, task_id, requested)
            if isinstance(done, TaskHandle):
                return done
            handle = self.get(task_id)
            if handle.status in TERMINAL:
                return handle
            if time.monotonic() >= deadline:
                raise done
            self.store.wait_for_change(0.05)

    def _cancel_here(self, spec: TaskSpec, task_id: str, requested: int | None) -> TaskHandle | TetherError:
        """Carry the cancel out in this process: the task's handle once it ends, or the error that says
        another run holds the task — it wrote after the request, or did as this run began — and so
        carries the cancel out itself (taking its lease now would run the compensations twice)."""
        try:
            return drive_task(spec, lambda: execute(self.engine, spec, task_id, at=requested), "cancel", "cancel_async")
        except (TaskBusyError, ConflictError) as held:
            return held

    def request_cancel(self, task_id: str, reason: str = "cancelled", *, actor: str | None = None) -> TaskHandle:
        """Record that a task is to be cancelled, without running it: its next run (a worker's, or
        :meth:`cancel` here) compensates and ends it. Idempotent; a finished task other than a
        cancelled one is refused with :class:`InvalidTransition`. ``actor``: who asked."""
        state, _ = self._request_cancel(task_id, reason, actor)
        return TaskHandle.of(state)

    def _request_cancel(self, task_id: str, reason: str, actor: str | None) -> tuple[TaskState, int | None]:
        """The task's state once the cancel is requested, and the version this request made (``None``
        when it was requested already, or the task has finished)."""
        check_optional_id(actor, "actor")

        def request() -> tuple[TaskState, int | None]:
            current = self.log.load(task_id)
            if current.status is not Status.CANCELLED and current.status in TERMINAL:
                raise InvalidTransition("status", current.status.value, Status.CANCELLED.value, [])
            if current.status in TERMINAL or current.cancel_reason is not None:
                return current, None  # cancelled already, or another caller asked first
            version = self.log.append(task_id, [CancelRequested(reason=reason, actor=actor)], current.version)
            return self.log.load(task_id), version

        # Under contention the request is recorded or the call fails: never a run without it.
        return retry_on_conflict(request, stream=task_id)

    def run_worker(
        self,
        *,
        concurrency: int = 1,
        idle_exit: bool = False,
        poll: float = 0.5,
        grace: float = 30.0,
        target: str | None = None,
        heartbeat: float = 30.0,
    ) -> int:
        """Claim and run runnable tasks until stopped (SIGTERM, SIGINT), or until idle with ``idle_exit``.

        While it runs, the worker records that it is alive every ``heartbeat`` seconds (at most 30),
        and when it stops, so ``tether show`` and the inspector can say whether any worker is there
        to act on a task. ``target``: how ``tether worker`` names this app (``module:app``), kept in
        that record so they can say how to start another. Returns how many task runs it carried out.
        """
        check_int(concurrency, "concurrency", low=1, high=1024, error=ConfigurationError)
        check_positive(poll, "poll")
        check_positive(grace, "grace", zero=True)
        from tether.runtime.worker import Worker

        worker = Worker(
            self.engine,
            concurrency=concurrency,
            idle_exit=idle_exit,
            poll=poll,
            grace=grace,
            target=target,
            heartbeat=heartbeat,
        )
        return worker.run()

    # ------------------------------------------------------------------ time travel
    def history(self, task_id: str) -> list[HistoryEntry]:
        """Every event with its seq, time, type, a one-line summary, and the step it fell in.

        Listing reads each event's row and decodes none: an entry's time, summary and event are
        made when first read (see :class:`HistoryEntry`); :class:`~tether.timetravel.HistoryCursor`
        follows a task as it runs, reading only what is new."""
        return self._travel.history(task_id)

    def state_at(self, task_id: str, seq: int) -> TaskState:
        """The state right after event ``seq``."""
        return self._travel.state_at(task_id, seq)

    def state_before(self, task_id: str, step: int | str) -> TaskState:
        """The state just before step ``step`` (1-based, in the order the task ran them, or a name)."""
        return self._travel.state_before(task_id, step)

    def state_after(self, task_id: str, step: int | str) -> TaskState:
        """The state right after step ``step`` ended (completed or failed)."""
        return self._travel.state_after(task_id, step)

    def diff(self, task_id: str, a: int, b: int, *, other: str | None = None) -> StateDiff:
        """An RFC 6902 patch from the state after event ``a`` to the state after ``b`` —
        of ``other`` when given (a fork against its parent, say)."""
        return self._travel.diff(task_id, a, b, other=other)

    def fork(
        self,
        task_id: str,
        *,
        at: int,
        inputs: dict[str, Any] | None = None,
        new_id: str | None = None,
        actor: str | None = None,
    ) -> TaskHandle:
        """A new task whose history is ``task_id``'s up to event ``at`` (by reference), pending.

        Resuming it runs the task's code from that point; the parent is untouched.
        ``inputs`` replaces the task's inputs for the fork (to try it another way). ``actor``
        (who forked it: a user, an API key's name) is recorded in the fork's first event.
        """
        return self._travel.fork(task_id, at=at, inputs=inputs, new_id=new_id, actor=actor)

    def rewind(self, task_id: str, *, to: int, actor: str | None = None) -> TaskHandle:
        """Go back to event ``to`` and try again: ``task_id`` becomes a fork of itself at ``to``.

        The abandoned branch stays listable as ``{task_id}~N`` (its state says which task
        took its place). A task that a live worker holds is refused with ``TaskBusyError``.
        ``actor`` (who rewound it) is recorded in both branches.
        """
        return self._travel.rewind(task_id, to=to, actor=actor)

    def replay(self, task_id: str, upto: int | None = None) -> ReplayReport:
        """Run the task's current code against its recorded log, executing no tool and writing
        nothing; report the first divergence, or that it replays cleanly. Run it before you
        deploy changed agent code."""
        return self._travel.replay(task_id, upto)

    def check(self, *, finished: int = 0, limit: int = 100_000) -> CheckReport:
        """Replay every task that has not finished (and the ``finished`` most recent finished ones)
        against the code as it is now, running and writing nothing: what a deploy would break.

        Run it in CI before you deploy changed task code (``tether check --app module:app``).
        """
        return self._travel.check(finished=finished, limit=limit)

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

    def close(self) -> None:
        """Stop the app's threads and close its store; the app is not used again."""
        self.engine.close()

    # The async twins of the read and control methods: each runs its method in a thread (the store's
    # I/O, a cancel's compensations), so the event loop serves others meanwhile.
    get_async = async_twin(get)
    state_async = async_twin(state)
    list_tasks_async = async_twin(list_tasks)
    pending_inputs_async = async_twin(pending_inputs)
    send_input_async = async_twin(send_input)
    resolve_call_async = async_twin(resolve_call)
    cancel_async = async_twin(cancel)
    request_cancel_async = async_twin(request_cancel)
    request_retry_async = async_twin(request_retry)
    history_async = async_twin(history)
    diff_async = async_twin(diff)
    fork_async = async_twin(fork)
    rewind_async = async_twin(rewind)
    replay_async = async_twin(replay)
    check_async = async_twin(check)
    sessions_async = async_twin(sessions)


async def _off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread of the loop's executor: the loop serves others while the store answers."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _initial_data(spec: TaskSpec) -> dict[str, Any] | None:
    """A new task's data: its state model's defaults (``None`` for a task without one)."""
    if spec.state is None:
        return None
    try:
        return spec.state().model_dump(mode="json")
    except ValidationError as exc:
        raise TaskDefinitionError(
            f"task {spec.name!r}: its state model {spec.state.__name__} needs defaults for every "
            f"field, so a new task can start with it ({exc.error_count()} fields lack one)"
        ) from None
