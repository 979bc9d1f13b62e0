"""The task log: typed events in, typed state out, over any :class:`~tether.store.Store`.

This is the one place that encodes and decodes events, runs upcasters, checks
snapshot checksums and decides when to write a snapshot. Backends only move
bytes; the fold (:func:`tether.events.apply`) only computes state.

Loading the latest state costs one snapshot read plus the events after it:
O(events since the last snapshot), never O(history).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from tether.checks import (
    MAX_LIMIT,
    MAX_OFFSET,
    check_id,
    check_int,
    check_optional_id,
    check_statuses,
    check_task_id,
    epoch,
)
from tether.errors import (
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    LeaseLostError,
    SequenceError,
    TaskNotFoundError,
)
from tether.events import (
    DEFAULT_UPCASTERS,
    Event,
    Recorded,
    TaskArchived,
    TaskCreated,
    TaskForked,
    Upcasters,
    apply,
    fold,
)
from tether.log.encoding import decode_row, decode_rows, encode_event
from tether.log.heads import HeadTracker, new_row
from tether.log.memory import Entry, Memory
from tether.log.snapshot_keeping import SnapshotKeeper
from tether.log.snapshots import (
    SnapshotPolicy,
    checksum,
)
from tether.log.staging import ALONE, Staged, stage, stage_alone
from tether.model import TaskState
from tether.model.status import Phases, Status
from tether.store import EventRow, SnapshotRow, Store, StreamAppend, TaskFilter, TaskRow, open_store

__all__ = ["SnapshotPolicy", "TaskLog", "checksum"]

log = logging.getLogger("tether")


_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")


def _per_task(
    method: Callable[Concatenate[TaskLog, str, _P], _R],
) -> Callable[Concatenate[TaskLog, str, _P], _R]:
    """Run a method that reads or changes what the log remembers of ``task_id`` under its lock."""

    @functools.wraps(method)
    def locked(self: TaskLog, task_id: str, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._memory.lock(task_id):
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
        cache_size, cache_bytes: what the log remembers of the tasks it touched (their folded
            states, so that the next append or read needs no query) is at most this many tasks and
            about this many bytes of their stored events; the least recently used are dropped
            first, and read again from the store when next needed.

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
        cache_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        check_id(tenant, "tenant", error=ConfigurationError)
        check_int(cache_size, "cache_size", low=1, error=ConfigurationError)
        check_int(cache_bytes, "cache_bytes", low=0, error=ConfigurationError)
        self.store: Store = store if store is not None and not isinstance(store, str) else open_store(store)
        self.tenant = tenant
        self.snapshots = snapshots or SnapshotPolicy()
        self.upcasters = upcasters or DEFAULT_UPCASTERS
        self.max_event_bytes = max_event_bytes
        self._memory = Memory(cache_size, self.snapshots.every, cache_bytes)
        self._keeper = SnapshotKeeper(self.store, tenant, self.snapshots, self._memory, self.decode, self.decode_all)

    # ----------------------------------------------------------------- encoding
    def encode(self, event: Event) -> str:
        """The stored JSON of an event; raises before anything is written if it cannot be stored."""
        return encode_event(event, self.max_event_bytes)

    def decode(self, row: EventRow) -> Recorded:
        return decode_row(row, self.upcasters)

    def decode_all(self, rows: Iterable[EventRow]) -> list[Recorded]:
        """``decode`` of each row, in one pass: a record stored in its type's current shape (nearly
        all) is built from its JSON straight away, any other goes through ``decode``, which migrates
        it; a record its class refuses, or of invalid JSON, goes there too, to be named. One pass, not
        a ``decode`` call per row: a history is read whole, and a call per row is paid for each of its
        events. Upcasters whose ``decode`` is overridden read every record themselves: then each row
        goes there."""
        if not self.reads_as_stored:
            return [self.decode(row) for row in rows]
        return decode_rows(rows, self.decode)

    @property
    def reads_as_stored(self) -> bool:
        """Whether a row in its type's current shape is read as it stands: the upcasters' ``decode``
        is tether's own (one overridden reads every record itself)."""
        return type(self.upcasters).decode is Upcasters.decode

    # ----------------------------------------------------------------- snapshots
    def snapshot_if_due(self, task_id: str) -> None:
        """Write a snapshot now if the policy asks for one (after appends made with ``snapshot=False``)."""
        self._keeper.snapshot_if_due(task_id)

    def hold(self, task_id: str) -> None:
        """A writer in this process starts on the task (a run, holding its lease): what the log
        remembers of it stays remembered, whatever the budget (``cache_bytes``), until :meth:`release`."""
        self._keeper.hold(task_id)

    def release(self, task_id: str) -> None:
        """The writer :meth:`hold` announced stopped: a snapshot if the policy asks for one, and what
        the log remembers of the task counts against the budget again, its calls' records put away
        once no run holds it (:meth:`~tether.log.memory.Entry.put_away`): read from their events
        when asked for, as after a load."""
        self._keeper.release(task_id)

    def write_snapshot(self, task_id: str, state: TaskState) -> None:
        """Store ``state`` as the snapshot at its version, whatever the policy says (loads start from it);
        nothing when the one stored there already says the same (compared byte for byte)."""
        self._keeper.write_snapshot(task_id, state)

    def put_stream_snapshot(
        self, stream_id: str, seq: int, schema: int, data: str | bytes, *, replaces: int | None = None
    ) -> None:
        """Store a snapshot (with its checksum) of one of tether's own streams at ``seq``, text or bytes
        (read back as stored); nothing when the one stored there already says the same (compared
        byte for byte) and none other is to go."""
        self._keeper.put_stream_snapshot(stream_id, seq, schema, data, replaces=replaces)

    def intact_snapshot(
        self, stream_id: str, upto: int | None, parse: Callable[[SnapshotRow], _T]
    ) -> tuple[SnapshotRow | None, _T | None]:
        """The newest intact snapshot of a stream at or before ``upto`` (see
        :func:`tether.log.snapshots.intact_snapshot`): tasks' states and tether's own streams'
        views (sessions) share this one mechanism."""
        return self._keeper.intact_snapshot(stream_id, upto, parse)

    def latest(
        self, stream_id: str, parse: Callable[[SnapshotRow], _T]
    ) -> tuple[SnapshotRow | None, _T | None, Sequence[Recorded]]:
        """A stream's newest intact snapshot (read by ``parse``, as in :meth:`intact_snapshot`) and
        the decoded events after it, in one store read when the newest snapshot is good."""
        return self._keeper.latest(stream_id, parse)

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
        _, state = self.create_record(
            type=type, inputs=inputs, task_id=task_id, user_id=user_id, session_id=session_id, phases=phases,
            data=data, data_version=data_version,
        )  # fmt: skip
        return state

    def create_record(
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
        holder: tuple[str, float] | None = None,
        trace: str | None = None,
    ) -> tuple[Recorded, TaskState]:
        """:meth:`create`, returning the task's first record with its state. With ``holder=(owner,
        ttl)`` the task is created leased to ``owner`` for ``ttl`` seconds, its lease token 1: a run
        that creates the task it runs holds it from its first moment, with no second write (and no
        worker can claim it in between). ``trace``: the creator's trace context (W3C ``traceparent``),
        which the task's runs join."""
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
            trace=trace,
        )
        now = time.time()
        rec = Recorded(1, now, event)
        state = apply(None, rec)
        encoded = self.encode(event)
        row = new_row(self.tenant, task_id, type, user_id, session_id, now, version=1, state=state)
        if holder is not None:
            owner, ttl = holder
            row = replace(row, lease_owner=owner, lease_expires=now + ttl, lease_token=1)
        self.store.create_task(self.tenant, row, EventRow(1, event.event_type, event.version, now, encoded))
        entry = Entry(state, 0, 0, len(encoded))
        entry.created = now
        entry.head.written = row.head
        self._memory.remember(task_id, entry)
        return rec, state

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
        memory = self._memory
        lock = memory.lock(task_id)  # what the log remembers of the task changes under its lock
        lock.acquire()  # (not ``with``: a call's two appends take it; two plain calls skip the context protocol)
        try:
            entry = memory.get(task_id)
            if entry is None or entry.version != expected_version:
                entry = self._entry(task_id, expected_version, fence)
            batch: Staged | None = None
            try:
                if len(events) == 1 and type(events[0]) in ALONE:  # a call's intent or result, most often
                    row, rec, opening, update = stage_alone(
                        task_id, events[0], entry, expected_version + 1, self.max_event_bytes
                    )
                    self.store.append(self.tenant, task_id, [row], expected_version, fence=fence, index=update)
                else:
                    batch = stage(task_id, events, entry, expected_version, self.max_event_bytes)
                    rows, update = batch.rows, batch.update
                    self.store.append(self.tenant, task_id, rows, expected_version, fence=fence, index=update)
            except BaseException:
                # What happened is for the store to say, on the next read; a refused stage may have
                # moved the entry's head (a one-event stage moves it in place).
                self.forget(task_id)
                raise
            if batch is not None:
                return self._settle(task_id, entry, batch, expected_version, snapshot)
            entry.wrote(rec, row, opening)
            return self._snapshot_due(task_id, entry, expected_version + 1, snapshot)
        finally:
            lock.release()

    def append_together(
        self,
        appends: Sequence[tuple[str, Sequence[Event], int]],
        *,
        fences: Mapping[str, int] | None = None,
        snapshot: bool = True,
    ) -> list[int]:
        """Append to several tasks in one transaction — every task's events land, or none do —
        each ``(task_id, events, expected_version)`` checked and staged as :meth:`append` does before
        anything is written; ``fences`` maps a task to the lease token its append is fenced by.
        Returns each task's new version, in order. The first refusal is raised, nothing written.
        ``snapshot=False``: no snapshot now, whatever the policy says (a run snapshots when it stops).
        """
        task_ids = [task_id for task_id, _, _ in appends]
        if len(set(task_ids)) != len(task_ids):
            raise InvalidInputError(f"append_together() names a task twice: {task_ids}; give each task once")
        locks = {id(lock): lock for lock in map(self._memory.lock, task_ids)}
        with ExitStack() as held:
            for key in sorted(locks):  # one order for every caller: two of these never wait on each other
                held.enter_context(locks[key])
            staged = []
            try:
                for task_id, events, expected_version in appends:
                    if not events:
                        raise InvalidInputError("append_together() needs at least one event per task")
                    entry = self._entry(task_id, expected_version, (fences or {}).get(task_id))
                    batch = stage(task_id, events, entry, expected_version, self.max_event_bytes)
                    staged.append((task_id, entry, batch, expected_version))
                fence = (fences or {}).get
                parts = [StreamAppend(t, b.rows, v, fence=fence(t), index=b.update) for t, _, b, v in staged]
                self.store.append_streams(self.tenant, parts)
            except BaseException:
                for task_id in task_ids:  # as append() does: a stage may have moved an entry's head
                    self.forget(task_id)
                raise
            return [self._settle(t, entry, batch, v, snapshot) for t, entry, batch, v in staged]

    def _settle(self, task_id: str, entry: Entry, batch: Staged, expected_version: int, snapshot: bool) -> int:
        """After a staged batch is written: what the log remembers of the task moves on with it."""
        if batch.base is not None:
            entry.base = batch.base
            entry.pending = batch.pending
        else:
            entry.pending += batch.pending
        seq = expected_version + len(batch.rows)
        entry.version = seq
        entry.head = batch.head
        if batch.opening:
            entry.opened().update(batch.opening)
        entry.took(batch.rows)
        return self._snapshot_due(task_id, entry, seq, snapshot)

    def _snapshot_due(self, task_id: str, entry: Entry, seq: int, snapshot: bool) -> int:
        """After an append up to ``seq``: a snapshot if the policy asks for one (unless ``snapshot`` is
        off); the version, returned."""
        if snapshot and seq - entry.snap_seq >= self.snapshots.every:
            self._keeper.maybe_snapshot(task_id, entry)
        return seq

    def fork(
        self,
        task_id: str,
        at: int,
        *,
        new_id: str | None = None,
        inputs: dict[str, Any] | None = None,
        session_id: str | None = None,
        at_state: TaskState | None = None,
        actor: str | None = None,
    ) -> TaskState:
        """A new task sharing ``task_id``'s events up to ``at`` — by reference, O(1) — then its own.

        ``session_id``: the fork's own conversation (a branch of its parent's), when it has one.
        ``at_state``: the parent's state at ``at``, when the caller has it already.
        ``actor``: who forked it, recorded in the fork's first event.
        """
        check_int(at, "at", low=1)
        parent = self.task_row(task_id, "forked")
        if not 1 <= at <= parent.version:
            raise SequenceError(task_id, at, parent.version)
        new_id = uuid.uuid4().hex if new_id is None else check_task_id(new_id, "new_id")
        # Fold the fork's first event onto the parent's state before writing it: a fork that could
        # not be read back is refused with nothing written. That fold is the fork's state.
        base = at_state if at_state is not None and at_state.version == at else self.state_at(task_id, at)
        row, first, state = self._fork_records(
            new_id,
            parent_id=task_id,
            at=at,
            type=parent.type,
            user_id=parent.user_id,
            session_id=session_id or base.session_id,  # as of the fork point: not what the parent named later
            inputs=inputs,
            own_session=session_id,
            actor=actor,
            base=base,
        )
        assert state is not None
        self.store.create_task(self.tenant, row, first)
        # Not kept as the fork's state in memory: its calls are read through the parent's name, which
        # a rewind of the parent gives to another branch; a load of the fork reads them through its own.
        return state

    def fork_stream(self, stream_id: str, at: int, *, new_id: str) -> str:
        """Branch one of tether's own streams (a session) at ``at``: one row and one event, by reference."""
        check_int(at, "at", low=1)
        parent = self.get(stream_id)
        if not 1 <= at <= parent.version:
            raise SequenceError(stream_id, at, parent.version)
        row, first, _ = self._fork_records(
            new_id,
            parent_id=stream_id,
            at=at,
            type=parent.type,
            user_id=parent.user_id,
            session_id=parent.session_id,
        )
        # The branch is the stream's kind of row (a session is open or closed), never a task's: no worker
        # claims it, and a listing of sessions reads it as its parent reads.
        self.store.create_task(self.tenant, replace(row, status=parent.status), first)
        return new_id

    def task_row(self, task_id: str, verb: str) -> TaskRow:
        """The index row of a task, refusing tether's own streams (sessions, user documents)."""
        row = self.get(task_id)
        if row.type.startswith("tether."):
            raise InvalidInputError(
                f"{task_id!r} is one of tether's own streams ({row.type}), not a task; it cannot be {verb}"
            )
        return row

    def _fork_records(
        self,
        new_id: str,
        *,
        parent_id: str,
        at: int,
        type: str,
        user_id: str | None,
        session_id: str | None,
        inputs: dict[str, Any] | None = None,
        own_session: str | None = None,
        actor: str | None = None,
        base: TaskState | None = None,
    ) -> tuple[TaskRow, EventRow, TaskState | None]:
        """The index row and first event of stream ``new_id``, a fork of ``parent_id`` at ``at``, and —
        given ``base``, the parent's state at ``at`` (a task's, not a session's) — the fork's state.
        ``session_id``: the conversation its row names; ``own_session``: the one its first event gives
        it (a branch of its parent's), when it has one; ``inputs`` and ``actor``: the fork's event's."""
        now = time.time()
        event = TaskForked(
            task_id=new_id, parent_task_id=parent_id, at=at, inputs=inputs, session_id=own_session, actor=actor
        )
        first = EventRow(at + 1, event.event_type, event.version, now, self.encode(event))
        state = None if base is None else apply(base, self.decode(first))
        row = new_row(
            self.tenant, new_id, type, user_id, session_id, now, version=at + 1, parent=(parent_id, at), state=state
        )
        return row, first, state

    @_per_task
    def rewind(
        self, task_id: str, to: int, *, archive_id: str, session_id: str | None = None, actor: str | None = None
    ) -> TaskState:
        """Set the task's branch aside as ``archive_id`` and put a fork of it at ``to`` in its place.

        ``session_id``: the rewound task's own branch of its conversation, when it has one.
        ``actor``: who rewound it, recorded in both branches (the set-aside one's last event, the
        new one's first).
        """
        self.task_row(task_id, "rewound")
        current = self.load(task_id)
        if not isinstance(to, int) or isinstance(to, bool) or not 1 <= to <= current.version:
            raise SequenceError(task_id, to if isinstance(to, int) else -1, current.version)
        now = time.time()
        archived = TaskArchived(task_id=archive_id, successor=task_id, actor=actor)
        row, forked, _ = self._fork_records(
            task_id,
            parent_id=archive_id,
            at=to,
            type=current.type,
            user_id=current.user_id,
            session_id=session_id or current.session_id,
            own_session=session_id,
            actor=actor,
            base=self.state_at(task_id, to),
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
    def load_as_writer(self, task_id: str, version: int) -> TaskState:
        """The latest state, for the writer that took it to ``version`` (it holds the lease, nobody else
        appends): from this log's memory when it holds that version — no query at all — else ``load``."""
        entry = self._memory.get(task_id)
        if entry is not None and entry.version == version:
            return entry.state
        return self.load(task_id)

    # ----------------------------------------------------------------- reading
    @_per_task
    def load(self, task_id: str) -> TaskState:
        """The latest state: the nearest good snapshot plus the events after it.

        What this log remembers of the task is checked against the store's index row first (one
        cheap read): if another process rewound or deleted and re-created the task, the memory is
        of another stream and is dropped, never trusted.
        """
        entry = self._memory.get(task_id)
        row: TaskRow | None = None
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
                self._memory.touch(task_id)
                return entry.state
        if entry is not None:
            rows = self.store.read_events(self.tenant, task_id, after=entry.version)
            if rows:
                entry.pending.extend(self.decode_all(rows))
                entry.version = rows[-1].seq
                entry.took(rows)
                state = entry.state
                entry.drop_opened()  # listed again when next needed
                # The row's head is known to be this state's only when the row is of the same version.
                written = row.head if row is not None and row.version == entry.version else None
                entry.head = HeadTracker.of(state, written)
                self._keeper.maybe_snapshot(task_id, entry)
            self._memory.touch(task_id)
            return entry.state
        entry = self._load_entry(task_id, upto=None)
        self._memory.remember(task_id, entry)
        self._keeper.maybe_snapshot(task_id, entry)
        return entry.state

    def state_at(self, task_id: str, seq: int) -> TaskState:
        """The state right after event ``seq`` (1 = just created)."""
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise InvalidInputError(f"seq must be an integer, got {type(seq).__name__}")
        last = self.version(task_id)
        if seq < 1 or seq > last:
            raise SequenceError(task_id, seq, last)
        state, _, _ = self._folded(task_id, seq)
        return state

    def events(self, task_id: str, *, after: int = 0, upto: int | None = None) -> list[Recorded]:
        """Decoded events with ``after < seq <= upto``."""
        check_id(task_id, "task_id")
        if after < 0 or (upto is not None and upto < after):
            raise SequenceError(task_id, upto if upto is not None else after, self.version(task_id))
        return self.decode_all(self.store.read_events(self.tenant, task_id, after=after, upto=upto))

    def version(self, task_id: str) -> int:
        return self.get(task_id).version

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
        flt = TaskFilter(
            status=check_statuses(status),
            type=type,
            user_id=user_id,
            session_id=session_id,
            created_after=epoch(created_after),
            created_before=epoch(created_before),
        )
        return self.store.list_tasks(self.tenant, flt, limit=limit, offset=offset)

    # ----------------------------------------------------------------- internals
    def _entry(self, task_id: str, expected_version: int, fence: int | None = None) -> Entry:
        """What the log remembers of the task, at ``expected_version``, or the refusal the store would
        give: a writer holding ``fence`` whose lease another process took meets :class:`LeaseLostError`
        here too (where the log knows the newer version without asking the store to write)."""
        entry = self._memory.get(task_id)
        if entry is None or entry.version != expected_version:
            entry = self._load_entry(task_id, upto=None)
            self._memory.remember(task_id, entry)
            if entry.version != expected_version:
                row = self.store.get_task(self.tenant, task_id) if fence is not None else None
                if fence is not None and row is not None and row.lease_token != fence:
                    raise LeaseLostError(task_id, token=fence, current=row.lease_token)
                raise ConflictError(task_id, expected=expected_version, actual=entry.version)
        return entry

    def _load_entry(self, task_id: str, *, upto: int | None) -> Entry:
        state, snapshot, rows = self._folded(task_id, upto)
        entry = Entry(state, snapshot.seq if snapshot else 0, len(snapshot.data) if snapshot else 0, 0)
        entry.took(rows)
        return entry

    def _folded(self, task_id: str, upto: int | None) -> tuple[TaskState, SnapshotRow | None, Sequence[EventRow]]:
        """The state after ``upto`` (``None``: the latest), the snapshot it started from and the events after."""
        snapshot, base = self._keeper.good_snapshot(task_id, upto)
        rows = self.store.read_events(self.tenant, task_id, after=snapshot.seq if snapshot else 0, upto=upto)
        if base is None and not rows:
            raise TaskNotFoundError(task_id, tenant=self.tenant)
        return fold(self.decode_all(rows), base), snapshot, rows

    def forget(self, task_id: str) -> None:
        """Drop what this log cached about a task (the store is untouched)."""
        self._memory.forget(task_id)
