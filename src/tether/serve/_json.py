"""Turning tether's records into JSON bodies, in one place."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel

from tether.errors import TetherError
from tether.log.encoding import event_fields
from tether.model import TaskState
from tether.model.status import Status
from tether.runtime.app import App, failure_summary
from tether.runtime.handles import requested
from tether.runtime.liveness import liveness
from tether.store import TaskRow
from tether.timetravel import HistoryEntry

__all__ = ["entries_json", "jsonable", "requested", "state_json", "summary_json", "utc", "workers_json"]


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)  # anything else is shown, never a 500


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (pydantic models, dataclasses, datetimes, enums included)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return orjson.loads(orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS))


def utc(moment: datetime) -> str:
    """A time as the API writes every time: UTC, with its offset (``2026-01-02T03:04:05.123456Z``),
    as pydantic writes the state's."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else utc(datetime.fromtimestamp(epoch, UTC))


def summary_json(app: App, row: TaskRow) -> dict[str, Any]:
    """One line of the task list: where the task stands, what it waits for, who holds it."""
    held = row.runner(time.time())
    body: dict[str, Any] = {
        "task_id": row.task_id,
        "type": row.type,
        "status": row.status,
        "user_id": row.user_id,
        "session_id": row.session_id,
        "parent_id": row.parent_id,
        "version": row.version,
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
        "held_by": held,
        "position": None,
        "waiting_for": None,
        "prompt": None,
        "wakes_at": _iso(row.wake_at),
        "parked": row.parked,  # why no worker runs it until someone acts on it (a divergence), or None
        "requested": None,
        "error": None,
    }
    try:
        state = app.state(row.task_id)
    except TetherError as exc:  # one unreadable stream must not hide the others
        body["error"] = exc.to_dict()
        return body
    body.update(
        status=state.status.value,
        version=state.version,
        position=state.position,
        waiting_for=state.waiting.key if state.waiting else None,
        prompt=state.waiting.prompt if state.waiting else None,
        session_id=state.session_id,  # a conversation made for a task that named none is the state's alone
        requested=requested(state),
    )
    return body


def state_json(state: TaskState) -> dict[str, Any]:
    body: dict[str, Any] = state.model_dump(mode="json")
    return body


def task_json(app: App, row: TaskRow, state: TaskState, *, alive_within: float) -> dict[str, Any]:
    """A task's page: its summary line, its full state, the failure in words, and whether any worker
    is alive to act on it (seen in the last ``alive_within`` seconds)."""
    failed = state.status in (Status.FAILED, Status.CANCELLED)
    return {
        "summary": summary_json(app, row),
        "state": state_json(state),
        "failure_summary": failure_summary(state) if failed else None,
        "workers": workers_json(app, alive_within=alive_within),
    }


def workers_json(app: App, *, alive_within: float) -> dict[str, Any]:
    """Whether any worker is alive to act on the tenant's tasks, from their liveness records."""
    seen = liveness(app.store, app.tenant, time.time(), within=alive_within)
    last = seen.last
    return {
        "alive": seen.alive,
        "last_seen": None if last is None else _iso(last.seen_at),
        "app": None if last is None else last.app,
        "note": seen.note(),
    }


def entries_json(entries: list[HistoryEntry]) -> list[dict[str, Any]]:
    """History entries as JSON bodies: each with its event's fields as ``data``."""
    fields = [event_fields(entry.event) for entry in entries]
    datas: list[dict[str, Any]] = jsonable(fields)  # one round trip for them all, not one per entry of a long history
    return [
        {
            "seq": entry.seq,
            "at": utc(entry.at),
            "type": entry.type,
            "summary": entry.summary,
            "actor": raw.get("actor"),
            "step": entry.step,
            "boundary": entry.boundary,
            "data": data,
        }
        for entry, raw, data in zip(entries, fields, datas, strict=True)
    ]
