"""Recorded calls: identity at issue, replay by ordinal with the arguments checked, attempts,
retries and backoff, in-doubt outcomes, compensation — one flow for sync and async."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from tether.canonical import args_hash, as_json, call_key, json_default
from tether.errors import (
    InvalidInputError,
    NonDeterminismError,
    OutcomeUnknownError,
    TetherError,
    ToolError,
)
from tether.events import (
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallStarted,
    Event,
    InputReceived,
    in_doubt_key,
)
from tether.model import Attempt, TaskState, ToolCall
from tether.model.status import Status
from tether.runtime._flow import (
    CURRENT_CALL,
    Commit,
    Flow,
    Invoke,
    Outcome,
    Wait,
    _tuple_new,
    drive,
    drive_async,
    invoke,
    run_tool,
    run_tool_async,
)
from tether.runtime._recording import Recorder
from tether.runtime.specs import Registry, ToolSpec

__all__ = ["UNSET", "CallInfo", "Calls", "Issued", "current_call", "settled_call"]


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


class Issued(NamedTuple):
    """A call as the code issued it: its ordinal, what it runs, and its record if it has one."""

    n: int
    spec: ToolSpec
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    arguments: dict[str, Any]
    key: str
    record: ToolCall | None


def _intent(issued: Issued, attempt: int, kind: str, compensates: int | None) -> CallStarted:
    """What is recorded before an attempt runs: the call's identity and arguments, so a crash inside
    the attempt leaves its effect in doubt, never unknown."""
    return CallStarted(issued.n, issued.key, issued.spec.name, issued.arguments, attempt, kind, compensates)


def _completion(
    issued: Issued, attempt: int, recorded: Any, duration: float, kind: str, started: bool
) -> CallCompleted:
    """The record of an attempt that returned ``recorded``. A call whose record has not ``started``
    (a readonly call has no intent) carries its identity in its completion."""
    if started:
        return CallCompleted(issued.n, recorded, attempt, duration, None, None, None, kind)
    return CallCompleted(issued.n, recorded, attempt, duration, issued.key, issued.spec.name, issued.arguments, kind)


def _cannot_store(tool: str, value: Any, exc: InvalidInputError) -> InvalidInputError:
    """The failure a call records when its tool's result cannot be stored (by tether or by the store)."""
    return type(exc)(f"tool {tool!r} returned a {type(value).__name__} that cannot be stored: {exc}")


def _undoes_unnamed(record: ToolCall, compensates: int | None) -> bool:
    """A readonly compensation's record (it has no intent) does not name the call it undid."""
    return compensates is not None and record.kind == "compensation" and record.compensates is None


def _described(n: int, tool: str, excerpt: str, compensates: int | None) -> str:
    """A call as a divergence names it: a compensation says which call it undoes."""
    undoing = f" compensating call #{compensates}" if compensates is not None else ""
    return f"call #{n} {tool}({excerpt}){undoing}"


def _excerpt(arguments: Any, limit: int = 80) -> str:
    text = orjson.dumps(arguments, default=json_default).decode() if arguments is not None else ""
    text = text[1:-1] if text.startswith("{") else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Calls:
    """A run's recorded calls: each given its identity as the code issues it, replayed from its
    record or run live attempt by attempt, and undone in reverse order when the task fails.
    Everything it records goes through the run's :class:`~tether.runtime._recording.Recorder`."""

    __slots__ = ("_recorder", "_registry")

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._registry: Registry = recorder.engine.registry

    def issue(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], compensates: int | None = None
    ) -> Issued:
        """Give a call its identity as the code issues it: the next ordinal, in program order.
        ``compensates``: the ordinal of the call a compensation undoes."""
        rec = self._recorder
        n, record = rec.issue_call("ctx.call()")
        spec = self._registry.tool(fn)
        arguments = spec.bind(args, kwargs)
        key = call_key(rec.task_id, n, spec.name, arguments)
        if record is not None:
            self._check_same_call(n, record, spec, arguments, compensates)
            key = record.key  # retries keep the key the call was first given
        return _tuple_new(Issued, (n, spec, args, kwargs, arguments, key, record))

    def _check_same_call(
        self, n: int, record: ToolCall, spec: ToolSpec, arguments: dict[str, Any], compensates: int | None
    ) -> None:
        """A recorded result goes only to the same call: same position, same tool, same arguments,
        and a compensation's only to the compensation of the same call."""
        same = record.tool == spec.name and (record.compensates == compensates or _undoes_unnamed(record, compensates))
        if same and spec.replay_check == "args":
            same = record.key.rpartition(":")[2] == args_hash(arguments)
        if not same:
            raise self._recorder.diverged(
                NonDeterminismError(
                    self._recorder.task_id,
                    self._recorder.cursor.first_seq_of_call(n),
                    _described(n, record.tool, _excerpt(record.args), record.compensates),
                    _described(n, spec.name, _excerpt(as_json(arguments)), compensates),
                )
            )

    def flow(
        self,
        issued: Issued,
        compensate: Callable[..., Any] | None = None,
        kind: str = "call",
        compensates: int | None = None,
        readonly: bool | None = None,
    ) -> Flow[Any]:
        """The recorded call, written once for sync and async (see :mod:`tether.runtime._flow`)."""
        n, spec, record = issued.n, issued.spec, issued.record
        readonly = spec.readonly if readonly is None else readonly
        undo = compensate or spec.compensate
        if record is not None:
            if record.status != "intended":  # its recorded outcome reaches the code (inline: every replayed call)
                rec = self._recorder
                with rec.lock:
                    rec.undelivered -= 1
            if record.status == "completed":
                trace = self._recorder.trace
                if trace is not None:
                    trace.replayed(n, spec.name, issued.key, kind, record.result)
                return self._kept(n, spec, undo, record.result)
            last = record.attempts[-1]
            if record.status == "failed":
                raise ToolError(
                    spec.name,
                    key=issued.key,
                    error_type=last.error_type or "Error",
                    message=last.message or "",
                    attempts=sum(1 for a in record.attempts if a.error_type not in (None, "Interrupted")),
                    traceback=last.traceback,
                )
        try:  # a live call is counted in ``inflight`` from its issue until it ends
            if record is None:
                return (yield from self._attempts(issued, undo, kind, compensates, readonly, 1, 0))
            return (yield from self._resume(issued, undo, kind, compensates, readonly))
        finally:
            self._recorder.settled()

    def call_sync(self, issued: Issued, compensate: Callable[..., Any] | None) -> Any:
        """:meth:`flow` for a sync task, with a live call's first attempt run here, without a flow
        and its driver (the common case: a call that has no record and whose tool returns a value
        that can be stored). Its records are the flow's, written in the same order; anything else
        (a replayed call, an error, a value that cannot be stored) is the flow's to handle."""
        if issued.record is not None:
            return drive(self.flow(issued, compensate))
        spec = issued.spec
        rec = self._recorder
        readonly = spec.readonly
        try:  # counted in ``inflight`` from its issue until it ends, as in :meth:`flow`
            rec.going_live()
            if not readonly:
                rec.append([_intent(issued, 1, "call", None)])
            current = _tuple_new(CallInfo, (rec.task_id, issued.n, spec.name, issued.key, 1))
            trace = rec.trace
            span = trace.call(issued.n, spec.name, issued.key, 1, "call") if trace is not None else None
            outcome = run_tool(spec.fn, issued.args, issued.kwargs, current)
            ok, value, duration = outcome
            if span is not None:
                span.ended(ok, value)
            if ok:
                try:
                    recorded = as_json(value)
                except InvalidInputError:
                    pass  # the flow records why the value cannot be stored
                else:
                    try:
                        rec.append([_completion(issued, 1, recorded, duration, "call", not readonly)])
                    except InvalidInputError as exc:  # refused by the store: the flow records it, not offered again
                        undo = compensate or spec.compensate
                        return drive(self._attempts(issued, undo, "call", None, readonly, 1, 0, outcome, exc))
                    return self._kept(issued.n, spec, compensate or spec.compensate, recorded)
            return drive(self._attempts(issued, compensate or spec.compensate, "call", None, readonly, 1, 0, outcome))
        finally:
            rec.settled()

    async def call_async(self, issued: Issued, compensate: Callable[..., Any] | None) -> Any:
        """:meth:`call_sync` for an async task: a live call's first attempt run here, its records
        handed to the writer as the flow's driver hands a :class:`~tether.runtime._flow.Commit`
        (group commit: awaited when queued), without a flow and its driver in between. Anything
        else is the flow's to handle, as there."""
        if issued.record is not None:
            return await drive_async(self.flow(issued, compensate))
        spec = issued.spec
        rec = self._recorder
        readonly = spec.readonly
        writer = rec.writer
        try:  # counted in ``inflight`` from its issue until it ends, as in :meth:`flow`
            rec.going_live()
            if not readonly:
                waiter = writer.commit_soon([_intent(issued, 1, "call", None)])
                if waiter is not None:
                    await waiter
            current = _tuple_new(CallInfo, (rec.task_id, issued.n, spec.name, issued.key, 1))
            trace = rec.trace
            span = trace.call(issued.n, spec.name, issued.key, 1, "call") if trace is not None else None
            outcome = await run_tool_async(spec.fn, issued.args, issued.kwargs, current)
            ok, value, duration = outcome
            if span is not None:
                span.ended(ok, value)
            if ok:
                try:
                    recorded = as_json(value)
                except InvalidInputError:
                    pass  # the flow records why the value cannot be stored
                else:
                    try:
                        waiter = writer.commit_soon([_completion(issued, 1, recorded, duration, "call", not readonly)])
                        if waiter is not None:
                            await waiter
                    except InvalidInputError as exc:  # refused by the store: the flow records it, not offered again
                        undo = compensate or spec.compensate
                        return await drive_async(
                            self._attempts(issued, undo, "call", None, readonly, 1, 0, outcome, exc)
                        )
                    return self._kept(issued.n, spec, compensate or spec.compensate, recorded)
            undo = compensate or spec.compensate
            return await drive_async(self._attempts(issued, undo, "call", None, readonly, 1, 0, outcome))
        finally:
            rec.settled()

    def _kept(self, n: int, spec: ToolSpec, undo: Callable[..., Any] | None, recorded: Any) -> Any:
        """A call's result once it is recorded: its undo registered, if it has one, and the value as
        the task gets it (rehydrated from its JSON form)."""
        if undo is not None:
            self._recorder.compensate_with(n, self._registry.tool(undo), recorded)
        return spec.rehydrate(recorded)

    def _resume(
        self, issued: Issued, undo: Callable[..., Any] | None, kind: str, compensates: int | None, readonly: bool
    ) -> Flow[Any]:
        """A call whose record ends with no outcome (the process stopped inside an attempt or during a
        backoff, or the task was retried): settle where it stopped, then attempt again under the same key."""
        record = issued.record
        assert record is not None
        rec = self._recorder
        last = record.attempts[-1]
        if last.finished_at is None:
            found = yield from self._in_doubt(issued, last)  # goes live
            if found is not None:
                return self._kept(issued.n, issued.spec, undo, found)
        else:
            rec.going_live()  # the record ends inside this call: what follows is live
            if last.backoff:
                # Stopped (or suspended) during the backoff: wait only what is left of it.
                yield from self.backoff(last.finished_at.timestamp() + last.backoff, own=1)
        # Attempts that ended in an error count against the policy; one cut short by a crash
        # does not (it is run again: at-least-once), though it keeps its number in the record;
        # nor do the attempts before a retry of the task (a retry is a fresh round).
        errors = sum(
            1 for a in record.attempts if a.error_type not in (None, "Interrupted") and a.number > record.retried_after
        )
        return (yield from self._attempts(issued, undo, kind, compensates, readonly, last.number + 1, errors))

    def _in_doubt(self, issued: Issued, last: Attempt) -> Flow[Any]:
        """The attempt the process stopped inside: its effect may or may not have happened. The tool's
        ``on_unknown`` decides: ``"raise"`` (:class:`~tether.errors.OutcomeUnknownError`), or a function
        of the key whose answer, unless ``None``, is recorded as the call's result and returned;
        otherwise the attempt is recorded as interrupted and ``None`` returned (it runs again).

        What follows goes live — except for ``"raise"``, which leaves the call for a person with
        nothing live (the run then leaves the task waiting on them) unless a cancel stops the run here,
        or its compensations go on past it, or a replay ends here."""
        n, spec, key = issued.n, issued.spec, issued.key
        rec = self._recorder
        writer = rec.writer
        raising = spec.on_unknown == "raise"
        if not raising or rec.cancel_reason is not None or rec.replay_only:
            rec.going_live()
        if raising:
            raise OutcomeUnknownError(key, task_id=rec.task_id, n=n, tool=spec.name)
        if callable(spec.on_unknown):
            found = yield Invoke(spec.on_unknown, (key,))
            assert found is not None
            if not found.ok:
                raise found.value
            if found.value is not None:
                found_done = CallCompleted(n=n, result=found.value, attempt=last.number, duration=0.0)
                yield _tuple_new(Commit, (writer, [found_done]))
                return found.value
        interrupted = CallAttemptFailed(
            n=n,
            attempt=last.number,
            error_type="Interrupted",
            message="the process stopped during this attempt",
            traceback=None,
            duration=time.time() - last.started_at.timestamp(),
            backoff=0.0,
        )
        yield Commit(writer, [interrupted])
        return None

    def _attempts(
        self,
        issued: Issued,
        undo: Callable[..., Any] | None,
        kind: str,
        compensates: int | None,
        readonly: bool,
        attempt: int,
        errors: int,
        first: Outcome | None = None,
        refused: InvalidInputError | None = None,
    ) -> Flow[Any]:
        """Run the call live from attempt ``attempt`` (``errors`` of them count against its retry policy):
        the intent recorded before each attempt, unless it is readonly, and the result after it; an error
        retried or recorded as the call's failure. ``first``: the attempt a shortcut (:meth:`call_sync`,
        :meth:`call_async`) ran; ``refused``: why the store refused the completion it offered."""
        n, spec = issued.n, issued.spec
        rec = self._recorder
        exists = issued.record is not None or (first is not None and not readonly)
        if first is None:
            rec.going_live()
        writer = rec.writer
        while True:
            outcome, first = first, None
            if outcome is None:
                if not readonly:
                    yield _tuple_new(Commit, (writer, [_intent(issued, attempt, kind, compensates)]))
                    exists = True
                outcome = yield from self._attempt(issued, attempt, kind)
            assert outcome is not None
            if outcome.ok:
                value = outcome.value
                try:
                    # Live code gets what replay will get: the result's JSON form (as the tool's
                    # return annotation promises, for a model), never the object it happened to be.
                    recorded = as_json(value)
                    done = _completion(issued, attempt, recorded, outcome.duration, kind, exists)
                    if refused is not None:  # offered by the shortcut already: not offered again
                        raise refused
                    yield _tuple_new(Commit, (writer, [done]))
                except InvalidInputError as exc:
                    # The value cannot be stored: fail the call, never half-write it.
                    failure: BaseException = _cannot_store(spec.name, value, exc)
                    retry = False
                    errors += 1
                else:
                    return self._kept(n, spec, undo, recorded)
            else:
                failure = outcome.value
                errors += 1
                retry = spec.retry.should_retry(failure, attempt=errors)
            # A readonly call that failed: its record starts with this attempt.
            started: list[Event] = [] if exists else [_intent(issued, attempt, kind, compensates)]
            exists = True
            backoff = spec.retry.delay(attempt) if retry else None
            yield from self._record_error(issued, attempt, errors, failure, outcome.duration, backoff, started)
            assert backoff is not None
            yield from self.backoff(time.time() + backoff, own=1)
            attempt += 1

    def _attempt(self, issued: Issued, attempt: int, kind: str) -> Flow[Outcome]:
        """One attempt of a live call, run by the driver (in its span while telemetry is on)."""
        rec, spec = self._recorder, issued.spec
        current = _tuple_new(CallInfo, (rec.task_id, issued.n, spec.name, issued.key, attempt))
        trace = rec.trace
        if trace is None:
            outcome: Outcome = yield invoke(spec.fn, issued.args, issued.kwargs, current)
            return outcome
        span = trace.call(issued.n, spec.name, issued.key, attempt, kind)
        outcome = yield invoke(spec.fn, issued.args, issued.kwargs, current)
        span.ended(outcome.ok, outcome.value)
        return outcome

    def _record_error(
        self,
        issued: Issued,
        attempt: int,
        errors: int,
        failure: BaseException,
        duration: float,
        backoff: float | None,
        events: list[Event],
    ) -> Flow[None]:
        """Record an attempt that ended in ``failure`` (after ``events``): with its ``backoff`` when it is
        retried, else with the call's failure, which is raised to the code as a :class:`ToolError`."""
        n, spec = issued.n, issued.spec
        tb = "".join(traceback.format_exception(failure))
        error_type = type(failure).__name__
        events.append(
            CallAttemptFailed(
                n=n,
                attempt=attempt,
                error_type=error_type,
                message=str(failure),
                traceback=tb,
                duration=duration,
                backoff=backoff,
            )
        )
        trace = self._recorder.trace
        if trace is not None and backoff is not None:
            trace.retry(spec.name, attempt, backoff, error_type)
        if backoff is None:
            exhausted = errors >= spec.retry.max_attempts
            events.append(CallFailed(n=n, reason="no attempts left" if exhausted else "error not retried"))
        yield _tuple_new(Commit, (self._recorder.writer, events))
        if backoff is None:
            raise ToolError(
                spec.name, key=issued.key, error_type=error_type, message=str(failure), attempts=errors, traceback=tb
            ) from failure

    def backoff(self, until: float, *, own: int) -> Flow[None]:
        """Wait until ``until``: here if it is short, else as a durable sleep that frees the worker.
        ``own``: the calls in flight that are the waiter's own (1 for a call's retry backoff, 0 for
        ``ctx.sleep``)."""
        rec = self._recorder
        while True:  # once more when something landed as the sleep was being written
            remaining = until - time.time()
            if remaining <= 0:
                return
            rec.going_live()
            # A long wait frees the worker (a durable sleep) — unless other calls of the task run
            # beside this one: suspending would abandon them mid-flight, so it waits here.
            trace = rec.trace
            if remaining > rec.engine.inline_wait and rec.inflight <= own:
                if trace is not None:
                    trace.sleep(remaining, True, own == 1)
                yield from rec.suspend(Status.SLEEPING.value, until, f"retry backoff until {until}", beside=own)
                continue
            slept = trace.sleep(remaining, False, own == 1) if trace is not None else None
            yield Wait(remaining)
            if slept is not None:
                slept()
            return

    def fetch_flow(self, issued: Issued, ttl: float) -> Flow[Any]:
        """A recorded read of outside state: replay returns what was read; live, a read of the same
        thing recorded less than ``ttl`` seconds ago is served again, an older one is read afresh."""
        if issued.record is None and ttl > 0:
            n, spec = issued.n, issued.spec
            arguments = as_json(issued.arguments)
            now = time.time()
            rec = self._recorder
            for earlier in reversed(rec.latest.calls):
                if earlier.kind != "fetch" or earlier.tool != spec.name or earlier.args != arguments:
                    continue
                fresh = earlier.finished_at is not None and now - earlier.finished_at.timestamp() < ttl
                if earlier.status == "completed" and fresh:
                    rec.going_live()
                    served = CallCompleted(
                        n=n,
                        result=earlier.result,
                        attempt=1,
                        duration=0.0,
                        key=issued.key,
                        tool=spec.name,
                        args=arguments,
                        kind="fetch",
                    )
                    try:
                        yield _tuple_new(Commit, (rec.writer, [served]))
                    finally:
                        rec.settled()
                    return spec.rehydrate(earlier.result)
                break
        return (yield from self.flow(issued, kind="fetch", readonly=True))

    def compensate(self) -> Flow[None]:
        """Undo completed calls in reverse order, each as its own recorded call: once the calls still
        under way have ended (an async task's branches that ``asyncio.gather`` left running when one
        failed), so that one completing after the failure is undone too, live and on replay alike."""
        rec = self._recorder
        while rec.branches:
            yield Wait(0.001)
        dues = rec.compensations_due()
        if rec.trace is not None:
            rec.trace.compensating(len(dues))
        for due in dues:
            issued = self.issue(due.undo.fn, (due.result,), {}, due.n)
            try:
                # Its intent always recorded, a readonly undo's too: the intent names the call it
                # undoes, which a retry's run reads to leave it done (a completion alone does not).
                yield from self.flow(issued, kind="compensation", compensates=due.n, readonly=False)
            except ToolError:
                continue  # recorded; it must not hide the original failure


UNSET: Any = object()
"""``app.resolve_call``'s result when none is given."""


def settled_call(
    state: TaskState, n: int, result: Any, happened: bool, *, held_by: str | None = None, actor: str | None = None
) -> list[Event]:
    """What settles call ``n`` of ``state``, whose outcome is unknown: its ``result``; or, when it did
    not happen, its last attempt as cut short (it runs again under its key, and does not count
    against the tool's retries). A task left waiting on the call (``on_unknown="raise"``) gets the
    settlement as the answer to its wait, with ``actor``: runnable again at once.

    Refused while a process holds the task (``held_by``): its call is under way, not in doubt."""
    call = state.call(n)
    if call is None or call.status != "intended":
        status = "missing" if call is None else call.status
        raise InvalidInputError(
            f"call #{n} of task {state.task_id!r} is {status}; only an unfinished call can be resolved"
        )
    if happened == (result is UNSET):
        raise InvalidInputError(
            f"resolve call #{n} of task {state.task_id!r} with its result if it happened, or with "
            "happened=False (and no result) if it did not"
        )
    if held_by is not None:
        raise InvalidInputError(
            f"task {state.task_id!r} is being run by {held_by}: call #{n} is under way, not in doubt; "
            "resolve a call once no process holds its task (a dead worker's lease lapses by itself)"
        )
    last = call.attempts[-1] if call.attempts else None
    attempt = last.number if last is not None else 1
    settled: list[Event]
    if happened:
        settled = [CallCompleted(n=n, result=result, attempt=attempt, duration=0.0)]
    else:
        started = last.started_at.timestamp() if last is not None and last.started_at is not None else time.time()
        settled = [
            CallAttemptFailed(
                n=n,
                attempt=attempt,
                error_type="Interrupted",
                message="settled by hand: the effect did not happen; it runs again under its key",
                traceback=None,
                duration=max(0.0, time.time() - started),
                backoff=0.0,
            )
        ]
    key = in_doubt_key(n)
    if state.waiting is not None and state.waiting.key == key:
        settled.append(InputReceived(key=key, value={"happened": happened}, actor=actor))
    return settled


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


def _outcome_of(run: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, run()
    except BaseException as exc:  # collected: every call of the batch ends before one is raised
        return False, exc
