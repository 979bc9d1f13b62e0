"""A task's life: created, forked, archived, its status and plan, its steps, and the ends it comes to
(output, failure, cancellation, a retry), with the markers replay needs (phases, sleeps, patches)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tether.events.base import Event, define_event

__all__ = [
    "CancelRequested",
    "FailureRecorded",
    "OutputSet",
    "PatchMarked",
    "PhaseChanged",
    "PlanSet",
    "RetryRequested",
    "SleepScheduled",
    "StatusChanged",
    "StepCompleted",
    "StepFailed",
    "StepStarted",
    "TaskArchived",
    "TaskCreated",
    "TaskForked",
]


@define_event
class TaskCreated(Event):
    type: str
    task_id: str
    tenant: str
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    user_id: str | None = None
    session_id: str | None = None
    phases: dict[str, list[str]] | None = None
    phase: str | None = None
    data: dict[str, Any] | None = None
    data_version: int | None = None
    parent: dict[str, Any] | None = None
    trace: str | None = None
    """The trace context (W3C ``traceparent``) of the code that created the task, kept while
    telemetry is on: every run of the task joins that trace."""


@define_event
class TaskForked(Event):
    """The first event of a fork: it shares its parent's events up to ``at`` and goes on from there."""

    task_id: str
    parent_task_id: str
    at: int
    inputs: dict[str, Any] | None = None
    session_id: str | None = None
    """The fork's own branch of its parent's conversation, when the parent had one."""
    actor: str | None = None
    """Who made the fork (an API key's name, a user name), when the caller said."""


@define_event
class TaskArchived(Event):
    """This branch was set aside by a rewind: it now lives as ``task_id``, and ``successor`` took its place."""

    task_id: str
    successor: str
    actor: str | None = None
    """Who rewound the task, when the caller said."""


@define_event
class StatusChanged(Event):
    status: str
    reason: str | None = None
    wake_at: float | None = None


@define_event
class PlanSet(Event):
    steps: list[str]


@define_event
class StepStarted(Event):
    name: str


@define_event
class StepCompleted(Event):
    name: str


@define_event
class StepFailed(Event):
    name: str
    error: str


@define_event
class PhaseChanged(Event):
    phase: str


@define_event
class SleepScheduled(Event):
    """A durable sleep until ``until`` (epoch seconds)."""

    until: float


@define_event
class CancelRequested(Event):
    reason: str | None = None
    actor: str | None = None
    """Who asked for the cancellation, when the caller said."""


@define_event
class OutputSet(Event):
    output: Any


@define_event
class FailureRecorded(Event):
    exception_type: str
    message: str
    traceback: str | None = None
    step: str | None = None
    tool: str | None = None
    call_key: str | None = None
    input: Any = None
    output: Any = None


@define_event
class PatchMarked(Event):
    """The task's code took the new path of ``ctx.patched(name)``: replays take it again."""

    name: str


@define_event
class RetryRequested(Event):
    """A failed task was sent to run again with the code as it is now (``app.retry``).

    ``retired`` are the seqs of the failure's own records (the call's give-up, the failed
    steps, the compensations that ran): a replay passes over them. The failed call gets a
    fresh round of attempts under its key. ``after_n``/``shift``: calls the code issues after
    call ``after_n`` take ordinals ``shift`` higher, past the compensations' ordinals.
    """

    failure_type: str
    failure_message: str
    retired: list[int] = dataclasses.field(default_factory=list)
    calls: list[int] = dataclasses.field(default_factory=list)
    """Ordinals of calls whose give-up was retired: they run again."""
    after_n: int = 0
    shift: int = 0
    actor: str | None = None
    """Who asked for the retry, when the caller said."""
