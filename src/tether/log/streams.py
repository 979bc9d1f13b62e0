"""tether's own streams beside tasks: sessions and user documents.

They live in the same store, in the same tables and under the same transaction
rules as tasks (type ``tether.*``, hidden from task listings), with events of
their own. This module is the little they share: create once, read, append
with optimistic concurrency.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tether.errors import ConflictError, TaskNotFoundError
from tether.events import Event, Recorded
from tether.log.tasklog import TaskLog
from tether.store import EventRow, IndexUpdate, StreamAppend, TaskRow

__all__ = ["Stream", "append_together"]


class Stream:
    """One internal stream: ``stream_id`` of ``type`` in the log's tenant."""

    def __init__(self, log: TaskLog, stream_id: str, type: str) -> None:
        self.log = log
        self.id = stream_id
        self.type = type

    def exists(self) -> bool:
        return self.log.store.get_task(self.log.tenant, self.id) is not None

    def create(
        self, first: Event, *, user_id: str | None = None, session_id: str | None = None, summary: str | None = None
    ) -> bool:
        """Create the stream with its first event (and ``summary``, its index row's head, if it keeps
        one); ``False`` if it already existed."""
        now = time.time()
        row = TaskRow(
            task_id=self.id,
            tenant=self.log.tenant,
            type=self.type,
            status="open",
            user_id=user_id,
            session_id=session_id,
            created_at=now,
            updated_at=now,
            version=1,
            summary=summary,
        )
        try:
            self.log.store.create_task(
                self.log.tenant, row, EventRow(1, first.event_type, first.version, now, self.log.encode(first))
            )
        except ConflictError:
            return False
        return True

    def version(self) -> int:
        row = self.log.store.get_task(self.log.tenant, self.id)
        if row is None:
            raise TaskNotFoundError(self.id, tenant=self.log.tenant)
        return row.version

    def read(self, after: int = 0, upto: int | None = None) -> list[Recorded]:
        rows = self.log.store.read_events(self.log.tenant, self.id, after=after, upto=upto)
        return self.log.decode_all(rows)

    def append(
        self, events: Sequence[Event], expected_version: int, *, status: str | None = None, at: float | None = None
    ) -> int:
        """Append at ``expected_version`` (``ConflictError`` if another writer got there first), stamped
        ``at`` (epoch seconds; now by default)."""
        part = self.part(events, expected_version, status=status, at=at)
        self.log.store.append(self.log.tenant, self.id, part.events, expected_version, index=part.index)
        return expected_version + len(part.events)

    def part(
        self, events: Sequence[Event], expected_version: int, *, status: str | None = None, at: float | None = None
    ) -> StreamAppend:
        """What :meth:`append` would write, encoded (refused here if it cannot be stored), for
        :func:`append_together` to write with other streams' parts."""
        now = time.time() if at is None else at
        rows = [
            EventRow(expected_version + i, e.event_type, e.version, now, self.log.encode(e))
            for i, e in enumerate(events, start=1)
        ]
        index = IndexUpdate(status=status) if status is not None else None
        return StreamAppend(self.id, rows, expected_version, index=index)


def append_together(log: TaskLog, parts: Sequence[StreamAppend]) -> list[int]:
    """Write several streams' parts (from :meth:`Stream.part`) in one transaction: all or nothing.
    A stale part raises its ``ConflictError`` (its ``task_id`` names the stream) and nothing is
    written. Returns each stream's new version, in order."""
    log.store.append_streams(log.tenant, parts)
    return [part.expected_version + len(part.events) for part in parts]
