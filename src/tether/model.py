"""Typed records of task state (pydantic v2).

:class:`TaskState` is what :func:`tether.events.fold` builds from a task's event
log. It is never written to directly: every change is an event. All records
round-trip through JSON without loss (``TaskState.model_validate_json(
state.model_dump_json()) == state``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetPydanticSchema, computed_field
from pydantic_core import core_schema

from tether._call_list import _NO_CALLS, CallList, call_index
from tether.machine import Status

__all__ = [
    "Attempt",
    "CallList",
    "Decision",
    "Failure",
    "Observation",
    "ParentRef",
    "Step",
    "TaskState",
    "ToolCall",
    "Waiting",
]

STATE_SCHEMA_VERSION = 2
"""Version of the :class:`TaskState` shape. Snapshots of another version are rebuilt from events."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


StepStatus = Literal["pending", "running", "completed", "failed"]


class Step(_Record):
    """One step of the plan."""

    name: str
    status: StepStatus = "pending"
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    messages: tuple[int, ...] = ()
    """Seqs of the conversation events (messages, summaries) the task added during this step."""


class Attempt(_Record):
    """One try of a tool call: when, how long, and how it ended."""

    number: int
    started_at: datetime
    finished_at: datetime | None = None
    duration: float | None = None
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    backoff: float | None = None
    """Seconds waited before the next attempt, when this one failed and another followed."""


CallStatus = Literal["intended", "completed", "failed"]
CallKind = Literal["call", "compensation", "fetch"]


class ToolCall(_Record):
    """A recorded call: its idempotency key, the arguments and the verbatim result."""

    n: int
    """Ordinal of the call in the task (1-based); part of the key."""
    key: str
    tool: str
    args: dict[str, Any]
    kind: CallKind = "call"
    readonly: bool = False
    status: CallStatus = "intended"
    result: Any = None
    attempts: tuple[Attempt, ...] = ()
    started_at: datetime
    finished_at: datetime | None = None
    compensates: int | None = None
    """For a compensation: the ordinal of the call it undoes."""
    retried_after: int = 0
    """Attempts up to this number came before a retry of the task (``app.retry``): they do not
    count against the retry policy's attempts."""


def _calls_schema(source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
    """A :class:`CallList` as pydantic validates and dumps it: a tuple of :class:`ToolCall`."""
    items = handler.generate_schema(tuple[ToolCall, ...])
    from_items = core_schema.no_info_after_validator_function(CallList, items)
    return core_schema.json_or_python_schema(
        json_schema=from_items,
        python_schema=core_schema.union_schema([core_schema.is_instance_schema(CallList), from_items]),
        serialization=core_schema.plain_serializer_function_ser_schema(tuple, return_schema=items),
    )


_CallListField = Annotated[CallList, GetPydanticSchema(_calls_schema)]


def plan_progress(plan: Sequence[Step]) -> tuple[int, int]:
    """A plan's steps, and how many of them from the first are completed."""
    committed = 0
    for step in plan:
        if step.status != "completed":
            break
        committed += 1
    return len(plan), committed


def describe_position(steps: int, committed: int, calls_done: int) -> str:
    """:attr:`TaskState.position` from a plan's progress (:func:`plan_progress`) and, without a plan,
    the committed calls: the one wording, for a folded state and an index row alike."""
    if not steps:
        return f"no plan; {calls_done} call{'s' if calls_done != 1 else ''} committed"
    if committed == steps:
        return f"all {steps} steps committed"
    if committed == 0:
        return f"step 1 of {steps}; none committed"
    span = "1" if committed == 1 else f"1–{committed}"
    return f"step {committed + 1} of {steps}; {span} committed"


class Decision(_Record):
    name: str
    choice: Any
    rationale: str
    alternatives: list[Any] | None = None
    at: datetime


class Observation(_Record):
    key: str
    value: Any
    source: str | None = None
    as_of: datetime | None = None
    recorded_at: datetime


class Waiting(_Record):
    """What input a task is waiting for."""

    key: str
    prompt: str | None = None
    input_schema: dict[str, Any] | None = None
    timeout_at: datetime | None = None
    requested_at: datetime


class Failure(_Record):
    """Why a task failed, with everything needed to diagnose it without re-running."""

    at: datetime
    step: str | None = None
    tool: str | None = None
    call_key: str | None = None
    input: Any = None
    output: Any = None
    exception_type: str
    message: str
    traceback: str | None = None


class ParentRef(_Record):
    """Where a fork came from: the parent task and the last parent event it shares."""

    task_id: str
    seq: int


class TaskState(_Record):
    """Everything tether knows about one task, folded from its events.

    Example:
        >>> import tether
        >>> log = tether.TaskLog(tether.open_store("memory://"))
        >>> state = log.create(type="book_trip", inputs={"goal": "NYC"})
        >>> state.status, state.version
        (<Status.PENDING: 'pending'>, 1)
    """

    # ``position`` is computed; ignore it when reading a dump back.
    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: str
    tenant: str
    user_id: str | None = None
    session_id: str | None = None
    session_version: int = 0
    """The last version of its conversation the task read or wrote (``ctx.session``)."""
    type: str
    status: Status = Status.PENDING
    phase: str | None = None
    phases: dict[str, list[str]] | None = None
    inputs: dict[str, Any] = {}
    plan: tuple[Step, ...] = ()
    calls: _CallListField = _NO_CALLS
    """The calls in ordinal order (a :class:`CallList`: each record is validated when first read)."""
    decisions: tuple[Decision, ...] = ()
    observations: dict[str, Observation] = {}
    data: dict[str, Any] = {}
    data_version: int | None = None
    waiting: Waiting | None = None
    received: dict[str, Any] = {}
    """Inputs sent to the task (``send_input``) by key, including ones not yet asked for."""
    wake_at: datetime | None = None
    """When a sleeping task wakes, or a waiting one times out."""
    cancel_reason: str | None = None
    """Set once cancellation was asked for; the task ends ``cancelled`` when it is carried out."""
    failure: Failure | None = None
    output: Any = None
    parent: ParentRef | None = None
    superseded_by: str | None = None
    """Set on a branch a rewind set aside: the task that took its place."""
    version: int = 0
    created_at: datetime
    updated_at: datetime

    @computed_field  # type: ignore[prop-decorator]
    @property
    def position(self) -> str:
        """A one-line answer to "where are we?", e.g. ``step 6 of 9; 1–5 committed``."""
        done = 0 if self.plan else self.calls.completed()
        return describe_position(*plan_progress(self.plan), done)

    def call(self, n: int) -> ToolCall | None:
        """The call with ordinal ``n`` (1-based), if recorded."""
        i = call_index(self.calls, n)
        return None if i is None else self.calls[i]
