"""Where many tasks stand, read off their index rows: the lines of :meth:`App.list_tasks` and the
questions of :meth:`App.pending_inputs`. A row's head answers without reading the task's events;
only a row written before tether kept heads is folded from its log. One task whose log cannot be
read never hides the others: its line says why, or it is left out of the questions."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from tether.errors import TetherError
from tether.log import TaskLog
from tether.log.heads import read_head, row_head_of
from tether.model.status import Status
from tether.runtime.handles import PendingInput, TaskSummary
from tether.runtime.leases import describe_holder
from tether.store import TaskRow

__all__ = ["pending_inputs", "task_summaries", "unreadable_summary"]

_log = logging.getLogger("tether")


def task_summaries(log: TaskLog, rows: Iterable[TaskRow], now: float) -> list[TaskSummary]:
    """One line per row, in their order: position, what the task waits for, who holds it at ``now``."""
    summaries = []
    for row in rows:
        held = describe_holder(row, now)
        try:
            head = read_head(row) or row_head_of(log.load(row.task_id))  # the row, or (an old one) the fold
        except TetherError as exc:
            summaries.append(unreadable_summary(row, held, exc))
            continue
        summaries.append(
            TaskSummary(
                task_id=row.task_id,
                type=row.type,
                status=head.status,
                position=head.position,
                waiting_for=head.waiting.key if head.waiting else None,
                prompt=head.waiting.prompt if head.waiting else None,
                wakes_at=head.wake_at,
                held_by=held,
                user_id=row.user_id,
                version=row.version,
                updated_at=datetime.fromtimestamp(row.updated_at, tz=UTC),
                parked=row.parked,
            )
        )
    return summaries


def pending_inputs(log: TaskLog, rows: Iterable[TaskRow]) -> list[PendingInput]:
    """The questions the tasks of ``rows`` wait on, with their prompts, oldest question first."""
    found = []
    for row in rows:
        try:
            head = read_head(row)
            waiting = head.waiting if head is not None else log.load(row.task_id).waiting
        except TetherError as exc:
            _log.warning("task %s cannot be read: %s", row.task_id, exc)
            continue
        if waiting is not None:
            found.append(
                PendingInput(
                    row.task_id,
                    row.type,
                    row.user_id,
                    waiting.key,
                    waiting.prompt,
                    waiting.input_schema,
                    waiting.requested_at,
                    waiting.timeout_at,
                )
            )
    return sorted(found, key=lambda p: p.requested_at)


def unreadable_summary(row: TaskRow, held: str | None, exc: TetherError) -> TaskSummary:
    """A listing's line for a task whose log cannot be read: what its index row says, and why."""
    _log.warning("task %s cannot be read: %s", row.task_id, exc)
    try:
        status = Status(row.status)
    except ValueError:
        status = Status.FAILED
    return TaskSummary(
        task_id=row.task_id,
        type=row.type,
        status=status,
        position=f"unreadable: {type(exc).__name__}: {exc}",
        waiting_for=None,
        prompt=None,
        wakes_at=None,
        held_by=held,
        user_id=row.user_id,
        version=row.version,
        updated_at=datetime.fromtimestamp(row.updated_at, tz=UTC),
        parked=row.parked,
    )
