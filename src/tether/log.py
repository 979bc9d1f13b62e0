"""The task log: typed events in, typed state out, over any :class:`~tether.store.Store`.

This is the one place that encodes and decodes events, runs upcasters, checks
snapshot checksums and decides when to write a snapshot. Backends only move
bytes; the fold (:func:`tether.events.apply`) only computes state.

Loading the latest state costs one snapshot read plus the events after it:
O(events since the last snapshot), never O(history).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

import orjson
from pydantic import ValidationError

from tether._keys import MAX_DEPTH, check_finite, json_default, unserializable_reason
from tether._validate import MAX_LIMIT, MAX_OFFSET, check_id, check_int, check_optional_id, check_task_id
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
    CallAttemptFailed,
    CallCompleted,
    CallFailed,
    CallStarted,
    CancelRequested,
    DataUpdated,
    DecisionMade,
    Event,
    InputReceived,
    ObservationRecorded,
    OutputSet,
    PatchMarked,
    Recorded,
    RetryRequested,
    SessionRead,
    SessionWritten,
    StatusChanged,
    StepCompleted,
    StepFailed,
    StepStarted,
    TaskArchived,
    TaskCreated,
    TaskForked,
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
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When to cache the fold as a snapshot, and which earlier snapshots to keep.

    A snapshot is written once ``every`` events have been appended since the last
    one *and* those events' bytes reach ``size_ratio`` times the last snapshot's
    size. The second rule keeps snapshots of a growing state from being written
    more often than the state changes; ``size_ratio=0`` means "exactly every K".

    When a new snapshot is written, the one before it is dropped if the state grew
    by at least ``growth_ratio`` times the bytes of the events between the two: a
    state that keeps what its events carry (a chat keeping every message) keeps one
    snapshot, its latest, instead of a copy of itself at every size. A state that
    stays about the same size keeps them all, and time travel to any point starts
    from the nearest. Either way the bytes stored per event do not grow with the
    history. ``growth_ratio`` above 1 keeps every snapshot.
    """

    every: int = 100
    size_ratio: float = 1.0
    growth_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ConfigurationError(f"SnapshotPolicy.every must be at least 1, got {self.every}")
        if self.size_ratio < 0:
            raise ConfigurationError(f"SnapshotPolicy.size_ratio must be >= 0, got {self.size_ratio}")
        if self.growth_ratio < 0:
            raise ConfigurationError(f"SnapshotPolicy.growth_ratio must be >= 0, got {self.growth_ratio}")


class _Entry:
    """What the log remembers about a task it has touched.

    Appends are not folded at once: their events wait in ``pending`` and are folded,
    as one batch, when somebody reads the state. An append therefore costs the same
    at the tenth call as at the hundred-thousandth.
    """

    __slots__ = ("base", "bytes_since", "calls", "created", "pending", "snap_seq", "snap_size", "version")

    def __init__(self, state: TaskState, snap_seq: int, snap_size: int, bytes_since: int) -> None:
        self.created: float | None = None
        """The stream's index row ``created_at``: which stream this is (a rewind elsewhere puts another
        stream under the same id, a delete and re-create too). ``None`` until first checked."""
        self.base = state
        self.pending: list[Recorded] = []
        self.version = state.version
        self.calls = {call.n for call in state.calls}  # the ordinals opened
        self.snap_seq = snap_seq
        self.snap_size = snap_size
        self.bytes_since = bytes_since

    @property
    def state(self) -> TaskState:
        if self.pending:
            self.base = fold(self.pending, self.base)
            self.pending = []
        return self.base


# Events from outside a run that make a waiting or sleeping task runnable at once.
_WAKES = frozenset({InputReceived, CancelRequested})

# Events whose fold cannot fail once these cheap checks pass: appends of them are folded
# lazily. Every other event (status and phase moves, plans) is folded before it is written.
_CALL_EVENTS = (CallStarted, CallCompleted, CallAttemptFailed, CallFailed)
_CALL_EVENT_TYPES = frozenset(_CALL_EVENTS)
_DEFERRED: dict[type[Event], Callable[[Any], bool]] = {
    CallStarted: lambda e: isinstance(e.key, str) and isinstance(e.tool, str) and isinstance(e.args, dict),
    CallCompleted: lambda e: e.key is None or (isinstance(e.key, str) and isinstance(e.args, dict)),
    CallAttemptFailed: lambda e: isinstance(e.error_type, str),
    CallFailed: lambda e: True,
    ObservationRecorded: lambda e: isinstance(e.key, str) and (e.as_of is None or _iso(e.as_of)),
    DecisionMade: lambda e: isinstance(e.name, str),
    DataUpdated: lambda e: isinstance(e.fields, dict),
    StepStarted: lambda e: isinstance(e.name, str),
    StepCompleted: lambda e: isinstance(e.name, str),
    StepFailed: lambda e: isinstance(e.name, str),
    InputReceived: lambda e: isinstance(e.key, str),
    OutputSet: lambda e: True,
    PatchMarked: lambda e: isinstance(e.name, str),
    SessionRead: lambda e: isinstance(e.session_id, str) and type(e.upto) is int and type(e.s) is int,
    SessionWritten: lambda e: isinstance(e.session_id, str) and type(e.first) is int and type(e.last) is int,
}
# A NamedTuple from a ready tuple, without the keyword-parsing __new__ (a hot path builds two per append).
_tuple_new = tuple.__new__


def checksum(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _epoch(value: datetime | float | None) -> float | None:
    if value is None or isinstance(value, float | int):
        return value
    return value.timestamp()


_STRIPES = 64
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _per_task(
    method: Callable[Concatenate[TaskLog, str, _P], _R],
) -> Callable[Concatenate[TaskLog, str, _P], _R]:
    """Run a method that reads or changes what the log remembers of ``task_id`` under its lock."""

    @functools.wraps(method)
    def locked(self: TaskLog, task_id: str, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock(task_id):
            return method(self, task_id, *args, **kwargs)

    return locked


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
        >>> log.append(state.task_id, [tether.events.PlanSet(steps=["a", "b"])], state.version)
        2
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
        check_id(tenant, "tenant", error=ConfigurationError)
        self.store: Store = store if store is not None and not isinstance(store, str) else open_store(store)
        self.tenant = tenant
        self.snapshots = snapshots or SnapshotPolicy()
        self.upcasters = upcasters or DEFAULT_UPCASTERS
        self.max_event_bytes = max_event_bytes
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._cache_size = cache_size
        # One App is shared by threads (ctx.map, a worker's concurrency, a server's requests): what
        # the log remembers of a task is read and changed under that task's lock (striped, so
        # unrelated tasks rarely wait on each other), the cache's order under its own.
        self._stripes = [threading.RLock() for _ in range(_STRIPES)]
        self._cache_lock = threading.RLock()

    # ----------------------------------------------------------------- encoding
    def encode(self, event: Event) -> str:
        """The stored JSON of an event; raises before anything is written if it cannot be stored."""
        try:
            data = orjson.dumps(event, default=json_default)
        except TypeError as exc:
            raise NotSerializableError(_explain_unserializable(event, exc)) from None
        if b"null" in data:  # where orjson puts a NaN or an infinity: refuse them, by name
            check_finite(event, type(event).__name__)
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
        task_id = uuid.uuid4().hex if task_id is None else check_task_id(task_id)
        check_optional_id(user_id, "user_id")
        check_optional_id(session_id, "session_id")
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
        row = self._index_row(task_id, type, user_id, session_id, now, version=1)
        self.store.create_task(self.tenant, row, EventRow(1, event.event_type, event.version, now, encoded))
        entry = _Entry(state, 0, 0, len(encoded))
        entry.created = now
        self._remember(task_id, entry)
        return state

    @_per_task
    def append(
        self,
        task_id: str,
        events: Sequence[Event],
        expected_version: int,
        *,
        fence: int | None = None,
        snapshot: bool = True,
    ) -> int:
        """Append events atomically at ``expected_version``; return the new version.

        ``snapshot=False`` leaves the snapshot policy for later (:meth:`snapshot_if_due`):
        a writer that holds the task and appends step after step snapshots once, when
        it stops, instead of folding the state in the middle of its work.

        Everything is checked before anything is written: an illegal status or phase
        move raises :class:`~tether.errors.InvalidTransition`, an unstorable payload
        :class:`~tether.errors.InvalidInputError`, a stale ``expected_version``
        :class:`~tether.errors.ConflictError`, a stale ``fence``
        :class:`~tether.errors.LeaseLostError`.
        """
        if not events:
            raise InvalidInputError("append() needs at least one event")
        entry = self._cache.get(task_id)
        if entry is None or entry.version != expected_version:
            entry = self._entry(task_id, expected_version)
        now = time.time()
        base: TaskState | None = None  # set when a checked event had to be folded now
        staged: list[Recorded] = []  # deferred events of this batch, after ``base`` if it is set
        opened = entry.calls
        opening: set[int] = set()  # calls this batch opens: added to ``opened`` once written
        rows: list[EventRow] = []
        index: IndexUpdate | None = None
        size = 0
        seq = expected_version
        for event in events:
            seq += 1
            rec = _tuple_new(Recorded, (seq, now, event))
            cls = type(event)
            if cls in _DEFERRED:
                # The common case (a call, a decision, an observation): checked now, written now,
                # folded when somebody reads the state.
                _checked(task_id, event, opened, opening)
                staged.append(rec)
            elif not isinstance(event, Event):
                raise InvalidInputError(f"append() takes Event objects, got {type(event).__name__}")
            elif isinstance(event, TaskCreated):
                raise InvalidInputError("TaskCreated is written by create(), not append()")
            else:
                # Fold now: the machines check the move before anything is written.
                if base is None:
                    base = fold([*entry.pending, *staged, rec], entry.base)
                else:
                    base = fold([*staged, rec], base)
                staged = []
                if type(event) is StatusChanged:
                    index = IndexUpdate(status=event.status, wake_at=event.wake_at)
            if cls is RetryRequested:
                index = IndexUpdate(status=Status.PENDING.value, wake_at=None)
            if cls in _WAKES and (index is None or index.status is None):
                index = IndexUpdate(status=None, wake_at=now)  # an answer or a cancel: runnable now
            data = self.encode(event)
            size += len(data)
            rows.append(_tuple_new(EventRow, (seq, event.event_type, event.version, now, data, None)))
        try:
            self.store.append(self.tenant, task_id, rows, expected_version, fence=fence, index=index)
        except BaseException:
            self.forget(task_id)  # what happened is for the store to say, on the next read
            raise
        if base is not None:
            entry.base = base
            entry.pending = staged
        else:
            entry.pending.extend(staged)
        entry.version = seq
        opened |= opening
        entry.bytes_since += size
        if snapshot and seq - entry.snap_seq >= self.snapshots.every:
            self._maybe_snapshot(task_id, entry)
        return seq

    @_per_task
    def snapshot_if_due(self, task_id: str) -> None:
        """Write a snapshot now if the policy asks for one (after appends made with ``snapshot=False``)."""
        entry = self._cache.get(task_id)
        if entry is not None:
            self._maybe_snapshot(task_id, entry)

    def fork(
        self,
        task_id: str,
        at: int,
        *,
        new_id: str | None = None,
        inputs: dict[str, Any] | None = None,
        session_id: str | None = None,
        at_state: TaskState | None = None,
    ) -> TaskState:
        """A new task sharing ``task_id``'s events up to ``at`` — by reference, O(1) — then its own.

        ``session_id``: the fork's own conversation (a branch of its parent's), when it has one.
        ``at_state``: the parent's state at ``at``, when the caller has it already.
        """
        check_int(at, "at", low=1)
        parent = self.task_row(task_id, "forked")
        if not 1 <= at <= parent.version:
            raise SequenceError(task_id, at, parent.version)
        new_id = uuid.uuid4().hex if new_id is None else check_task_id(new_id, "new_id")
        row, first = self._fork_records(
            new_id, task_id, at, parent.type, parent.user_id, session_id or parent.session_id, inputs, session_id
        )
        # Fold the fork's first event onto the parent's state before writing it: a fork that could
        # not be read back is refused with nothing written. That fold is the fork's state.
        base = at_state if at_state is not None and at_state.version == at else self.state_at(task_id, at)
        state = apply(base, self.decode(first))
        self.store.create_task(self.tenant, row, first)
        self._remember(new_id, _Entry(state, 0, 0, len(first.data)))
        return state

    def fork_stream(self, stream_id: str, at: int, *, new_id: str) -> str:
        """Branch one of tether's own streams (a session) at ``at``: one row and one event, by reference."""
        check_int(at, "at", low=1)
        parent = self.get(stream_id)
        if not 1 <= at <= parent.version:
            raise SequenceError(stream_id, at, parent.version)
        row, first = self._fork_records(new_id, stream_id, at, parent.type, parent.user_id, parent.session_id)
        self.store.create_task(self.tenant, row, first)
        return new_id

    def task_row(self, task_id: str, verb: str) -> TaskRow:
        """The index row of a task, refusing tether's own streams (sessions, user documents)."""
        row = self.get(task_id)
        if row.type.startswith("tether."):
            raise InvalidInputError(
                f"{task_id!r} is one of tether's own streams ({row.type}), not a task; it cannot be {verb}"
            )
        return row

    def _index_row(
        self,
        task_id: str,
        type: str,
        user_id: str | None,
        session_id: str | None,
        now: float,
        *,
        version: int,
        parent: tuple[str, int] | None = None,
    ) -> TaskRow:
        """The index row of a new task (a fork names its parent and the last event it shares)."""
        return TaskRow(
            task_id=task_id,
            tenant=self.tenant,
            type=type,
            status=Status.PENDING.value,
            user_id=user_id,
            session_id=session_id,
            created_at=now,
            updated_at=now,
            version=version,
            parent_id=parent[0] if parent else None,
            parent_seq=parent[1] if parent else None,
        )

    def _fork_records(
        self,
        new_id: str,
        parent_id: str,
        at: int,
        type: str,
        user_id: str | None,
        session_id: str | None,
        inputs: dict[str, Any] | None = None,
        own_session: str | None = None,
    ) -> tuple[TaskRow, EventRow]:
        """The index row and first event of a fork of ``parent_id`` at ``at``."""
        now = time.time()
        event = TaskForked(task_id=new_id, parent_task_id=parent_id, at=at, inputs=inputs, session_id=own_session)
        row = self._index_row(new_id, type, user_id, session_id, now, version=at + 1, parent=(parent_id, at))
        return row, EventRow(at + 1, event.event_type, event.version, now, self.encode(event))

    @_per_task
    def rewind(self, task_id: str, to: int, *, archive_id: str, session_id: str | None = None) -> TaskState:
        """Set the task's branch aside as ``archive_id`` and put a fork of it at ``to`` in its place.

        ``session_id``: the rewound task's own branch of its conversation, when it has one.
        """
        self.task_row(task_id, "rewound")
        current = self.load(task_id)
        if not isinstance(to, int) or isinstance(to, bool) or not 1 <= to <= current.version:
            raise SequenceError(task_id, to if isinstance(to, int) else -1, current.version)
        now = time.time()
        archived = TaskArchived(task_id=archive_id, successor=task_id)
        row, forked = self._fork_records(
            task_id, archive_id, to, current.type, current.user_id, session_id or current.session_id, None, session_id
        )
        self.store.rewind(
            self.tenant,
            task_id,
            current.version,
            archive_id=archive_id,
            archived=EventRow(current.version + 1, archived.event_type, archived.version, now, self.encode(archived)),
            fork=row,
            forked=forked,
        )
        self.forget(task_id)
        return self.load(task_id)

    @_per_task
    def cached(self, task_id: str, version: int) -> TaskState:
        """The state at ``version`` from this log's memory when it has it, else from the store.

        For a writer that knows no one else appends (it holds the lease): no query at all.
        """
        entry = self._cache.get(task_id)
        if entry is not None and entry.version == version:
            return entry.state
        return self.load(task_id)

    def _maybe_snapshot(self, task_id: str, entry: _Entry) -> None:
        policy = self.snapshots
        if entry.version - entry.snap_seq < policy.every:
            return
        if entry.bytes_since < policy.size_ratio * entry.snap_size:
            return
        data = entry.state.model_dump_json(exclude={"position"})
        # A state that grew by what its events carried replaces its previous snapshot (when that one
        # is this task's own: a fork may start from its parent's, which is left alone).
        grew = len(data) - entry.snap_size >= policy.growth_ratio * entry.bytes_since
        self._put_snapshot(task_id, entry.version, data, replaces=entry.snap_seq if entry.snap_seq and grew else None)
        entry.snap_seq = entry.version
        entry.bytes_since = 0

    def write_snapshot(self, task_id: str, state: TaskState) -> None:
        """Store ``state`` as the snapshot at its version (the policy calls this; so may you)."""
        self._put_snapshot(task_id, state.version, state.model_dump_json(exclude={"position"}))

    def _put_snapshot(self, task_id: str, version: int, data: str, *, replaces: int | None = None) -> None:
        row = SnapshotRow(version, STATE_SCHEMA_VERSION, checksum(data), data)
        self.store.put_snapshot(self.tenant, task_id, row, replaces=replaces)
        entry = self._cache.get(task_id)
        if entry is not None and entry.version == version:
            entry.snap_size = len(data)

    # ----------------------------------------------------------------- reading
    @_per_task
    def load(self, task_id: str) -> TaskState:
        """The latest state: the nearest good snapshot plus the events after it.

        What this log remembers of the task is checked against the store's index row first (one
        cheap read): if another process rewound or deleted and re-created the task, the memory is
        of another stream and is dropped, never trusted.
        """
        entry = self._cache.get(task_id)
        if entry is None:
            check_id(task_id, "task_id")
        else:
            row = self.store.get_task(self.tenant, task_id)
            if row is None:
                self.forget(task_id)
                raise TaskNotFoundError(task_id, tenant=self.tenant)
            if entry.created is None:
                entry.created = row.created_at
            if row.created_at != entry.created or row.version < entry.version:
                self.forget(task_id)  # another stream under this id now
                entry = None
            elif row.version == entry.version:
                self._touch(task_id)
                return entry.state
        if entry is not None:
            rows = self.store.read_events(self.tenant, task_id, after=entry.version)
            if rows:
                entry.pending.extend(self.decode(r) for r in rows)
                entry.version = rows[-1].seq
                entry.bytes_since += sum(len(r.data) for r in rows)
                state = entry.state
                entry.calls = {call.n for call in state.calls}
                self._maybe_snapshot(task_id, entry)
            self._touch(task_id)
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
        check_id(task_id, "task_id")
        if after < 0 or (upto is not None and upto < after):
            raise SequenceError(task_id, upto if upto is not None else after, self.version(task_id))
        return [self.decode(r) for r in self.store.read_events(self.tenant, task_id, after=after, upto=upto)]

    def version(self, task_id: str) -> int:
        check_id(task_id, "task_id")
        row = self.store.get_task(self.tenant, task_id)
        if row is None:
            raise TaskNotFoundError(task_id, tenant=self.tenant)
        return row.version

    def get(self, task_id: str) -> TaskRow:
        """The task's index row (status, lease, version) without folding anything."""
        check_id(task_id, "task_id")
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
        check_int(limit, "limit", low=1, high=MAX_LIMIT)
        check_int(offset, "offset", low=0, high=MAX_OFFSET)
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
        if entry is None or entry.version != expected_version:
            entry = self._load_entry(task_id, upto=None)
            self._remember(task_id, entry)
            if entry.version != expected_version:
                raise ConflictError(task_id, expected=expected_version, actual=entry.version)
        return entry

    def _load_entry(self, task_id: str, *, upto: int | None) -> _Entry:
        snapshot, base = self._good_snapshot(task_id, upto)
        rows = self.store.read_events(self.tenant, task_id, after=snapshot.seq if snapshot else 0, upto=upto)
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
        """The newest snapshot at or before ``upto`` that is intact and of the current schema.

        A fork with none of its own uses its parent's (from before the fork point): the
        events after it, which ``read_events`` follows across the fork, make up the rest.
        """
        return self.intact_snapshot(task_id, upto, _parse_state)

    def intact_snapshot(
        self, stream_id: str, upto: int | None, parse: Callable[[SnapshotRow], _T]
    ) -> tuple[SnapshotRow | None, _T | None]:
        """The newest snapshot of a stream at or before ``upto`` that passes its checksum and that
        ``parse`` reads (``parse`` raises ``ValueError`` naming why not: an unknown schema, a shape
        that does not validate); a fork with none of its own uses its parent's from before the fork
        point. Tasks' states and tether's own streams' views (sessions) share this one mechanism."""
        at_most = _FAR if upto is None else upto
        owner = stream_id
        while True:
            snap = self.store.get_snapshot(self.tenant, owner, at_most=at_most)
            if snap is None:
                row = self.store.get_task(self.tenant, owner)
                if row is None or row.parent_id is None or row.parent_seq is None:
                    return None, None
                owner, at_most = row.parent_id, min(at_most, row.parent_seq)
                continue
            if checksum(snap.data) == snap.checksum:
                try:
                    return snap, parse(snap)
                except ValueError as exc:  # pydantic's ValidationError is one
                    reason = str(exc).splitlines()[0]
            else:
                reason = "fails its checksum"
            log.warning("snapshot of stream %s at seq %d %s; rebuilding from events", stream_id, snap.seq, reason)
            at_most = snap.seq - 1

    def latest(
        self, stream_id: str, parse: Callable[[SnapshotRow], _T]
    ) -> tuple[SnapshotRow | None, _T | None, Sequence[Recorded]]:
        """A stream's newest intact snapshot (read by ``parse``, as in :meth:`intact_snapshot`) and
        the decoded events after it, in one store read when the newest snapshot is good."""
        snap, rows = self.store.read_latest(self.tenant, stream_id)
        if snap is not None:
            parsed: _T | None = None
            if checksum(snap.data) == snap.checksum:
                try:
                    parsed = parse(snap)
                except ValueError:
                    parsed = None
            if parsed is None:  # the general path says why, and looks further back
                snap, parsed = self.intact_snapshot(stream_id, None, parse)
                rows = self.store.read_events(self.tenant, stream_id, after=snap.seq if snap else 0)
            return snap, parsed, [self.decode(r) for r in rows]
        return None, None, [self.decode(r) for r in rows]

    def put_stream_snapshot(
        self, stream_id: str, seq: int, schema: int, data: str, *, replaces: int | None = None
    ) -> None:
        """Store a snapshot (with its checksum) of one of tether's own streams at ``seq``."""
        self.store.put_snapshot(
            self.tenant, stream_id, SnapshotRow(seq, schema, checksum(data), data), replaces=replaces
        )

    def _remember(self, task_id: str, entry: _Entry) -> None:
        with self._cache_lock:
            self._cache[task_id] = entry
            self._cache.move_to_end(task_id)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _touch(self, task_id: str) -> None:
        with self._cache_lock:
            if task_id in self._cache:
                self._cache.move_to_end(task_id)

    def _lock(self, task_id: str) -> threading.RLock:
        return self._stripes[hash(task_id) % _STRIPES]

    def forget(self, task_id: str) -> None:
        """Drop what this log cached about a task (the store is untouched)."""
        with self._cache_lock:
            self._cache.pop(task_id, None)


def _parse_state(snap: SnapshotRow) -> TaskState:
    if snap.schema != STATE_SCHEMA_VERSION:
        raise ValueError(f"has state schema {snap.schema}, current is {STATE_SCHEMA_VERSION}")
    try:
        return TaskState.model_validate_json(snap.data)
    except ValidationError as exc:
        raise ValueError(f"does not validate ({exc.error_count()} errors)") from None


def _iso(value: Any) -> bool:
    """Whether ``value`` is an ISO 8601 timestamp the fold can read."""
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _checked(task_id: str, event: Event, opened: set[int], opening: set[int]) -> None:
    """Check an event whose fold is deferred (a call event against the calls opened so far)."""
    if not _DEFERRED[type(event)](event):
        raise InvalidInputError(f"{type(event).__name__} has a field of the wrong type: {event!r}")
    if type(event) in _CALL_EVENT_TYPES:
        _check_call_ordinal(task_id, event, opened, opening)


def _check_call_ordinal(task_id: str, event: Event, opened: set[int], opening: set[int]) -> None:
    """A call is opened once (by its intent, or a readonly call's completion), under any unused
    ordinal (parallel calls open in the order they finish); every other call event refers to
    an opened call."""
    n = event.n  # type: ignore[attr-defined]
    if type(n) is not int or n < 1:
        raise InvalidInputError(f"{type(event).__name__} has call ordinal {n!r}; ordinals are integers from 1")
    exists = n in opened or n in opening
    if isinstance(event, CallCompleted) and event.key is not None:
        if exists:
            raise InvalidInputError(f"CallCompleted opens call #{n} of task {task_id!r}, which is already open")
        opening.add(n)
    elif isinstance(event, CallStarted):
        opening.add(n)  # a new call, or the next attempt of an open one
    elif not exists:
        raise InvalidInputError(f"{type(event).__name__} refers to call #{n}, but task {task_id!r} has no such call")


def _explain_unserializable(event: Event, exc: Exception) -> str:
    if "Recursion limit" in str(exc):
        return f"{type(event).__name__} cannot be stored as JSON: {unserializable_reason(exc)}"
    for f in fields(event):  # type: ignore[arg-type]
        value = getattr(event, f.name)
        try:
            orjson.dumps(value, default=json_default)
        except TypeError:
            return f"{type(event).__name__}.{f.name} cannot be stored as JSON: {_describe_bad_value(value)} ({exc})"
    return f"{type(event).__name__} cannot be stored as JSON: {exc}"


def _describe_bad_value(value: Any, path: str = "", depth: int = 0) -> str:
    if depth > MAX_DEPTH:
        return f"a value nested more than {MAX_DEPTH} levels deep at {path}"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"key {k!r} at {path or 'top level'} is a {type(k).__name__}, not a string"
            try:
                orjson.dumps(v, default=json_default)
            except TypeError:
                return _describe_bad_value(v, f"{path}.{k}" if path else str(k), depth + 1)
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            try:
                orjson.dumps(v, default=json_default)
            except TypeError:
                return _describe_bad_value(v, f"{path}[{i}]", depth + 1)
    return f"value of type {type(value).__name__} at {path or 'top level'}"
