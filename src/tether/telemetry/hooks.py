"""What the runtime calls, and what it costs when telemetry is off.

A run always calls :func:`run_began` and :func:`run_ended` (one log line each, when the ``tether.run``
logger is enabled). Everything per call, wait or sleep goes through the run's ``trace``
(:class:`~tether.telemetry.otel.RunTrace`), which is ``None`` unless :func:`instrument` turned
telemetry on: the runtime tests it and does nothing else. ``opentelemetry`` is imported only then."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tether.events import Recorded, StatusChanged
from tether.model import TaskState
from tether.telemetry.logs import run_log

if TYPE_CHECKING:
    from tether.telemetry.otel import RunTrace, Telemetry

__all__ = [
    "ACTIVE",
    "Run",
    "RunNote",
    "caller_trace",
    "compacted",
    "conversation_appended",
    "instrument",
    "instrumented",
    "noting_run",
    "run_began",
    "run_ended",
    "takeover",
    "uninstrument",
]

ACTIVE: Telemetry | None = None
"""tether's telemetry while it is on (:func:`instrument`), else ``None``."""


def instrument(*, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Turn tether's traces and metrics on, in this process, for every App.

    Spans and metrics go to the given providers, or to OpenTelemetry's global ones (set with
    ``opentelemetry.trace.set_tracer_provider`` / ``opentelemetry.metrics.set_meter_provider``).
    Needs ``opentelemetry-api`` (``pip install 'tether[otel]'``). ``TETHER_OTEL=1`` in the
    environment does the same when tether is imported, with the global providers.

    Example:
        >>> import tether.telemetry
        >>> tether.telemetry.instrument()   # then configure an SDK provider, or pass one here
        >>> tether.telemetry.instrumented()
        True
        >>> tether.telemetry.uninstrument()
    """
    global ACTIVE
    try:
        from tether.telemetry.otel import Telemetry
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise ImportError("tether's telemetry needs opentelemetry-api: pip install 'tether[otel]'") from exc
    ACTIVE = Telemetry(tracer_provider, meter_provider)


def uninstrument() -> None:
    """Turn tether's telemetry off again: runs from now on emit nothing."""
    global ACTIVE
    ACTIVE = None


def instrumented() -> bool:
    """Whether :func:`instrument` turned telemetry on."""
    return ACTIVE is not None


def caller_trace() -> str | None:
    """The trace context of the code creating a task, to keep with it (``None`` when off or outside a span)."""
    if ACTIVE is None:
        return None
    from tether.telemetry.otel import traceparent_of

    return traceparent_of()


class Run:
    """One run of a task, as its log lines and its trace see it."""

    __slots__ = ("attempt", "resumed", "run_id", "started", "state", "trace", "worker_id")

    def __init__(self, state: TaskState, worker_id: str, attempt: int, resumed: bool, trace: RunTrace | None) -> None:
        self.state = state
        self.worker_id = worker_id
        self.attempt = attempt
        self.resumed = resumed
        self.trace = trace
        self.started = time.perf_counter()
        span = trace.span.get_span_context() if trace is not None else None
        self.run_id = format(span.span_id, "016x") if span is not None and span.is_valid else os.urandom(8).hex()

    def fields(self, **more: Any) -> dict[str, Any]:
        state = self.state
        return {
            "tether_task_id": state.task_id,
            "tether_task_type": state.type,
            "tether_tenant": state.tenant,
            "tether_run_id": self.run_id,
            "tether_attempt": self.attempt,
            "tether_resumed": self.resumed,
            "tether_worker_id": self.worker_id,
            **more,
        }


class RunNote:
    """What a run of ``task_id`` begun inside :func:`noting_run` tells the block: its attempt."""

    __slots__ = ("attempt", "task_id")

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.attempt: int | None = None
        """Which run of the task this is (1 for its first), as the ``tether.run`` lines count; ``None``
        until the run began (its record read)."""


_NOTES = threading.local()  # the note of this thread's noting_run block: a run fills it where it begins


@contextmanager
def noting_run(task_id: str) -> Iterator[RunNote]:
    """Learn the attempt of the run of ``task_id`` this thread carries out in the block (a worker's log
    lines name it), without a read of the task's record of its own.

    Example:
        >>> import tether
        >>> app = tether.App("memory://")
        >>> @app.task
        ... def hello(ctx: tether.TaskContext) -> str:
        ...     return "hi"
        >>> with noting_run("t1") as note:
        ...     _ = app.run(hello, task_id="t1")
        >>> note.attempt
        1
    """
    outer = getattr(_NOTES, "note", None)
    note = _NOTES.note = RunNote(task_id)
    try:
        yield note
    finally:
        _NOTES.note = outer


def run_began(state: TaskState, history: Sequence[Recorded], worker_id: str) -> Run | None:
    """A run of ``state``'s task begins (its record ``history`` read): its span opened, its line
    logged, its attempt told to a :func:`noting_run` block waiting for it. ``None`` (nothing to do at
    its end either) when telemetry is off and nobody listens."""
    logging_on = run_log.isEnabledFor(logging.INFO)
    note: RunNote | None = getattr(_NOTES, "note", None)
    if note is not None and note.task_id != state.task_id:
        note = None  # another task's run inside the block (one a tool starts): not the one it waits for
    if ACTIVE is None and not logging_on and note is None:
        return None
    attempt = 1 + sum(1 for r in history if type(r.event) is StatusChanged and r.event.status == "running")
    if note is not None:
        note.attempt = attempt
    if ACTIVE is None and not logging_on:
        return None
    resumed = len(history) > 1
    trace = ACTIVE.run(state, worker_id, attempt, resumed) if ACTIVE is not None else None
    run = Run(state, worker_id, attempt, resumed, trace)
    if logging_on:
        run_log.info(
            "run %s of task %s (%s) started%s",
            run.run_id,
            state.task_id,
            state.type,
            f", attempt {attempt}, resumed" if resumed else "",
            extra=run.fields(),
        )
    return run


def run_ended(run: Run | None, state: TaskState | None, error: BaseException | None) -> None:
    """The run ended, in ``state`` (the latest), or stopped by ``error``: its span ended, its line logged."""
    if run is None:
        return
    if run.trace is not None:
        run.trace.ended(state, error)
    duration = time.perf_counter() - run.started
    status = state.status.value if state is not None and error is None else "interrupted"
    task_id = run.state.task_id
    if error is not None:
        kind = type(error).__name__
        run_log.warning(
            "run %s of task %s stopped after %.3fs: %s",
            run.run_id,
            task_id,
            duration,
            kind,
            extra=run.fields(tether_status=status, tether_duration_s=duration, tether_error_type=kind),
        )
    elif state is not None and state.failure is not None and status == "failed":
        kind = state.failure.exception_type
        run_log.warning(
            "run %s of task %s failed after %.3fs: %s",
            run.run_id,
            task_id,
            duration,
            kind,
            extra=run.fields(tether_status=status, tether_duration_s=duration, tether_error_type=kind),
        )
    else:
        run_log.info(
            "run %s of task %s %s after %.3fs",
            run.run_id,
            task_id,
            status,
            duration,
            extra=run.fields(tether_status=status, tether_duration_s=duration),
        )


def takeover(task_id: str, owner: str, worker_id: str) -> None:
    """A worker took the lease of ``task_id`` from ``owner``, a process that died."""
    if ACTIVE is not None:
        ACTIVE.takeover(task_id, owner, worker_id)


def conversation_appended(messages: int) -> None:
    if ACTIVE is not None:
        ACTIVE.appends.add(messages)


def compacted() -> None:
    if ACTIVE is not None:
        ACTIVE.compactions.add(1)


if os.environ.get("TETHER_OTEL", "").lower() in ("1", "true", "yes", "on"):
    instrument()
