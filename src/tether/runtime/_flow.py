"""One implementation for sync and async: flows are generators, drivers run them.

The recording logic (intents, results, retries, ledger checks) is written once,
as a generator that *yields instructions* — "run this function", "wait this
long" — and receives their outcomes. :func:`drive` runs a flow in plain Python;
:func:`drive_async` runs the same flow on an event loop, awaiting coroutine
functions and sleeping with ``asyncio.sleep``. Nothing else differs.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Flow", "Invoke", "Outcome", "Wait", "drive", "drive_async"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Invoke:
    """Run ``fn(*args, **kwargs)``; the driver sends back an :class:`Outcome`."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None
    before: Callable[[], Any] | None = None
    """Called just before ``fn`` (sets the current call); its return is passed to ``after``."""
    after: Callable[[Any], None] | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    seconds: float


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    value: Any  # the result, or the exception
    duration: float


Flow = Generator["Invoke | Wait", "Outcome | None", T]


def _sync_invoke(op: Invoke) -> Outcome:
    token = op.before() if op.before is not None else None
    start = time.perf_counter()
    try:
        value = op.fn(*op.args, **(op.kwargs or {}))
        if inspect.isawaitable(value):
            # A sync task calling an async tool: run it to completion here.
            value = asyncio.run(_await(value))
        return Outcome(True, value, time.perf_counter() - start)
    except Exception as exc:
        return Outcome(False, exc, time.perf_counter() - start)
    finally:
        if op.after is not None:
            op.after(token)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def drive(flow: Flow[T]) -> T:
    """Run a flow synchronously."""
    reply: Outcome | None = None
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
                reply = _sync_invoke(op)
            else:
                time.sleep(op.seconds)  # type: ignore[union-attr]
                reply = None
        except BaseException as exc:
            pending, reply = exc, None


async def drive_async(flow: Flow[T]) -> T:
    """Run the same flow on the running event loop."""
    reply: Outcome | None = None
    pending: BaseException | None = None
    while True:
        try:
            op = flow.send(reply) if pending is None else flow.throw(pending)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        pending = None
        try:
            if type(op) is Invoke:
                reply = await _async_invoke(op)
            else:
                await asyncio.sleep(op.seconds)  # type: ignore[union-attr]
                reply = None
        except BaseException as exc:
            pending, reply = exc, None


async def _async_invoke(op: Invoke) -> Outcome:
    token = op.before() if op.before is not None else None
    start = time.perf_counter()
    try:
        value = op.fn(*op.args, **(op.kwargs or {}))
        if inspect.isawaitable(value):
            value = await value
        return Outcome(True, value, time.perf_counter() - start)
    except Exception as exc:
        return Outcome(False, exc, time.perf_counter() - start)
    finally:
        if op.after is not None:
            op.after(token)
