"""``memory://`` — the in-process backend, for tests and notebooks.

Same rules as every backend (it passes the same conformance suite); nothing
survives the process. Thread-safe: one lock around every operation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from tether.errors import ConflictError, LeaseLostError, TaskNotFoundError
from tether.store.base import (
    COMPLETES,
    FINISHED,
    WORKERS_KEPT,
    ChangeSignal,
    Closing,
    EventRow,
    IndexUpdate,
    LedgerRow,
    Position,
    SnapshotRow,
    StreamAppend,
    TaskFilter,
    TaskRow,
    WorkerRow,
    check_batch,
    check_streams,
    read_across_forks,
)

__all__ = ["MemoryStore"]


@dataclass
class _Stream:
    row: TaskRow
    events: list[EventRow] = field(default_factory=list)
    snapshots: dict[int, SnapshotRow] = field(default_factory=dict)


def _moved(row: TaskRow, events: Sequence[EventRow], index: IndexUpdate | None) -> TaskRow:
    """The index row after ``events`` (and ``index``): as the SQL backends move it."""
    calls_done = row.calls_done + sum(1 for e in events if e.type == COMPLETES)
    changes: dict[str, object] = {"version": events[-1].seq, "updated_at": events[-1].at, "calls_done": calls_done}
    if index is not None:
        if index.moves:
            changes["status"] = index.status if index.status is not None else row.status
            changes["wake_at"] = index.wake_at
            changes["parked"] = None
        if index.head is not None:
            head = index.head
            changes.update(calls_done=head.calls_done, summary=head.summary, output=head.output)
        if index.session_id is not None and row.session_id is None:
            changes["session_id"] = index.session_id
    return replace(row, **changes)  # type: ignore[arg-type]


class MemoryStore(Closing):
    """Keeps everything in dictionaries.

    Example:
        >>> from tether.store import open_store
        >>> store = open_store("memory://")
        >>> store.list_tasks("default", TaskFilter())
        []
    """

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._lock = threading.Lock()
        self._changes = ChangeSignal()
        self._tasks: dict[tuple[str, str], _Stream] = {}
        self._ledger: dict[tuple[str, str], LedgerRow] = {}
        self._workers: dict[tuple[str, str], WorkerRow] = {}

    # -- streams ----------------------------------------------------------------
    def _stream(self, tenant: str, task_id: str) -> _Stream:
        stream = self._tasks.get((tenant, task_id))
        if stream is None:
            raise TaskNotFoundError(task_id, tenant=tenant)
        return stream

    def _version(self, stream: _Stream) -> int:
        if stream.events:
            return stream.events[-1].seq
        return stream.row.parent_seq or 0

    def create_task(self, tenant: str, row: TaskRow, first: EventRow) -> None:
        with self._lock:
            if (tenant, row.task_id) in self._tasks:
                raise ConflictError(row.task_id, expected=0, actual=None)
            if row.parent_id is not None:
                self._stream(tenant, row.parent_id)
            row = replace(row, version=first.seq, updated_at=first.at)
            self._tasks[(tenant, row.task_id)] = _Stream(row=row, events=[first])
        self._touch()

    def append(
        self,
        tenant: str,
        task_id: str,
        events: Sequence[EventRow],
        expected_version: int,
        *,
        fence: int | None = None,
        index: IndexUpdate | None = None,
    ) -> None:
        check_batch(task_id, events, expected_version)
        with self._lock:
            stream = self._guarded(tenant, task_id, expected_version, fence)
            self._extend(stream, events, fence, index)
        self._touch()

    def append_streams(self, tenant: str, appends: Sequence[StreamAppend]) -> None:
        check_streams(appends)
        with self._lock:  # every guard first, then every write: a refusal leaves all untouched
            streams = [self._guarded(tenant, a.task_id, a.expected_version, a.fence) for a in appends]
            for stream, part in zip(streams, appends, strict=True):
                self._extend(stream, part.events, part.fence, part.index)
        self._touch()

    def _guarded(self, tenant: str, task_id: str, expected_version: int, fence: int | None) -> _Stream:
        """The stream an append may write: it exists, ``fence`` is its lease token, it is at ``expected_version``."""
        stream = self._stream(tenant, task_id)
        if fence is not None and stream.row.lease_token != fence:
            raise LeaseLostError(task_id, token=fence, current=stream.row.lease_token)
        actual = self._version(stream)
        if actual != expected_version:
            raise ConflictError(task_id, expected=expected_version, actual=actual)
        return stream

    def _extend(
        self, stream: _Stream, events: Sequence[EventRow], fence: int | None, index: IndexUpdate | None
    ) -> None:
        stream.events.extend(e._replace(fence=fence) for e in events)
        stream.row = _moved(stream.row, events, index)

    def compact(self, tenant: str, task_id: str, expected_version: int, events: Sequence[EventRow]) -> int:
        check_batch(task_id, events, expected_version)
        with self._lock:
            stream = self._guarded(tenant, task_id, expected_version, None)
            self._refuse_if_forked(tenant, task_id)
            gone = len(stream.events)
            stream.events = list(events)
            stream.snapshots.clear()
            stream.row = _moved(replace(stream.row, parent_id=None, parent_seq=None), events, None)
        self._touch()
        return gone

    def rewind(
        self,
        tenant: str,
        task_id: str,
        expected_version: int,
        *,
        archive_id: str,
        archived: EventRow,
        fork: TaskRow,
        forked: EventRow,
    ) -> None:
        with self._lock:
            stream = self._stream(tenant, task_id)
            actual = self._version(stream)
            if actual != expected_version:
                raise ConflictError(task_id, expected=expected_version, actual=actual)
            if (tenant, archive_id) in self._tasks:
                raise ConflictError(archive_id, expected=0, actual=None)
            del self._tasks[(tenant, task_id)]
            set_aside = replace(stream.row, task_id=archive_id, wake_at=None, lease_owner=None, lease_expires=None)
            if set_aside.status not in FINISHED:  # inert, as the store's rename_task makes it
                set_aside = replace(set_aside, status="cancelled")
            stream.row = _moved(set_aside, [archived], None)
            stream.events.append(archived)
            self._tasks[(tenant, archive_id)] = stream
            # Children keep pointing at the branch, wherever it now lives.
            for (t, _), other in self._tasks.items():
                if t == tenant and other.row.parent_id == task_id and other is not stream:
                    other.row = replace(other.row, parent_id=archive_id)
            row = replace(fork, parent_id=archive_id, version=forked.seq, updated_at=forked.at)
            self._tasks[(tenant, task_id)] = _Stream(row=row, events=[forked])
        self._touch()

    def read_events(self, tenant: str, task_id: str, *, after: int = 0, upto: int | None = None) -> list[EventRow]:
        with self._lock:
            return self._read(tenant, task_id, after, upto)

    def _read(self, tenant: str, task_id: str, after: int, upto: int | None) -> list[EventRow]:
        def parent_of(stream: _Stream) -> tuple[_Stream, int] | None:
            row = stream.row
            if row.parent_id is None or row.parent_seq is None:
                return None
            return self._stream(tenant, row.parent_id), row.parent_seq

        def segment(stream: _Stream, low: int, last: int | None) -> list[EventRow]:
            return [e for e in stream.events if e.seq > low and (last is None or e.seq <= last)]

        return read_across_forks(self._stream(tenant, task_id), after, upto, parent_of, segment)

    def get_task(self, tenant: str, task_id: str) -> TaskRow | None:
        with self._lock:
            stream = self._tasks.get((tenant, task_id))
            return None if stream is None else stream.row

    def delete_task(self, tenant: str, task_id: str) -> int:
        with self._lock:
            stream = self._stream(tenant, task_id)
            self._refuse_if_forked(tenant, task_id)
            del self._tasks[(tenant, task_id)]
            return len(stream.events)

    def _refuse_if_forked(self, tenant: str, task_id: str) -> None:
        """A stream whose events forks read by reference can be neither deleted nor compacted."""
        if any(t == tenant and other.row.parent_id == task_id for (t, _), other in self._tasks.items()):
            raise ConflictError(task_id, expected=0, actual=None)

    def list_tasks(self, tenant: str, flt: TaskFilter, *, limit: int = 100, offset: int = 0) -> list[TaskRow]:
        with self._lock:
            rows = [s.row for (t, _), s in self._tasks.items() if t == tenant and _matches(s.row, flt)]
        rows.sort(key=lambda r: (r.created_at, r.task_id), reverse=True)
        return rows[offset : offset + limit]

    def count_tasks(self, tenant: str, flt: TaskFilter, *, cap: int) -> int:
        with self._lock:
            return min(cap, sum(1 for (t, _), s in self._tasks.items() if t == tenant and _matches(s.row, flt)))

    def stream_positions(self, tenant: str, type: str, prefix: str, *, user_id: str | None = None) -> list[Position]:
        flt = TaskFilter(type=type, user_id=user_id)
        with self._lock:
            return [
                Position(s.row.task_id, s.row.created_at, s.row.version)
                for (t, task_id), s in self._tasks.items()
                if t == tenant and task_id.startswith(prefix) and _matches(s.row, flt)
            ]

    # -- snapshots --------------------------------------------------------------
    def put_snapshot(self, tenant: str, task_id: str, snapshot: SnapshotRow, *, replaces: int | None = None) -> None:
        with self._lock:
            snapshots = self._stream(tenant, task_id).snapshots
            snapshots[snapshot.seq] = snapshot
            if replaces is not None and replaces != snapshot.seq:
                snapshots.pop(replaces, None)

    def get_snapshot(self, tenant: str, task_id: str, *, at_most: int) -> SnapshotRow | None:
        with self._lock:
            stream = self._stream(tenant, task_id)
            seqs = [seq for seq in stream.snapshots if seq <= at_most]
            return stream.snapshots[max(seqs)] if seqs else None

    def read_latest(self, tenant: str, task_id: str) -> tuple[SnapshotRow | None, list[EventRow]]:
        snap = self.get_snapshot(tenant, task_id, at_most=2**62)  # appends after it are read too
        return snap, self.read_events(tenant, task_id, after=snap.seq if snap else 0)

    # -- idempotency ledger -----------------------------------------------------
    def ledger_get(self, tenant: str, key: str) -> LedgerRow | None:
        with self._lock:
            return self._ledger.get((tenant, key))

    def ledger_begin(self, tenant: str, key: str, now: float) -> LedgerRow:
        with self._lock:
            row = self._ledger.get((tenant, key))
            if row is None:
                self._ledger[(tenant, key)] = LedgerRow(key, "started", None, now, None, 1)
                return LedgerRow(key, "new", None, now, None, 0)
            if row.status == "started":
                self._ledger[(tenant, key)] = replace(row, runs=row.runs + 1)
            return row

    def ledger_finish(self, tenant: str, key: str, result: str | bytes, now: float) -> LedgerRow:
        with self._lock:
            row = self._ledger.get((tenant, key))
            if row is not None and row.status == "done":
                return row
            started = row.started_at if row else now
            runs = row.runs if row else 1
            done = LedgerRow(key, "done", result, started, now, runs)
            self._ledger[(tenant, key)] = done
            return done

    def ledger_forget(self, tenant: str, key: str) -> None:
        with self._lock:
            self._ledger.pop((tenant, key), None)

    # -- leases -----------------------------------------------------------------
    def acquire_lease(
        self,
        tenant: str,
        task_id: str,
        owner: str,
        ttl: float,
        now: float,
        *,
        steal_from: str | None = None,
        at_version: int | None = None,
    ) -> int | None:
        with self._lock:
            stream = self._stream(tenant, task_id)
            row = stream.row
            held = row.held_by(now) is not None
            moved = at_version is not None and row.version != at_version
            if held and (steal_from is None or row.lease_owner != steal_from or moved):
                return None
            token = row.lease_token + 1
            stream.row = replace(row, lease_owner=owner, lease_expires=now + ttl, lease_token=token)
            return token

    def claim(self, tenant: str, owner: str, ttl: float, now: float) -> tuple[str, int] | None:
        with self._lock:
            due = []
            for (t, task_id), stream in self._tasks.items():
                row = stream.row
                if t != tenant or row.held_by(now) is not None or row.type.startswith("tether.") or row.parked:
                    continue  # tasks only, not parked: tether's own streams are never run (as _sql.LISTED says it)
                at = row.due_at
                if at is not None and at <= now:
                    due.append((at, task_id))
            if not due:
                return None
            _, task_id = min(due)
            stream = self._tasks[(tenant, task_id)]
            token = stream.row.lease_token + 1
            stream.row = replace(stream.row, lease_owner=owner, lease_expires=now + ttl, lease_token=token)
            return task_id, token

    def lease_holders(self, tenant: str, prefix: str, now: float) -> list[tuple[str, str]]:
        holders: dict[str, str] = {}
        with self._lock:
            for (t, task_id), stream in self._tasks.items():
                row = stream.row
                owner = row.held_by(now)
                if t != tenant or owner is None or not owner.startswith(prefix) or row.type.startswith("tether."):
                    continue
                at = row.due_at
                if at is not None and at <= now and task_id < holders.get(owner, "\U0010ffff"):
                    holders[owner] = task_id
        return list(holders.items())

    def record_worker(self, tenant: str, worker: WorkerRow) -> None:
        with self._lock:
            self._workers[(tenant, worker.worker_id)] = worker
            oldest = worker.seen_at - WORKERS_KEPT
            for key in [k for k, w in self._workers.items() if k[0] == tenant and w.seen_at < oldest]:
                del self._workers[key]

    def workers(self, tenant: str, *, seen_after: float = 0.0, limit: int = 20) -> list[WorkerRow]:
        with self._lock:
            found = [w for (t, _), w in self._workers.items() if t == tenant and w.seen_at > seen_after]
        return sorted(found, key=lambda w: (-w.seen_at, w.worker_id))[:limit]

    def park(self, tenant: str, task_id: str, version: int, reason: str) -> bool:
        with self._lock:
            stream = self._tasks.get((tenant, task_id))
            if stream is None or stream.row.version != version:
                return False
            stream.row = replace(stream.row, parked=reason)
            return True

    def renew_lease(self, tenant: str, task_id: str, token: int, ttl: float, now: float) -> bool:
        with self._lock:
            stream = self._stream(tenant, task_id)
            if stream.row.lease_token != token or stream.row.lease_owner is None:
                return False
            stream.row = replace(stream.row, lease_expires=now + ttl)
            return True

    def release_lease(self, tenant: str, task_id: str, token: int) -> None:
        with self._lock:
            stream = self._stream(tenant, task_id)
            if stream.row.lease_token == token:
                stream.row = replace(stream.row, lease_owner=None, lease_expires=None)
        self._touch()

    def wait_for_change(
        self, timeout: float, *, interrupt: threading.Event | None = None, claimable: bool = False
    ) -> bool:
        return self._changes.wait(timeout, interrupt)

    def _touch(self) -> None:
        self._changes.bump()

    def close(self) -> None:
        pass


def _matches(row: TaskRow, flt: TaskFilter) -> bool:
    return (
        (flt.type is not None or flt.internal or not row.type.startswith("tether."))
        and (flt.status is None or row.status in flt.status)
        and (flt.type is None or row.type == flt.type)
        and (flt.user_id is None or row.user_id == flt.user_id)
        and (flt.session_id is None or row.session_id == flt.session_id)
        and (flt.created_after is None or row.created_at >= flt.created_after)
        and (flt.created_before is None or row.created_at < flt.created_before)
        and (flt.id_prefix is None or row.task_id.startswith(flt.id_prefix))
        and (flt.forks_of is None or row.parent_id == flt.forks_of)
    )
