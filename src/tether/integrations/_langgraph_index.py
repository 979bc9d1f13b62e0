"""A LangGraph thread's index row, and the listing across threads that reads it.

Every write of a thread writes, in the same transaction, the thread's newest checkpoint id (of any
namespace) into its index row (the row's head, ``{"newest": id, "version": n}`` as its summary):
the row says which checkpoints the thread may hold without its events being read.

``list(None)`` (every thread) reads the rows alone, takes the threads in the order of their newest
checkpoint and folds each only when the next checkpoint to hand out could be one of its: a listing
that stops at ``limit`` folds the threads that hold the checkpoints it hands out, not the store. A row
whose head is missing or is not its newest event's says nothing of the thread (written before tether
kept heads, by an older tether, or restated by ``prune``): such a thread is folded first.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

import orjson

from tether.events import Event
from tether.integrations._langgraph_log import CheckpointSaved, CheckpointsDeleted, Saved, ThreadView
from tether.log.streams import Stream
from tether.store import IndexUpdate, TaskHead, TaskRow

__all__ = ["Listing", "append_with_head", "create_with_head", "newest_after", "newest_in"]


# ----------------------------------------------------------------------------- the head


def newest_after(view: ThreadView, events: Sequence[Event]) -> str | None:
    """The thread's newest checkpoint id once ``events`` are appended to ``view``: exact for checkpoints
    and writes, and for one deletion; never below the truth (a listing may fold a thread for nothing,
    never skip one)."""
    if len(events) == 1 and isinstance(events[0], CheckpointsDeleted):
        gone = {(ns, cid) for ns, cid in events[0].checkpoints}
        return max((cid for ns, cid in view.checkpoints if (ns, cid) not in gone), default=None)
    newest = view.newest()
    for event in events:
        if isinstance(event, CheckpointSaved) and (newest is None or event.id > newest):
            newest = event.id
    return newest


def _head(newest: str | None, version: int) -> TaskHead:
    return TaskHead(calls_done=0, summary=orjson.dumps({"newest": newest, "version": version}).decode(), output=None)


def newest_in(row: TaskRow) -> tuple[bool, str | None]:
    """``(True, id)``: the thread of ``row`` holds no checkpoint newer than ``id`` (``None``: none at
    all). ``(False, None)``: its row does not say (no head, or one older than its newest event)."""
    if row.summary is None:
        return False, None
    try:
        head = orjson.loads(row.summary)
    except orjson.JSONDecodeError:
        return False, None
    if not isinstance(head, dict) or head.get("version") != row.version:
        return False, None
    newest = head.get("newest")
    return True, newest if isinstance(newest, str) else None


def create_with_head(stream: Stream, first: Event, newest: str | None) -> bool:
    """Create the thread's stream with its first event and its head; ``False`` if it already existed."""
    return stream.create(first, summary=_head(newest, 1).summary)


def append_with_head(stream: Stream, events: Sequence[Event], expected: int, newest: str | None) -> int:
    """Append at ``expected`` (``ConflictError`` if another writer got there first) with the head the
    thread has after ``events``, in the same transaction. Returns the new version."""
    version = expected + len(events)
    part = stream.part(events, expected)
    index = IndexUpdate(status=None, head=_head(newest, version), moves=False)
    stream.log.store.append(stream.log.tenant, stream.id, part.events, expected, index=index)
    return version


# ----------------------------------------------------------------------------- the listing


class _Found:
    """A checkpoint a listing may hand out; the heap's smallest is the newest (by id, then found first)."""

    __slots__ = ("n", "saved", "thread_id", "view")

    def __init__(self, n: int, thread_id: str, view: ThreadView, saved: Saved) -> None:
        self.n, self.thread_id, self.view, self.saved = n, thread_id, view, saved

    def __lt__(self, other: _Found) -> bool:
        return self.saved.id > other.saved.id or (self.saved.id == other.saved.id and self.n < other.n)


class Listing:
    """Checkpoints of some threads, newest first (by checkpoint id), folded thread by thread as needed,
    as they were when the rows were read (a thread whose row said nothing: when it is folded, first).

    Args:
        threads: ``(thread_id, known, newest)`` each (see :func:`newest_in`); a thread whose
            newest is not known is folded before anything is handed out.
        ns: only this namespace (``None``: every one); only: only this checkpoint id;
        before: only checkpoints whose id is below this one.
    """

    def __init__(
        self,
        threads: Sequence[tuple[str, bool, str | None]],
        *,
        ns: str | None = None,
        only: str | None = None,
        before: str | None = None,
    ) -> None:
        unknown = [t for t, known, _ in threads if not known]
        known = sorted(((newest, t) for t, ok, newest in threads if ok and newest is not None), reverse=True)
        # Threads still to fold, the next one last: each with the newest id it can hold (None: any).
        self._pending: list[tuple[str, str | None]] = [(t, n) for n, t in reversed(known)]
        self._pending += [(t, None) for t in reversed(unknown)]
        self._heap: list[_Found] = []
        self._count = 0
        self._ns, self._only, self._before = ns, only, before

    def take(
        self, n: int, view_of: Callable[[str], ThreadView], keep: Callable[[Saved], bool]
    ) -> list[tuple[str, ThreadView, Saved]]:
        """The next ``n`` checkpoints that ``keep`` keeps (fewer at the end), each with its thread's
        id and view; folds (``view_of``) only the threads one of them could come from."""
        out: list[tuple[str, ThreadView, Saved]] = []
        while len(out) < n:
            while self._pending and (not self._heap or self._must_fold(self._heap[0].saved.id)):
                self._fold(*self._pending.pop(), view_of)
            if not self._heap:
                break
            found = heapq.heappop(self._heap)
            if keep(found.saved):
                out.append((found.thread_id, found.view, found.saved))
        return out

    def _must_fold(self, candidate: str) -> bool:
        """Whether the next thread may hold a checkpoint newer than ``candidate``."""
        bound = self._pending[-1][1]
        return bound is None or bound > candidate

    def _fold(self, thread_id: str, bound: str | None, view_of: Callable[[str], ThreadView]) -> None:
        """Fold the thread and take in its checkpoints; none above ``bound``, its newest when the
        listing began: one written since (between two batches) could be newer than some handed out."""
        view = view_of(thread_id)
        ns, only, before = self._ns, self._only, self._before
        for saved in view.checkpoints.values():
            if (ns is not None and saved.ns != ns) or (only and saved.id != only):
                continue
            if (before is not None and saved.id >= before) or (bound is not None and saved.id > bound):
                continue
            self._count += 1
            heapq.heappush(self._heap, _Found(self._count, thread_id, view, saved))
