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
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import Any

from pydantic import BaseModel, ValidationError

from tether.checks import check_input_key
from tether.errors import (
    InputTimeout,
    InvalidInputError,
    NonDeterminismError,
    TetherError,
)
from tether.events import (
    DataUpdated,
    DecisionMade,
    InputRejected,
    InputRequested,
    InputTimedOut,
    ObservationRecorded,
    PatchMarked,
    PhaseChanged,
    PlanSet,
    Recorded,
    SleepScheduled,
    StepCompleted,
    StepFailed,
    StepStarted,
    UsageRecorded,
)
from tether.model import TaskState
from tether.model.status import Status
from tether.runtime._flow import Commit, Flow, Turn, Wait, drive, drive_async, next_turn
from tether.runtime._recording import NOT_A_TASK_FAILURE, Recorder, ReplayEnd, RunEnded, read_only, upcast_data
from tether.runtime._replay import ReleaseGate, answer_turn, describe
from tether.runtime.calls import (
    CallInfo,
    Calls,
    Issued,
    _check_concurrency,
    _check_ttl,
    _first_error,
    _outcome_of,
    current_call,
)
from tether.runtime.handles import check_against_schema
from tether.runtime.session import TaskSession

__all__ = [
    "NOT_A_TASK_FAILURE",
    "AsyncTaskContext",
    "CallInfo",
    "ReplayEnd",
    "RunEnded",
    "TaskContext",
    "current_call",
    "upcast_data",
]


class _Context:
    """What sync and async contexts share: everything but the operations that wait.

    A context is what the task's code holds; what it records goes through the run's
    :class:`~tether.runtime._recording.Recorder`, and its calls through the run's
    :class:`~tether.runtime.calls.Calls`. The run builds all three (:func:`tether.runtime.run.execute`).
    """

    def __init__(self, recorder: Recorder, calls: Calls) -> None:
        self._rec = recorder
        self._calls = calls
        self._data_cache: tuple[int, BaseModel] | None = None
        self._session: TaskSession | None = None
        self.scratch: dict[str, Any] = {}
        """Working memory for the current step: never persisted, emptied at every step boundary."""

    # ------------------------------------------------------------------ reading
    @property
    def task_id(self) -> str:
        return self._rec.task_id

    @property
    def state(self) -> TaskState:
        """The task's state as of the point the code has reached (read-only)."""
        rec = self._rec
        if rec.cursor.done:
            return rec.latest
        return rec.cursor.view()

    @property
    def live(self) -> bool:
        """``False`` while the code is still replaying recorded history."""
        return self._rec.cursor.done

    @property
    def data(self) -> BaseModel:
        """The task's typed data (``@app.task(state=Model)``), validated from the recorded fields."""
        spec = self._rec.spec
        model = spec.state
        if model is None:
            raise TetherError(f"task {spec.name!r} declares no state model; use @app.task(state=Model)")
        state = self.state
        cached = self._data_cache
        if cached is not None:
            version, data = cached
            if version == state.version:
                return data
        data = read_only(model).model_validate(upcast_data(spec, state))
        self._data_cache = (state.version, data)
        return data

    @property
    def session(self) -> TaskSession:
        """The task's conversation: the session named by ``session_id`` when the task started, or one
        made for it (named after the task). Its reads and appends are part of the task's record:
        an append happens once however often the task is resumed, a replay sees what the first
        run saw, and a fork sees the conversation as it was at the fork point."""
        if self._session is None:
            rec = self._rec
            self._session = TaskSession(rec, rec.cursor.final.session_id or rec.task_id)
        return self._session

    # ------------------------------------------------------------------ recording
    def plan(self, steps: list[str]) -> None:
        """Declare the plan: the named steps, in order. ``ctx.state.position`` counts them."""
        steps = [str(s) for s in steps]
        if self._rec.replayed(PlanSet, lambda e: e.steps == steps, f"plan({steps!r})") is None:
            self._rec.going_live()
            self._rec.append([PlanSet(steps=steps)])

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Mark a plan step: started on entry, completed on a clean exit, failed on an exception."""
        self.scratch.clear()
        if self._rec.replayed(StepStarted, lambda e: e.name == name, f"step({name!r})") is None:
            self._rec.going_live()
            self._rec.append([StepStarted(name=name)])
        try:
            yield
        except NOT_A_TASK_FAILURE:
            raise  # the run cannot go on here; the step did not fail
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            if self._rec.replayed(StepFailed, lambda e: e.name == name, f"failure of step {name!r}") is None:
                self._rec.append([StepFailed(name=name, error=error)])
            raise
        else:
            if self._rec.replayed(StepCompleted, lambda e: e.name == name, f"end of step {name!r}") is None:
                self._rec.append([StepCompleted(name=name)])
        finally:
            self.scratch.clear()

    def decide(self, name: str, choice: Any, rationale: str, alternatives: list[Any] | None = None) -> Any:
        """Record a decision with its rationale; returns the choice (on replay, the recorded one)."""
        recorded = self._rec.replayed(DecisionMade, lambda e: e.name == name, f"decide({name!r})")
        if recorded is not None:
            return recorded.event.choice  # type: ignore[attr-defined]
        self._rec.going_live()
        self._rec.append([DecisionMade(name=name, choice=choice, rationale=rationale, alternatives=alternatives)])
        return choice

    def observe(self, key: str, value: Any, source: str | None = None, as_of: datetime | None = None) -> None:
        """Record a fact learned along the way (key → value), where it came from and as of when."""
        if self._rec.replayed(ObservationRecorded, lambda e: e.key == key, f"observe({key!r})") is None:
            self._rec.going_live()
            stamp = as_of.isoformat() if as_of is not None else None
            self._rec.append([ObservationRecorded(key=key, value=value, source=source, as_of=stamp)])

    def usage(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost: float | None = None,
        model: str | None = None,
        call: int | None = None,
    ) -> None:
        """Record the tokens and cost of a call (by default the last one the code issued), for
        ``app.usage``, ``tether usage`` and ``tether show``: where a call's result carries no usage
        tether reads, or to add its price. Recorded once: a replay of the task records nothing."""
        _check_usage(input_tokens, output_tokens, cost, model, call)
        n = self._rec.last_call if call is None else call
        if self._rec.replayed(UsageRecorded, lambda e: e.call == n, f"usage(call={n})") is None:
            self._rec.going_live()
            reported = UsageRecorded(n, input_tokens, output_tokens, cost, model)
            self._rec.append([reported])

    def update(self, **fields: Any) -> BaseModel:
        """Change fields of the typed data; validated first, and only the changed fields are recorded."""
        model = self._rec.spec.state
        if model is None:
            raise TetherError(f"task {self._rec.spec.name!r} declares no state model; use @app.task(state=Model)")
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
        recorded = self._rec.replayed(DataUpdated, lambda e: True, f"update({', '.join(sorted(changed))})")
        if recorded is None and changed:
            self._rec.going_live()
            self._rec.append([DataUpdated(fields=changed)])
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
        if self._rec.cursor.take_if(PatchMarked, lambda e: e.name == name):
            return True
        if not self._rec.cursor.done:
            return False  # the recorded history went past this point without the patch
        self._rec.going_live()
        self._rec.defer(PatchMarked(name=name))  # written with the next append, like a read
        return True

    def deprecate_patch(self, name: str) -> None:
        """Stage 2 of a patch: the new path is the only path; a marker recorded by stage 1 is passed over."""
        self._rec.cursor.take_if(PatchMarked, lambda e: e.name == name)

    def transition(self, phase: str) -> None:
        """Move the task's phase machine (``@app.task(phases=Phases(...))``); illegal moves raise."""
        if self._rec.replayed(PhaseChanged, lambda e: e.phase == phase, f"transition({phase!r})") is None:
            self._rec.going_live()
            self._rec.append([PhaseChanged(phase=phase)])

    def _wait_flow(self, key: str, prompt: str | None, timeout: float | None, schema: Any) -> Flow[Any]:
        check_input_key(key)
        rec = self._rec
        recorded = rec.replayed(InputRequested, lambda e: e.key == key, f"wait_for_input({key!r})")
        while recorded is None and rec.asking is not None:
            # Another branch's question is open (an async task's parallel waits): a task waits for one
            # answer at a time, so this one is asked once that one is answered — in this run, or in
            # the run its answer wakes (the task suspends meanwhile, and this run stops here).
            rec.going_live()
            yield Wait(0.001)
        rec.asking = key
        try:
            return (yield from self._asked(key, prompt, timeout, schema, recorded))
        finally:
            rec.asking = None

    def _asked(
        self, key: str, prompt: str | None, timeout: float | None, schema: Any, recorded: Recorded | None
    ) -> Flow[Any]:
        json_schema, model = _input_schema(schema)
        if recorded is None:
            self._rec.going_live()
            timeout_at = time.time() + timeout if timeout is not None else None
            asked = InputRequested(key=key, prompt=prompt, schema=json_schema, timeout_at=timeout_at)
            yield Commit(self._rec.writer, [asked])
        else:
            timeout_at = recorded.event.timeout_at  # type: ignore[attr-defined]
        asked_again = recorded is None or self._rec.cursor.take_if(InputRequested, lambda e: e.key == key and e.again)
        if self._rec.cursor.take_if(InputTimedOut, lambda e: e.key == key):
            raise InputTimeout(self._rec.task_id, key)
        self._rec.cursor.take_if(InputRejected, lambda e: e.key == key)
        while True:  # once more when an answer landed as the wait was being written
            received = self._rec.latest.received
            if key in received:
                # Checked here, whenever it was sent: one sent before it was asked for was not, and a
                # run that recorded the question but died before recording the answer's rejection
                # replays the question (sent after it, it passed the same check when it was sent).
                rejected = _rejection(self._rec.task_id, key, received[key], json_schema)
                if rejected is None:
                    if recorded is not None:
                        yield from self._answer_turn(recorded)
                    if self._rec.trace is not None and self._rec.cursor.done:  # taken now, not replayed
                        self._rec.trace.wait(key, "answered", recorded.at if recorded is not None else None)
                    return model.model_validate(received[key]) if model is not None else received[key]
                # A bad early answer does not fail the task: it is discarded, with the reason, and the
                # task waits for a good one.
                yield Commit(self._rec.writer, [InputRejected(key=key, reason=rejected)])
            if self._rec.answered():
                left = self._rec.cursor.first_left(code_only=True)
                assert left is not None
                error = NonDeterminismError(self._rec.task_id, left.seq, describe(left.event), f"the answer to {key!r}")
                raise self._rec.diverged(error)
            if timeout_at is not None and time.time() >= timeout_at:
                self._rec.going_live()
                yield Commit(self._rec.writer, [InputTimedOut(key=key)])
                raise InputTimeout(self._rec.task_id, key)
            waiting = self._rec.latest.waiting
            if not asked_again and (waiting is None or waiting.key != key):
                # The task stopped waiting on this question since it was asked (a fork or rewind of a task
                # cancelled while it waited): ask it again, or the task would wait with nothing to answer.
                self._rec.going_live()
                yield Commit(self._rec.writer, [_again(recorded, json_schema, timeout_at)])
                asked_again = True
            if self._rec.trace is not None:
                self._rec.trace.wait(key, "suspended")
            yield from self._rec.suspend(Status.AWAITING_INPUT.value, timeout_at, f"waiting for input {key!r}")

    def _answer_turn(self, asked: Recorded) -> Flow[None]:
        """Hand a replayed question's recorded answer to the code when its turn comes (an async task's
        branches: :class:`~tether.runtime._replay.ReleaseGate`); a sync task receives it at once."""
        return
        yield

    def _sleep_flow(self, seconds: float) -> Flow[None]:
        recorded = self._rec.replayed(SleepScheduled, lambda e: True, f"sleep({seconds})")
        if recorded is None:
            self._rec.going_live()
            until = time.time() + seconds
            yield Commit(self._rec.writer, [SleepScheduled(until=until)])
        else:
            until = recorded.event.until  # type: ignore[attr-defined]
            if self._rec.answered():
                return  # the code went on after this sleep before: it is over
        yield from self._calls.backoff(until, own=0)


def _check_usage(
    input_tokens: int | None, output_tokens: int | None, cost: float | None, model: str | None, call: int | None
) -> None:
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens), ("call", call)):
        if value is not None and (type(value) is not int or value < 0):
            raise InvalidInputError(f"ctx.usage: {name} must be an int >= 0, got {value!r}")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float) or not cost >= 0):
        raise InvalidInputError(f"ctx.usage: cost must be a number >= 0, got {cost!r}")
    if model is not None and not isinstance(model, str):
        raise InvalidInputError(f"ctx.usage: model must be a str, got {type(model).__name__}")
    if input_tokens is None and output_tokens is None and cost is None:
        raise InvalidInputError("ctx.usage needs input_tokens, output_tokens or cost")


def _again(asked: Recorded | None, json_schema: dict[str, Any] | None, timeout_at: float | None) -> InputRequested:
    """The question ``asked`` recorded, asked once more."""
    assert asked is not None
    first: InputRequested = asked.event  # type: ignore[assignment]
    return InputRequested(key=first.key, prompt=first.prompt, schema=json_schema, timeout_at=timeout_at, again=True)


def _rejection(task_id: str, key: str, value: Any, json_schema: dict[str, Any] | None) -> str | None:
    """Why ``value`` does not answer the wait ``key`` (its schema refuses it), or ``None``."""
    if json_schema is None:
        return None
    try:
        check_against_schema(task_id, key, value, json_schema)
    except InvalidInputError as exc:
        return str(exc)
    return None


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
        return self._calls.call_sync(self._calls.issue(fn, args, kwargs), compensate)

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
        issued = [self._calls.issue(fn, (item,), {}) for item in items]
        outcomes: list[tuple[bool, Any]] = [(True, None)] * len(issued)
        live: list[int] = []
        for i, call in enumerate(issued):
            if call.record is not None and call.record.status in ("completed", "failed"):
                outcomes[i] = _outcome_of(partial(drive, self._calls.flow(call)))
            else:
                live.append(i)
        if live:
            workers = min(len(live), max_concurrency or len(live))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"tether-map-{self._rec.task_id}") as pool:
                futures = [(i, pool.submit(drive, self._calls.flow(issued[i]))) for i in live]
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
        return drive(self._calls.fetch_flow(self._calls.issue(fn, args, kwargs), ttl))


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

    def __init__(self, recorder: Recorder, calls: Calls) -> None:
        super().__init__(recorder, calls)
        self._gate = ReleaseGate(recorder.cursor.finish_order)

    def call(
        self, fn: Callable[..., Any], *args: Any, compensate: Callable[..., Any] | None = None, **kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        """Like :meth:`TaskContext.call`; ``fn`` may be a coroutine function. Await the result.

        The call is issued (given its ordinal) here, when ``ctx.call`` is called, not when it is
        awaited, so calls gathered together keep the order the code wrote them in.
        """
        return self._run_call(self._calls.issue(fn, args, kwargs), compensate)

    async def _run_call(self, issued: Issued, compensate: Callable[..., Any] | None = None) -> Any:
        rec = self._rec
        rec.branches += 1
        try:
            await self._turn(issued)
            return await self._calls.call_async(issued, compensate)
        finally:
            rec.branches -= 1

    def _turn(self, issued: Issued) -> Awaitable[None]:
        """Let the other branches run before this call does, live and on replay alike.

        Live, every call yields to the event loop once before it runs, so parallel branches
        issue their calls (and get their ordinals) in the order they were started; on replay
        a recorded result waits for its turn in the order results were recorded. Both ways
        the branches interleave the same, so each call gets the ordinal it had.
        """
        record = issued.record
        if record is not None and record.status in ("completed", "failed"):
            return self._gate.wait(issued.n)
        return next_turn()  # an awaitable, not a coroutine of our own: this is every async call's path

    async def map(
        self, fn: Callable[..., Any], items: Iterable[Any], *, max_concurrency: int | None = None
    ) -> list[Any]:
        """Like :meth:`TaskContext.map`, as concurrent coroutines (``fn`` may be a coroutine function)."""
        _check_concurrency(max_concurrency)
        issued = [self._calls.issue(fn, (item,), {}) for item in items]
        limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None

        async def one(call: Issued) -> tuple[bool, Any]:
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

    def _answer_turn(self, asked: Recorded) -> Flow[None]:
        # Live, a branch waiting for an answer lets its siblings run on until the task suspends; the next
        # run knows the answer at once. Handed back in the order it was received among the siblings'
        # outcomes, the branch goes on after them, as it did, and every call keeps its ordinal.
        turn = answer_turn(asked.seq)
        if not self._gate.knows(turn):
            return  # answered during this run, live
        rec = self._rec
        with rec.lock:
            rec.undelivered += 1  # a recorded outcome not yet handed back: a sibling going live is no divergence
        try:
            yield Turn(self._gate.wait(turn))
        finally:
            with rec.lock:
                rec.undelivered -= 1

    async def wait_for_input(
        self, key: str, prompt: str | None = None, timeout: float | None = None, schema: Any = None
    ) -> Any:
        """Like :meth:`TaskContext.wait_for_input`."""
        # As a call does (:meth:`_turn`), a wait lets the branches started beside it run first, live and on
        # replay alike: whether writing the question yields or not (a lone run's commit is inline, a
        # worker's goes through its commit thread), the siblings issue their calls before it either way.
        await next_turn()
        return await drive_async(self._wait_flow(key, prompt, timeout, schema))

    async def sleep(self, seconds: float) -> None:
        """Like :meth:`TaskContext.sleep`."""
        await drive_async(self._sleep_flow(seconds))

    def fetch(self, fn: Callable[..., Any], *args: Any, ttl: float = 0, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        """Like :meth:`TaskContext.fetch`; ``fn`` may be a coroutine function. Await the result."""
        _check_ttl(ttl)
        return self._run_fetch(self._calls.issue(fn, args, kwargs), ttl)

    async def _run_fetch(self, issued: Issued, ttl: float) -> Any:
        await self._turn(issued)
        return await drive_async(self._calls.fetch_flow(issued, ttl))


def _input_schema(schema: Any) -> tuple[dict[str, Any] | None, type[BaseModel] | None]:
    """A wait's schema as stored (JSON schema) and, for a model, the model to rebuild the answer with."""
    if schema is None:
        return None, None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema(), schema
    if isinstance(schema, dict):
        return schema, None
    raise InvalidInputError(f"schema= takes a pydantic model class or a JSON schema dict, got {schema!r}")
