"""The task log: typed events in, typed state out, over any :class:`~tether.store.Store`.

This is the one place that encodes and decodes events, runs upcasters, checks
snapshot checksums and decides when to write a snapshot. Backends only move
bytes; the fold (:func:`tether.events.apply`) only computes state.

Loading the latest state costs one snapshot read plus the events after it:
O(events since the last snapshot), never O(history).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from tether._keys import json_default
from tether.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    NotSerializableError,
    SequenceError,
    TaskNotFoundError,
    ValueTooLargeError,
)
from tether.events import (
    DEFAULT_UPCASTERS,
    Event,
    Recorded,
    StatusChanged,
    TaskCreated,
    Upcasters,
    apply,
    fold,
)
from tether.machine import Phases, Status
from tether.model import STATE_SCHEMA_VERSION, TaskState
from tether.store import EventRow, IndexUpdate, SnapshotRow, Store, TaskFilter, TaskRow, open_store

__all__ = ["SnapshotPolicy", "TaskLog"]

log = logging.getLogger("tether")

_FAR = 2**62


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When to cache the fold as a snapshot.

    A snapshot is written once ``every`` events have been appended since the last
    one *and* those events' bytes reach ``size_ratio`` times the last snapshot's
    size. The second rule keeps snapshots of a growing state from costing more
    storage than the events themselves; ``size_ratio=0`` means "exactly every K".
    """

    every: int = 100
    size_ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ConfigurationError(f"SnapshotPolicy.every must be at least 1, got {self.every}")
        if self.size_ratio < 0:
            raise ConfigurationError(f"SnapshotPolicy.size_ratio must be >= 0, got {self.size_ratio}")


class _Entry:
    """What the log remembers about a task it has touched: the state and snapshot bookkeeping."""

    __slots__ = ("bytes_since", "snap_seq", "snap_size", "state")

    def __init__(self, state: TaskState, snap_seq: int, snap_size: int, bytes_since: int) -> None:
        self.state = state
        self.snap_seq = snap_seq
        self.snap_size = snap_size
        self.bytes_since = bytes_since


def checksum(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _epoch(value: datetime | float | None) -> float | None:
    if value is None or isinstance(value, float | int):
        return value
    return value.timestamp()


class TaskLog:
    """Typed access to task event streams for one tenant.

    Args:
        store: a backend, or a URL for :func:`~tether.store.open_store`.
        tenant: every read and write is scoped to it.
        snapshots: the :class:`SnapshotPolicy`.
        upcasters: migrations for older event shapes.
        max_event_bytes: an event larger than this (encoded) is refused.

    Example:
        >>> import tether
        >>> log = tether.TaskLog("memory://")
        >>> state = log.create(type="demo", inputs={"goal": "NYC"})
        >>> state = log.append(state.task_id, [tether.events.PlanSet(steps=["a", "b"])], state.version)
        >>> log.load(state.task_id).position
        'step 1 of 2; none committed'
    """

    def __init__(
        self,
        store: Store | str | None = None,
        *,
        tenant: str = "default",
        snapshots: SnapshotPolicy | None = None,
        upcasters: Upcasters | None = None,
        max_event_bytes: int = 16 * 1024 * 1024,
        cache_size: int = 4096,
    ) -> None:
        if not tenant or not isinstance(tenant, str):
            raise ConfigurationError(f"tenant must be a non-empty string, got {tenant!r}")
        self.store: Store = store if store is not None and not isinstance(store, str) else open_store(store)
        self.tenant = tenant
        self.snapshots = snapshots or SnapshotPolicy()
        self.upcasters = upcasters or DEFAULT_UPCASTERS
        self.max_event_bytes = max_event_bytes
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._cache_size = cache_size

    # ----------------------------------------------------------------- encoding
    def encode(self, event: Event) -> str:
        """The stored JSON of an event; raises before anything is written if it cannot be stored."""
        try:
            data = orjson.dumps(event, default=json_default)
        except TypeError as exc:
            raise NotSerializableError(_explain_unserializable(event, exc)) from None
        if len(data) > self.max_event_bytes:
            raise ValueTooLargeError(
                f"{type(event).__name__} encodes to {len(data):,} bytes, over the limit of "
                f"{self.max_event_bytes:,} (max_event_bytes)"
            )
        return data.decode()

    def decode(self, row: EventRow) -> Recorded:
        try:
            data = orjson.loads(row.data)
        except orjson.JSONDecodeError as exc:
            raise InvalidInputError(f"event #{row.seq} ({row.type}) holds invalid JSON: {exc}") from None
        return Recorded(row.seq, row.at, self.upcasters.decode(row.type, row.schema, data))

    # ----------------------------------------------------------------- writing
    def create(
        self,
        *,
        type: str,
        inputs: dict[str, Any] | None = None,
        task_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        phases: Phases | None = None,
        data: dict[str, Any] | None = None,
        data_version: int | None = None,
    ) -> TaskState:
        """Create a task (status ``pending``) with its first event. ``ConflictError`` if the id exists."""
        if not type:
            raise InvalidInputError("a task needs a non-empty type")
        task_id = task_id or uuid.uuid4().hex
        event = TaskCreated(
            type=type,
            task_id=task_id,
            tenant=self.tenant,
            inputs=inputs or {},
            user_id=user_id,
            session_id=session_id,
            phases=phases.to_dict() if phases else None,
            phase=phases.initial if phases else None,
            data=data,
            data_version=data_version,
        )
        now = time.time()
        rec = Recorded(1, now, event)
        state = apply(None, rec)
        encoded = self.encode(event)
        row = TaskRow(
            task_id=task_id,
            tenant=self.tenant,
            type=type,
            status=Status.PENDING.value,
            user_id=user_id,
            session_id=session_id,
            created_at=now,
            updated_at=now,
            version=1,
        )
        self.store.create_task(self.tenant, row, EventRow(1, event.event_type, event.version, now, encoded))
        self._remember(task_id, _Entry(state, 0, 0, len(encoded)))
        return state

    def append(
        self,
        task_id: str,
        events: Sequence[Event],
        expected_version: int,
        *,
        fence: int | None = None,
    ) -> TaskState:
        """Append events atomically at ``expected_version``; return the new state.

        The events are folded first, so an illegal status or phase move raises
        :class:`~tether.errors.InvalidTransition` and an unstorable payload raises
        :class:`~tether.errors.InvalidInputError` before anything is written.
        A stale ``expected_version`` raises :class:`~tether.errors.ConflictError`.
        """
        if not events:
            raise InvalidInputError("append() needs at least one event")
        entry = self._cache.get(task_id)
        if entry is None or entry.state.version != expected_version:
            entry = self._entry(task_id, expected_version)
        now = time.time()
        state = entry.state
        rows: list[EventRow] = []
        index: IndexUpdate | None = None
        size = 0
        seq = expected_version
        for event in events:
            seq += 1
            if not isinstance(event, Event):
                raise InvalidInputError(f"append() takes Event objects, got {type(event).__name__}")
            state = apply(state, Recorded(seq, now, event))  # raises before anything is written
            data = self.encode(event)
            size += len(data)
            rows.append(EventRow(seq, event.event_type, event.version, now, data))
            if type(event) is StatusChanged:
                index = IndexUpdate(status=event.status, wake_at=event.wake_at)
        try:
            self.store.append(self.tenant, task_id, rows, expected_version, fence=fence, index=index)
        except BaseException:
            self._cache.pop(task_id, None)
            raise
        entry.state = state
        entry.bytes_since += size
        if seq - entry.snap_seq >= self.snapshots.every:
            self._maybe_snapshot(task_id, entry)
        return state

    def _maybe_snapshot(self, task_id: str, entry: _Entry) -> None:
        policy = self.snapshots
        if entry.state.version - entry.snap_seq < policy.every:
            return
        if entry.bytes_since < policy.size_ratio * entry.snap_size:
            return
        self.write_snapshot(task_id, entry.state)
        entry.snap_seq = entry.state.version
        entry.bytes_since = 0

    def write_snapshot(self, task_id: str, state: TaskState) -> None:
        """Store ``state`` as the snapshot at its version (the policy calls this; so may you)."""
        data = state.model_dump_json(exclude={"position"})
        self.store.put_snapshot(
            self.tenant, task_id, SnapshotRow(state.version, STATE_SCHEMA_VERSION, checksum(data), data)
        )
        entry = self._cache.get(task_id)
        if entry is not None and entry.state.version == state.version:
            entry.snap_size = len(data)

    # ----------------------------------------------------------------- reading
    def load(self, task_id: str) -> TaskState:
        """The latest state: the nearest good snapshot plus the events after it."""
        entry = self._cache.get(task_id)
        if entry is not None:
            rows = self.store.read_events(self.tenant, task_id, after=entry.state.version)
            if rows:
                entry.state = fold((self.decode(r) for r in rows), entry.state)
                entry.bytes_since += sum(len(r.data) for r in rows)
                self._maybe_snapshot(task_id, entry)
            self._cache.move_to_end(task_id)
            return entry.state
        entry = self._load_entry(task_id, upto=None)
        self._remember(task_id, entry)
        self._maybe_snapshot(task_id, entry)
        return entry.state

    def state_at(self, task_id: str, seq: int) -> TaskState:
        """The state right after event ``seq`` (1 = just created)."""
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidInputError(f"seq must be an integer, got {type(seq).__name__}")
        last = self.version(task_id)
        if seq < 1 or seq > last:
            raise SequenceError(task_id, seq, last)
        return self._load_entry(task_id, upto=seq).state

    def events(self, task_id: str, *, after: int = 0, upto: int | None = None) -> list[Recorded]:
        """Decoded events with ``after < seq <= upto``."""
        if after < 0 or (upto is not None and upto < after):
            raise SequenceError(task_id, upto if upto is not None else after, self.version(task_id))
        return [self.decode(r) for r in self.store.read_events(self.tenant, task_id, after=after, upto=upto)]

    def version(self, task_id: str) -> int:
        row = self.store.get_task(self.tenant, task_id)
        if row is None:
            raise TaskNotFoundError(task_id, tenant=self.tenant)
        return row.version

    def get(self, task_id: str) -> TaskRow:
        """The task's index row (status, lease, version) without folding anything."""
        row = self.store.get_task(self.tenant, task_id)
        if row is None:
            raise TaskNotFoundError(task_id, tenant=self.tenant)
        return row

    def list(
        self,
        *,
        status: Status | str | Iterable[Status | str] | None = None,
        type: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        created_after: datetime | float | None = None,
        created_before: datetime | float | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[TaskRow]:
        """Tasks of this tenant, newest first, filtered and paged."""
        if limit < 1 or offset < 0:
            raise InvalidInputError(f"limit must be >= 1 and offset >= 0, got limit={limit}, offset={offset}")
        statuses: tuple[str, ...] | None = None
        if status is not None:
            items = [status] if isinstance(status, str | Status) else list(status)
            try:
                statuses = tuple(Status(s).value for s in items)
            except ValueError:
                raise InvalidInputError(
                    f"unknown status in {items!r}; known: {', '.join(s.value for s in Status)}"
                ) from None
        flt = TaskFilter(
            status=statuses,
            type=type,
            user_id=user_id,
            session_id=session_id,
            created_after=_epoch(created_after),
            created_before=_epoch(created_before),
        )
        return self.store.list_tasks(self.tenant, flt, limit=limit, offset=offset)

    # ----------------------------------------------------------------- internals
    def _entry(self, task_id: str, expected_version: int) -> _Entry:
        entry = self._cache.get(task_id)
        if entry is None or entry.state.version != expected_version:
            entry = self._load_entry(task_id, upto=None)
            self._remember(task_id, entry)
            if entry.state.version != expected_version:
                raise ConflictError(task_id, expected=expected_version, actual=entry.state.version)
        return entry

    def _load_entry(self, task_id: str, *, upto: int | None) -> _Entry:
        snapshot, base = self._good_snapshot(task_id, upto)
        rows = self.store.read_events(
            self.tenant, task_id, after=snapshot.seq if snapshot else 0, upto=upto
        )
        if base is None and not rows:
            raise TaskNotFoundError(task_id, tenant=self.tenant)
        state = fold((self.decode(r) for r in rows), base)
        return _Entry(
            state,
            snapshot.seq if snapshot else 0,
            len(snapshot.data) if snapshot else 0,
            sum(len(r.data) for r in rows),
        )

    def _good_snapshot(self, task_id: str, upto: int | None) -> tuple[SnapshotRow | None, TaskState | None]:
        """The newest snapshot at or before ``upto`` that is intact and of the current schema."""
        at_most = _FAR if upto is None else upto
        while True:
            snap = self.store.get_snapshot(self.tenant, task_id, at_most=at_most)
            if snap is None:
                return None, None
            if snap.schema == STATE_SCHEMA_VERSION and checksum(snap.data) == snap.checksum:
                try:
                    return snap, TaskState.model_validate_json(snap.data)
                except ValidationError as exc:
                    reason = f"does not validate ({exc.error_count()} errors)"
            elif snap.schema != STATE_SCHEMA_VERSION:
                reason = f"has state schema {snap.schema}, current is {STATE_SCHEMA_VERSION}"
            else:
                reason = "fails its checksum"
            log.warning(
                "snapshot of task %s at seq %d %s; rebuilding from events", task_id, snap.seq, reason
            )
            at_most = snap.seq - 1

    def _remember(self, task_id: str, entry: _Entry) -> None:
        self._cache[task_id] = entry
        self._cache.move_to_end(task_id)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def forget(self, task_id: str) -> None:
        """Drop what this log cached about a task (the store is untouched)."""
        self._cache.pop(task_id, None)


def _explain_unserializable(event: Event, exc: Exception) -> str:
    for f in fields(event):  # type: ignore[arg-type]
        value = getattr(event, f.name)
        try:
            orjson.dumps(value, default=json_default)
        except TypeError:
            return (
                f"{type(event).__name__}.{f.name} cannot be stored as JSON: "
                f"{_describe_bad_value(value)} ({exc})"
            )
    return f"{type(event).__name__} cannot be stored as JSON: {exc}"


def _describe_bad_value(value: Any, path: str = "") -> str:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"key {k!r} at {path or 'top level'} is a {type(k).__name__}, not a string"
            try:
                orjson.dumps(v, default=json_default)
            except TypeError:
                return _describe_bad_value(v, f"{path}.{k}" if path else str(k))
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            try:
                orjson.dumps(v, default=json_default)
            except TypeError:
                return _describe_bad_value(v, f"{path}[{i}]")
    return f"value of type {type(value).__name__} at {path or 'top level'}"
