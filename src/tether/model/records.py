"""The records a task's state is made of (pydantic v2): its plan's steps, attempts, calls, decisions,
observations, what it waits for, how it failed, where a fork came from.

All of them round-trip through JSON without loss, and are frozen: every change is an event.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "STATE_SCHEMA_VERSION",
    "Attempt",
    "CallKind",
    "CallStatus",
    "Decision",
    "Failure",
    "Observation",
    "ParentRef",
    "Step",
    "StepStatus",
    "ToolCall",
    "Waiting",
    "describe_position",
    "plan_progress",
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
