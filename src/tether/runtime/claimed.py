"""The run of a task a worker claimed, and what becomes of one that no retry can get past: parked,
for a person, so that no worker takes it up again and again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.errors import (
    ConflictError,
    NonDeterminismError,
    SchemaVersionError,
    StoreUnavailableError,
    TaskBusyError,
    TaskDefinitionError,
    TaskNotFoundError,
    TetherError,
    UnknownEventTypeError,
)
from tether.runtime.handles import TaskHandle
from tether.runtime.run import drive_task, execute
from tether.telemetry.logs import task_fields, worker_log

if TYPE_CHECKING:
    from tether.runtime.engine import Engine
    from tether.telemetry.hooks import RunNote

__all__ = ["run_claimed"]

# What stops a claimed run before its code runs that another worker, a moment later, or newer code may get
# past: the store away, the task gone or taken, a record newer than this code, a type this app does not run.
_PASSING = (
    StoreUnavailableError,
    TaskNotFoundError,
    ConflictError,
    TaskBusyError,
    SchemaVersionError,
    UnknownEventTypeError,
    TaskDefinitionError,
)


def run_claimed(engine: Engine, task_id: str, token: int, note: RunNote | None = None) -> TaskHandle:
    """Carry out one run of a task a worker claimed (it holds the lease ``token``); ``note``: where the
    run's attempt is told (the worker's log lines name it).

    A run that no retry can get past is parked (:meth:`~tether.store.Store.park`), so that no worker
    takes it up again and again: a record that cannot be read, or code that no longer replays it (the
    divergence itself writes nothing). The task waits, marked with the error, for a person: an answer,
    a cancel, a retry or a run of fixed code moves it on and clears the mark."""
    try:
        state = engine.log.load(task_id)
        spec = engine.registry.task(state.type)
    except _PASSING:
        engine.store.release_lease(engine.tenant, task_id, token)
        raise
    except TetherError as exc:  # its events cannot be folded: no code can run it as it stands
        engine.store.release_lease(engine.tenant, task_id, token)
        row = engine.store.get_task(engine.tenant, task_id)
        if row is not None:
            _park_unrunnable(engine, task_id, row.version, exc, None)
        raise
    try:
        return drive_task(
            spec, lambda: execute(engine, spec, task_id, token=token), "run", "run_async", interruptible=False
        )
    except NonDeterminismError as exc:
        _park_unrunnable(engine, task_id, state.version, exc, note)  # as claimed: a task that moved on since is not
        raise


def _park_unrunnable(engine: Engine, task_id: str, version: int, error: TetherError, note: RunNote | None) -> None:
    kind = type(error).__name__
    reason = f"{kind}: {error}"
    if engine.store.park(engine.tenant, task_id, version, reason):
        attempt = note.attempt if note is not None else None
        extra = task_fields("parked", task_id, engine.tenant, engine.worker_id, attempt, tether_error_type=kind)
        worker_log.warning("task %s parked until someone acts on it: %s", task_id, reason, extra=extra)
