"""What the runtime hands back: a task's handle and its result, listing lines, pending questions,
the report of a check, and the words for a failure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tether.errors import InvalidInputError, TaskFailedError, TaskNotFinishedError
from tether.model import Failure, TaskState, Waiting
from tether.model.status import TERMINAL, Status
from tether.timetravel import ReplayReport

__all__ = [
    "CheckReport",
    "PendingInput",
    "TaskHandle",
    "TaskSummary",
    "check_against_schema",
    "failure_summary",
    "requested",
]


@dataclass(frozen=True)
class TaskHandle:
    """What :meth:`App.run` returns, and :meth:`App.get`: where the task stands.

    A handle from :meth:`App.get` is read off the task's index row, whatever the task's length;
    its full :attr:`state` is loaded when first asked for.
    """

    task_id: str
    status: Status
    output: Any
    failure: Failure | None
    position: str
    waiting: Waiting | None
    _state: TaskState | None = field(default=None, repr=False, compare=False)
    _load: Callable[[], TaskState] | None = field(default=None, repr=False, compare=False)
    parked: str | None = None
    """Why no worker runs the task until someone acts on it (a divergence, a record that cannot be
    read), from :meth:`App.get`; ``None`` when nothing stops it."""

    @classmethod
    def of(cls, state: TaskState) -> TaskHandle:
        return cls(state.task_id, state.status, state.output, state.failure, state.position, state.waiting, state)

    @property
    def state(self) -> TaskState:
        """The task's full state (for a handle from :meth:`App.get`, loaded now, the first time)."""
        if self._state is None:
            assert self._load is not None
            object.__setattr__(self, "_state", self._load())
        return self._state  # type: ignore[return-value]

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
        if self.status is Status.COMPLETED:
            return self.output
        if self.status in (Status.FAILED, Status.CANCELLED):
            state = self.state
            raise TaskFailedError(
                failure_summary(state),
                task_id=state.task_id,
                failure=state.failure.model_dump(mode="json") if state.failure else None,
            )
        waiting = f" for input {self.waiting.key!r}" if self.waiting else ""
        raise TaskNotFinishedError(
            f"task {self.task_id!r} has no result yet: it is {self.status.value}{waiting}",
            task_id=self.task_id,
            status=self.status.value,
        )


def requested(state: TaskState) -> Literal["answer", "cancel", "retry"] | None:
    """The request recorded on a task that no worker has acted on yet: ``answer`` (its wait was
    answered; it still reads ``awaiting_input`` until a worker continues it), ``cancel``, ``retry``
    (a failed task sent back: pending, with the history it failed in), or ``None``. What the
    inspector, the API's ``requested`` and ``tether show`` say of it."""
    if state.status in TERMINAL:
        return None
    if state.cancel_reason is not None:
        return "cancel"
    if state.status is Status.AWAITING_INPUT and state.waiting is None:
        return "answer"
    # a fork's (or a rewound task's) own history starts after the parent's events it shares
    created_at = state.parent.seq + 1 if state.parent is not None else 1
    if state.status is Status.PENDING and state.version > created_at:
        return "retry"
    return None


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
    parked: str | None = None
    """Why no worker runs it until someone acts on it (see :attr:`TaskHandle.parked`)."""


def check_against_schema(task_id: str, key: str, value: Any, schema: dict[str, Any]) -> None:
    """Refuse a value that does not fit a wait's JSON schema, saying where and why."""
    # Imported here, when a wait has a schema: jsonschema and what it brings are thousands of objects
    # ``import tether`` would make, and every full garbage collection of the process walks them.
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        details = "; ".join(f"{'/'.join(map(str, e.path)) or '(value)'}: {e.message}" for e in errors[:5])
        raise InvalidInputError(f"input {key!r} for task {task_id!r} does not fit its schema: {details}")
