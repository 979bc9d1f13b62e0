"""The state of one task (pydantic v2).

:class:`TaskState` is what :func:`tether.events.fold` builds from a task's event
log. It is never written to directly: every change is an event. It round-trips
through JSON without loss (``TaskState.model_validate_json(state.model_dump_json()) == state``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import ConfigDict, GetCoreSchemaHandler, GetPydanticSchema, computed_field
from pydantic_core import core_schema

from tether.model.calls import NO_CALLS, CallList, call_index
from tether.model.records import (
    Decision,
    Failure,
    Observation,
    ParentRef,
    Step,
    ToolCall,
    Waiting,
    _Record,
    describe_position,
    plan_progress,
)
from tether.model.status import Status

__all__ = ["TaskState"]


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
    calls: _CallListField = NO_CALLS
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
    usage: dict[int, dict[str, Any]] = {}
    """Tokens and cost the code reported with ``ctx.usage``, by call ordinal (0: before any call):
    ``input_tokens``, ``output_tokens``, ``cost``, ``model`` and ``at`` (epoch seconds). Usage a
    call's result carries is read from the result itself (:func:`tether.telemetry.usage_of`)."""
    trace: dict[str, str] | None = None
    """Where the task's runs are traced (``origin``: the trace they join; ``run``: the latest run's
    span), as W3C ``traceparent`` strings; ``None`` when telemetry has never been on for it."""
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
