"""One exception tree for everything tether raises.

::

    TetherError                     code
    ├── ConfigurationError          configuration        bad URL, bad option, not a tether database
    │   └── SchemaVersionError      schema_version       database or record newer than this code
    ├── InvalidInputError           invalid_input        a value that cannot be stored or used
    │   ├── NotSerializableError    not_serializable     payload is not JSON
    │   ├── ValueTooLargeError      value_too_large      payload over the configured limit
    │   └── UnknownEventTypeError   unknown_event_type   no event class of that name
    ├── StoreUnavailableError       store_unavailable    the database cannot be reached right now
    │   ├── StoreFullError          store_full           the database cannot grow: its disk is full
    │   └── StoreCorruptError       store_corrupt        the database file is damaged
    ├── TaskNotFoundError           task_not_found       no such task in this tenant
    ├── SequenceError               invalid_sequence     seq < 0 or beyond the last event
    ├── ConflictError               conflict             optimistic append lost the race
    │   └── LeaseLostError          lease_lost           fencing token is stale
    ├── InvalidTransition           invalid_transition   status or phase move not allowed
    ├── NonDeterminismError         non_determinism      replay asked for a different call
    ├── TaskDefinitionError         task_definition      a task or tool declared wrongly
    ├── TaskBusyError               task_busy            another live worker holds the task's lease
    ├── ToolError                   tool_failed          a tool call gave up after its attempts
    ├── OutcomeUnknownError         outcome_unknown      a side effect may or may not have happened
    ├── InputTimeout                input_timeout        nobody answered a wait_for_input in time
    ├── TaskFailedError             task_failed          the task failed (or was cancelled); carries the failure record
    └── TaskNotFinishedError        task_not_finished    asked for a result the task does not have yet

``code`` is stable: scripts can match on it in ``--json`` output.

The signal that suspends a running task (:class:`Suspend`) is deliberately *not*
part of this tree: it derives from ``BaseException`` so that an
``except Exception:`` inside user code cannot swallow it.
"""

from __future__ import annotations

import shlex
from typing import Any

__all__ = [
    "Cancelled",
    "ConfigurationError",
    "ConflictError",
    "InputTimeout",
    "InvalidInputError",
    "InvalidTransition",
    "LeaseLostError",
    "NonDeterminismError",
    "NotSerializableError",
    "OutcomeUnknownError",
    "RunInterrupted",
    "SchemaVersionError",
    "SequenceError",
    "StoreCorruptError",
    "StoreFullError",
    "StoreUnavailableError",
    "Suspend",
    "TaskBusyError",
    "TaskDefinitionError",
    "TaskFailedError",
    "TaskNotFinishedError",
    "TaskNotFoundError",
    "TetherError",
    "ToolError",
    "UnknownEventTypeError",
    "ValueTooLargeError",
]


class TetherError(Exception):
    """Root of every error tether raises on purpose."""

    code = "tether_error"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready body: the stable ``code``, the message and the structured fields."""
        body: dict[str, Any] = {"code": self.code, "message": str(self)}
        for name, value in vars(self).items():
            if not name.startswith("_"):
                body[name] = value
        return body


class ConfigurationError(TetherError):
    code = "configuration"


class SchemaVersionError(ConfigurationError):
    """A database or record written by a newer tether than this one."""

    code = "schema_version"

    def __init__(self, message: str, *, found: int, supported: int) -> None:
        super().__init__(message)
        self.found = found
        self.supported = supported


class InvalidInputError(TetherError):
    code = "invalid_input"


class NotSerializableError(InvalidInputError):
    code = "not_serializable"


class ValueTooLargeError(InvalidInputError):
    code = "value_too_large"


class UnknownEventTypeError(InvalidInputError):
    code = "unknown_event_type"


class StoreUnavailableError(TetherError):
    """The store could not be reached (a restarted server, a cut connection) even after retrying.

    Never a task's own failure: the run stops where it is, and the task is resumed later.
    """

    code = "store_unavailable"


class StoreFullError(StoreUnavailableError):
    """The store cannot write because its disk (or quota) is full. Nothing was written; the run
    stops where it is and the task resumes once there is space."""

    code = "store_full"

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class StoreCorruptError(StoreUnavailableError):
    """The database file is damaged (a corrupted page). Not a task's failure: the task is left as
    it stands; check the file (``PRAGMA integrity_check``) and restore it from a backup."""

    code = "store_corrupt"

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class TaskNotFoundError(TetherError):
    code = "task_not_found"

    def __init__(self, task_id: str, *, tenant: str | None = None) -> None:
        where = f" in tenant {tenant!r}" if tenant is not None else ""
        super().__init__(f"no task {task_id!r}{where}")
        self.task_id = task_id
        self.tenant = tenant


class SequenceError(TetherError):
    code = "invalid_sequence"

    def __init__(self, task_id: str, seq: int, last: int) -> None:
        super().__init__(f"task {task_id!r} has events 1..{last}; seq {seq} is outside that range")
        self.task_id = task_id
        self.seq = seq
        self.last = last


class ConflictError(TetherError):
    """An append whose ``expected_version`` is not the stream's version. Nothing was written.

    ``expected`` is the version the writer appended at, ``actual`` the stream's version when it
    is known (``None`` otherwise, and both ``None`` for a :class:`LeaseLostError`, which is
    about the writer's lease, not a version).
    """

    code = "conflict"
    expected: int | None
    actual: int | None

    def __init__(self, task_id: str, *, expected: int, actual: int | None) -> None:
        found = "unknown" if actual is None else str(actual)
        super().__init__(f"task {task_id!r}: expected version {expected}, found {found}; nothing was written")
        self.task_id = task_id
        self.expected = expected
        self.actual = actual


class LeaseLostError(ConflictError):
    """An append from a worker whose lease was taken over (its fencing token is stale)."""

    code = "lease_lost"

    def __init__(self, task_id: str, *, token: int, current: int | None) -> None:
        TetherError.__init__(
            self,
            f"task {task_id!r}: fencing token {token} is stale (current {current}); "
            "another worker holds the task, nothing was written",
        )
        self.task_id = task_id
        self.token = token
        """The fencing token this writer held (stale)."""
        self.current_token = current
        """The task's current fencing token, when known."""
        self.expected = None
        self.actual = None


class InvalidTransition(TetherError):  # noqa: N818 - the name DESIGN.md promises
    code = "invalid_transition"

    def __init__(self, machine: str, current: str | None, target: str, allowed: list[str]) -> None:
        allowed_text = ", ".join(allowed) if allowed else "none (terminal)"
        super().__init__(
            f"{machine} cannot move from {current!r} to {target!r}; allowed from {current!r}: {allowed_text}"
        )
        self.machine = machine
        self.current = current
        self.target = target
        self.allowed = allowed


class NonDeterminismError(TetherError):
    """Replay asked for a different call than the one recorded at that position."""

    code = "non_determinism"

    def __init__(self, task_id: str, position: int, recorded: str, requested: str) -> None:
        super().__init__(
            f"task {task_id!r}: at event #{position} the history records {recorded} but the code now "
            f"asks for {requested}; the task's code changed in a way its history cannot replay"
        )
        self.task_id = task_id
        self.position = position
        self.recorded = recorded
        self.requested = requested


class TaskDefinitionError(TetherError):
    code = "task_definition"


def _lease_until(expires: float | None) -> str:
    """A lease's expiry for people: a local time and how far off it is."""
    if expires is None:
        return ""
    import time
    from datetime import datetime

    left = expires - time.time()
    at = datetime.fromtimestamp(expires).astimezone().strftime("%H:%M:%S %Z")
    return f" (lease until {at}, {left:.0f}s from now)" if left >= 0 else f" (lease ran out at {at})"


class TaskBusyError(TetherError):
    code = "task_busy"

    def __init__(self, task_id: str, *, owner: str | None, expires: float | None) -> None:
        super().__init__(
            f"task {task_id!r} is being run by {owner}{_lease_until(expires)}; it resumes by itself if that worker dies"
        )
        self.task_id = task_id
        self.owner = owner
        self.expires = expires


class ToolError(TetherError):
    """A tool call that gave up: every attempt failed, or the error was not one to retry.

    Raised the same way live and on replay, so code that catches it takes the same path.
    """

    code = "tool_failed"

    def __init__(
        self,
        tool: str,
        *,
        key: str,
        error_type: str,
        message: str,
        attempts: int,
        traceback: str | None = None,
    ) -> None:
        super().__init__(
            f"{tool} failed after {attempts} attempt{'s' if attempts != 1 else ''}: {error_type}: {message}"
        )
        self.tool = tool
        self.key = key
        self.error_type = error_type
        self.error_message = message
        self.attempts = attempts
        self.traceback = traceback


class OutcomeUnknownError(TetherError):
    """A side effect started but never recorded its result: it may or may not have happened.

    Raised for a ledger key (``app.ledger.once``), or for a task's call (``task_id``, ``n``,
    ``tool`` set), each naming how a person settles it.
    """

    code = "outcome_unknown"

    def __init__(self, key: str, *, task_id: str | None = None, n: int | None = None, tool: str | None = None) -> None:
        if task_id is None or n is None:
            settle = "record the result with ledger.resolve(key, result) or discard it with ledger.forget(key)"
            what = f"the effect for key {key!r}"
        else:
            settle = (
                f"if it happened, record its result with app.resolve_call({task_id!r}, {n}, result); if it did "
                f"not, app.resolve_call({task_id!r}, {n}, happened=False) runs it again under its key (from a "
                f"shell: tether resolve {shlex.quote(task_id)} {n} --result JSON, or --not-happened)"
            )
            what = f"call #{n} {tool}() of task {task_id!r} (key {key!r})"
        super().__init__(
            f"{what} started but its result was never recorded; it may or may not have happened. "
            f"Check the external system, then {settle}"
        )
        self.key = key
        self.task_id = task_id
        self.n = n
        self.tool = tool


class InputTimeout(TetherError):  # noqa: N818 - the name the API promises
    """Raised inside a task at ``ctx.wait_for_input`` when its timeout passed without an answer."""

    code = "input_timeout"

    def __init__(self, task_id: str, key: str) -> None:
        super().__init__(f"task {task_id!r}: no input for {key!r} arrived before the timeout")
        self.task_id = task_id
        self.key = key


class TaskFailedError(TetherError):
    code = "task_failed"

    def __init__(self, message: str, *, task_id: str, failure: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.failure = failure


class TaskNotFinishedError(TetherError):
    """``handle.result()`` of a task that is still pending, running, waiting or sleeping."""

    code = "task_not_finished"

    def __init__(self, message: str, *, task_id: str, status: str) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.status = status


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a run: its lease was released and the task is left resumable."""

    def __init__(self, task_id: str, cause: BaseException | None = None) -> None:
        how = "SIGTERM" if cause is not None and str(cause) == "SIGTERM" else "an interrupt"
        super().__init__(
            f"task {task_id!r} stopped by {how}; nothing is lost. Resume it with app.resume({task_id!r}) "
            f"or `tether resume {task_id} --app MODULE:APP`"
        )
        self.task_id = task_id


class Cancelled(BaseException):
    """Raised inside a task whose cancellation was requested, at the first step it would take live.

    Like :class:`Suspend`, ``except Exception:`` in user code cannot swallow it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Suspend(BaseException):
    """Raised inside a task to stop running it without failing it (it waits, sleeps or lost its lease).

    Derives from ``BaseException`` so ``except Exception:`` in user code cannot swallow it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
