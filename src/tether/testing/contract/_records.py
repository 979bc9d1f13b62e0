"""Rows and events the store contract's checks write, and the ways they check an outcome."""

from __future__ import annotations

import time
from collections.abc import Callable

from tether.errors import ConflictError
from tether.store import EventRow, Store, TaskRow

TENANT = "contract"


def _row(task_id: str, *, type: str = "t", status: str = "pending", version: int = 1) -> TaskRow:
    now = time.time()
    return TaskRow(task_id, TENANT, type, status, "u1", None, now, now, version)


def _event(seq: int, payload: str = '{"n": 1}') -> EventRow:
    return EventRow(seq, "DecisionMade", 1, time.time(), payload)


def _create(store: Store, task_id: str, events: int = 1, *, type: str = "t") -> None:
    store.create_task(TENANT, _row(task_id, type=type), _event(1))
    if events > 1:
        store.append(TENANT, task_id, [_event(seq) for seq in range(2, events + 1)], 1)


def _seqs(store: Store, task_id: str, **bounds: int) -> list[int]:
    return [e.seq for e in store.read_events(TENANT, task_id, **bounds)]


def _expect(error: type[BaseException] | tuple[type[BaseException], ...], action: Callable[[], object]) -> None:
    try:
        action()
    except error:
        return
    raise AssertionError(f"expected {error} from {action}")


def _expect_conflict_on(task_id: str, action: Callable[[], object]) -> None:
    """``action`` raises a ConflictError that names ``task_id`` (the part refused, not another)."""
    try:
        action()
    except ConflictError as exc:
        assert exc.task_id == task_id, f"the conflict names {exc.task_id!r}, not the refused {task_id!r}"
        return
    raise AssertionError(f"expected a ConflictError on {task_id!r} from {action}")


def _versions(store: Store, *task_ids: str) -> list[int | None]:
    return [None if (row := store.get_task(TENANT, t)) is None else row.version for t in task_ids]
