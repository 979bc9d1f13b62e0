"""How a task log keeps and finds snapshots: when to write one (the policy), the partial snapshots
kept of a growing state, and the newest intact snapshot at or before a seq.

A state that grows with its calls is written whole (a *full* snapshot) only now and then, and the
one before is then cut down to a *partial* snapshot: the state without its calls, and their count.
A partial snapshot's calls are those of a later full snapshot of the same stream, as they stood at
its seq (:meth:`tether.model.CallList.upto`). So a task of 100,000 calls keeps one copy of its
calls' index, and a partial snapshot every few hundred events: time travel to any seq starts from
the partial snapshot before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from tether.errors import TetherError
from tether.events import Recorded, fold
from tether.log.call_reads import EventCalls, call_reader
from tether.log.memory import Entry, Memory
from tether.log.snapshots import (
    PARTIAL_SHARE,
    CallsLine,
    SnapshotPolicy,
    first_lines_intact,
    intact_snapshot,
    newest_calls,
    parse_state,
    partial_of,
    read_if_intact,
    snapshot_row,
    state_data,
)
from tether.model import STATE_SCHEMA_VERSION, TaskState
from tether.model.calls import CallList
from tether.store import EventRow, SnapshotRow, Store

__all__ = ["SnapshotKeeper"]

_T = TypeVar("_T")


class SnapshotKeeper:
    """The snapshots of one task log: when to write one, the partial ones kept of a growing state, the
    newest intact one at or before a seq. A part :class:`tether.TaskLog` holds (its public methods
    are the log's, documented there)."""

    def __init__(
        self,
        store: Store,
        tenant: str,
        policy: SnapshotPolicy,
        memory: Memory,
        decode: Callable[[EventRow], Recorded],
        decode_all: Callable[[Iterable[EventRow]], list[Recorded]],
    ) -> None:
        self.store = store
        self.tenant = tenant
        self.policy = policy
        self._memory = memory
        self.decode = decode
        self.decode_all = decode_all

    # ----------------------------------------------------------------- writing
    def maybe_snapshot(self, task_id: str, entry: Entry) -> None:
        policy = self.policy
        if not policy.due(entry.version - entry.snap_seq, entry.bytes_since, entry.snap_size):
            return
        state = entry.state  # folds what is pending, keeping partial snapshots on the way (``Entry.settle``)
        partials = [(seq, data) for seq, data in entry.partials if seq < state.version]  # not over the full one
        entry.partials = []
        data = state_data(state)
        grown = len(data) - entry.snap_size
        if entry.snap_seq and policy.replaces_last(grown, entry.kept_since, entry.bytes_since):
            # The one before is cut down to a partial one (the new one holds its calls too); it is dropped
            # when that is not known here or is big beside the calls since. Either way it goes only
            # when it is this task's own (a fork may start from its parent's: nothing there is its own).
            partial = entry.snap_partial
            if partial is None or len(partial) * PARTIAL_SHARE > entry.kept_since:
                self._put_snapshot(task_id, entry.version, data, replaces=entry.snap_seq)
            else:
                self._put_snapshot(task_id, entry.version, data)
                partials.insert(0, (entry.snap_seq, partial))
        else:
            self._put_snapshot(task_id, entry.version, data)
        for seq, partial in partials:  # after the full one they take their calls from, never before it
            self.store.put_snapshot(self.tenant, task_id, snapshot_row(seq, STATE_SCHEMA_VERSION, partial))
        entry.snap_seq = entry.version
        entry.snap_partial = partial_of(data, state.calls)
        entry.taken += entry.bytes_since  # still held: the state keeps what those events said
        entry.bytes_since = entry.kept_since = 0

    def snapshot_if_due(self, task_id: str) -> None:
        with self._memory.lock(task_id):
            entry = self._memory.get(task_id)
            if entry is not None:
                self.maybe_snapshot(task_id, entry)

    def hold(self, task_id: str) -> None:
        self._memory.hold(task_id)

    def release(self, task_id: str) -> None:
        try:
            self.snapshot_if_due(task_id)
        finally:
            if self._memory.let_go(task_id):
                self._put_away(task_id)

    def _put_away(self, task_id: str) -> None:
        """:meth:`~tether.log.memory.Entry.put_away` of the task's entry: only a cache's shape, so a
        store that fails to say which stream it is leaves the records where they are, and says
        nothing (the run's end goes on: its lease is released)."""
        entry = self._memory.get(task_id)
        if entry is None or entry.pending or not entry.base.calls:
            return
        created = entry.created  # the stream its calls are read from; asked for outside the task's lock
        if created is None:
            try:
                row = self.store.get_task(self.tenant, task_id)
            except TetherError:
                return
            if row is None:
                return
            created = row.created_at
        with self._memory.lock(task_id):
            if self._memory.get(task_id) is entry:
                entry.created = created  # checked by the next load: a stream rewound elsewhere is read again
                # Its calls folded onto the head's light state: a state of the task with no calls, kept anyway.
                entry.put_away(EventCalls(self.store, self.tenant, task_id, self.decode, entry.head.light, created))

    def write_snapshot(self, task_id: str, state: TaskState) -> None:
        data = state_data(state)
        if not self._stored(task_id, snapshot_row(state.version, STATE_SCHEMA_VERSION, data)):
            self._put_snapshot(task_id, state.version, data)

    def _stored(self, stream_id: str, row: SnapshotRow) -> bool:
        """Whether the stream's snapshot at ``row``'s seq is ``row`` already, byte for byte: then it
        is not written again (a rewrite of the same snapshot is still a write: a reader, such as
        ``app.replay``, that caches what it read must leave the store as it found it)."""
        stored = self.store.get_snapshot(self.tenant, stream_id, at_most=row.seq)
        if stored is None or (stored.seq, stored.schema, stored.checksum) != (row.seq, row.schema, row.checksum):
            return False
        return type(stored.data) is type(row.data) and stored.data == row.data

    def _put_snapshot(self, task_id: str, version: int, data: str, *, replaces: int | None = None) -> None:
        self.store.put_snapshot(
            self.tenant, task_id, snapshot_row(version, STATE_SCHEMA_VERSION, data), replaces=replaces
        )
        entry = self._memory.get(task_id)
        if entry is not None and entry.version == version:
            entry.snap_size = len(data)

    def put_stream_snapshot(
        self, stream_id: str, seq: int, schema: int, data: str | bytes, *, replaces: int | None = None
    ) -> None:
        row = snapshot_row(seq, schema, data)
        if (replaces is None or replaces == seq) and self._stored(stream_id, row):
            return
        self.store.put_snapshot(self.tenant, stream_id, row, replaces=replaces)

    # ----------------------------------------------------------------- reading
    def good_snapshot(self, task_id: str, upto: int | None) -> tuple[SnapshotRow | None, TaskState | None]:
        """The newest snapshot at or before ``upto`` that is intact and of the current schema.

        A fork with none of its own uses its parent's (from before the fork point): the events
        after it, which ``read_events`` follows across the fork, make up the rest. A partial one takes its
        calls from the newest full snapshot of the stream it belongs to.
        """
        reader = call_reader(self.store, self.tenant, task_id, self.decode)
        fulls: dict[str, tuple[int, CallsLine] | None] = {}  # each stream's newest full snapshot's calls, read once

        def parse(snap: SnapshotRow, owner: str) -> TaskState:
            # Another stream's snapshot (a fork's parent's) is read by that stream's name when its calls
            # are first asked for: pinned as it is now, since a rewind of it gives the name to another
            # branch, whose snapshots hold none of this state's calls (then they are read from events).
            pinned = None if owner == task_id else self.store.get_task(self.tenant, owner)

            def later() -> CallsLine | None:
                if pinned is not None:
                    now = self.store.get_task(self.tenant, owner)
                    if now is None or now.created_at != pinned.created_at:
                        return None
                if owner not in fulls:
                    fulls[owner] = newest_calls(self.store, self.tenant, owner)
                full = fulls[owner]
                if full is None:
                    return None
                seq, line = full
                return line if seq > snap.seq else None

            return parse_state(snap, reader=reader, later=later, rebuild=rebuild)

        def rebuild(seq: int) -> CallList:  # the calls at ``seq``, when a snapshot's index is unusable
            return fold(self.decode_all(self.store.read_events(self.tenant, task_id, upto=seq))).calls

        return intact_snapshot(self.store, self.tenant, task_id, upto, parse, first_lines_intact)

    def intact_snapshot(
        self, stream_id: str, upto: int | None, parse: Callable[[SnapshotRow], _T]
    ) -> tuple[SnapshotRow | None, _T | None]:
        return intact_snapshot(self.store, self.tenant, stream_id, upto, lambda snap, _owner: parse(snap))

    def latest(
        self, stream_id: str, parse: Callable[[SnapshotRow], _T]
    ) -> tuple[SnapshotRow | None, _T | None, Sequence[Recorded]]:
        snap, rows = self.store.read_latest(self.tenant, stream_id)
        if snap is not None:
            parsed = read_if_intact(snap, parse)
            if parsed is None:  # the general path says why, and looks further back
                snap, parsed = self.intact_snapshot(stream_id, None, parse)
                rows = self.store.read_events(self.tenant, stream_id, after=snap.seq if snap else 0)
            return snap, parsed, self.decode_all(rows)
        return None, None, self.decode_all(rows)
