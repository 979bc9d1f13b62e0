"""One implementation for sync and async: flows are generators, drivers run them.

The recording logic (intents, results, retries, ledger checks) is written once,
as a generator that *yields instructions* — "run this function", "wait this
long" — and receives their outcomes. :func:`drive` runs a flow in plain Python;
:func:`drive_async` runs the same flow on an event loop, awaiting coroutine
functions and sleeping with ``asyncio.sleep``. Nothing else differs.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import types
from collections.abc import Callable, Coroutine, Generator
from contextvars import ContextVar
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

__all__ = [
    "CURRENT_CALL",
    "RUNNING_TASK",
    "Commit",
    "Flow",
    "Invoke",
    "Io",
    "Outcome",
    "Turn",
    "Wait",
    "drive",
    "drive_async",
    "invoke",
    "next_turn",
    "run_tool",
    "run_tool_async",
]

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")


class Invoke(NamedTuple):
    """Run ``fn(*args, **kwargs)``; the driver sends back an :class:`Outcome`.

    While it runs, ``current`` (when given) is what :func:`tether.current_call` returns.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    current: Any = None


class Wait(NamedTuple):
    seconds: float


class Commit(NamedTuple):
    """Record ``events`` through ``writer``; the driver sends back ``None`` once they are durable.

    The sync driver writes them at once (``writer.append``). The async driver hands them to
    ``writer.commit_soon``, which writes them together with those of parallel branches that
    finish in the same turn of the event loop (group commit) — on the loop for a lone run, or
    through the app's commit thread, with other tasks' records, while other async runs share
    it: one transaction for several records, each branch going on only once its own events are
    durable.
    """

    writer: Any
    events: list[Any]


class Turn(NamedTuple):
    """Wait until ``ready`` (an awaitable) is done: a replayed outcome waiting for its turn among an
    async task's parallel branches. Only the async driver is handed one (a sync task has no branches)."""

    ready: Any


class Io(NamedTuple):
    """Store I/O, ``fn(*args)``; the driver sends back its result (or throws its error).

    The sync driver calls it. The async driver runs it in a thread of the loop's executor, so
    the event loop goes on serving other coroutines while the store answers.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


class Outcome(NamedTuple):
    ok: bool
    value: Any  # the result, or the exception
    duration: float


CURRENT_CALL: ContextVar[Any] = ContextVar("tether_current_call", default=None)
RUNNING_TASK: ContextVar[Any] = ContextVar("tether_running_task", default=None)
"""The task whose code runs in this context (its id): a registered tool called directly is refused."""


Flow = Generator["Invoke | Wait | Commit | Io | Turn", Any, T]


_PLAIN = frozenset({type(None), str, int, float, bool, dict, list, tuple})
_tuple_new = tuple.__new__  # a NamedTuple from a ready tuple: a recorded call builds several


@types.coroutine
def next_turn() -> Generator[None, None, None]:
    """Yield to the event loop once (what ``asyncio.sleep(0)`` does, without its machinery)."""
    yield


def invoke(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None, current: Any) -> Invoke:
    return _tuple_new(Invoke, (fn, args, kwargs, current))


def run_tool(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None, current: Any) -> Outcome:
    """What the sync driver does for an :class:`Invoke`: run ``fn`` with ``current`` as the call it
    runs inside, timed; a sync task calling an async tool runs it to completion here."""
    token = CURRENT_CALL.set(current) if current is not None else None
    start = time.perf_counter()
    try:
        value = fn(*args, **kwargs) if kwargs else fn(*args)
        if type(value) not in _PLAIN and inspect.isawaitable(value):
            # A sync task calling an async tool: run it to completion here.
            value = asyncio.run(_await(value))
        return _tuple_new(Outcome, (True, value, time.perf_counter() - start))
    except Exception as exc:
        return _tuple_new(Outcome, (False, exc, time.perf_counter() - start))
    finally:
        if token is not None:
            CURRENT_CALL.reset(token)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def drive(flow: Flow[T]) -> T:
    """Run a flow synchronously."""
    reply: Any = None  # an Invoke's Outcome, an Io's result, or None
    pending: BaseException | None = None
    while True:
        try:
            # A BaseException (KeyboardInterrupt, a suspension) is thrown into the flow so its
            # cleanup runs (a lease released) before it goes on up.
            op = flow.send(reply) if pending is None else flow.throw(pending)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        pending = None
        try:
            if type(op) is Invoke:
                reply = run_tool(*op)
            elif type(op) is Commit:
                op.writer.append(op.events)
                reply = None
            elif type(op) is Io:
                reply = op.fn(*op.args)
            else:
                time.sleep(op.seconds)  # type: ignore[union-attr]
                reply = None
        except BaseException as exc:
            pending, reply = exc, None


async def drive_async(flow: Flow[T]) -> T:
    """Run the same flow on the running event loop."""
    reply: Any = None  # an Invoke's Outcome, an Io's result, or None
    pending: BaseException | None = None
    while True:
        try:
            op = flow.send(reply) if pending is None else flow.throw(pending)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        pending = None
        try:
            if type(op) is Invoke:
                reply = await run_tool_async(*op)
            elif type(op) is Commit:
                waiter = op.writer.commit_soon(op.events)
                if waiter is not None:
                    await waiter
                reply = None
            elif type(op) is Io:
                reply = await asyncio.get_running_loop().run_in_executor(None, op.fn, *op.args)
            elif type(op) is Turn:
                await op.ready
                reply = None
            else:
                await asyncio.sleep(op.seconds)  # type: ignore[union-attr]
                reply = None
        except BaseException as exc:
            pending, reply = exc, None


async def run_tool_async(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None, current: Any
) -> Outcome:
    """What the async driver does for an :class:`Invoke`: :func:`run_tool`, awaiting what ``fn``
    returns when it is awaitable (a coroutine function's call), on the running loop."""
    token = CURRENT_CALL.set(current) if current is not None else None
    start = time.perf_counter()
    try:
        value = fn(*args, **kwargs) if kwargs else fn(*args)
        if type(value) not in _PLAIN and inspect.isawaitable(value):
            value = await value
        return _tuple_new(Outcome, (True, value, time.perf_counter() - start))
    except Exception as exc:
        return _tuple_new(Outcome, (False, exc, time.perf_counter() - start))
    finally:
        if token is not None:
            CURRENT_CALL.reset(token)


def async_twin(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The async twin of a blocking method, as ``get_async = async_twin(get)`` in a class body: the same
    arguments and result, the call run in a thread (with the caller's context variables), so the event
    loop serves others while it blocks."""

    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    functools.update_wrapper(twin, method)  # its signature, for help() and editors
    twin.__name__ = f"{method.__name__}_async"
    twin.__qualname__ = f"{method.__qualname__}_async"
    twin.__doc__ = f"The async twin of :meth:`{method.__name__}`: the same call, run off the event loop."
    return twin
