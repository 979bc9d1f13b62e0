"""What a task log remembers of the tasks it touched: each task's folded state and what is
pending on it, in a bounded LRU, read and changed under that task's (striped) lock."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from tether.events import CALL_EVENTS, Recorded, fold
from tether.log.heads import HeadTracker
from tether.log.snapshots import PARTIAL_SHARE, partial_data
from tether.model import TaskState
from tether.model.calls import CallList, CallReader
from tether.store import EventRow

__all__ = ["Entry", "Memory", "Opened"]

CALL_EVENT_TYPES = frozenset(cls.__name__ for cls in CALL_EVENTS)

_STRIPES = 64


class Entry:
    """What the log remembers about a task it has touched.

    Appends are not folded at once: their events wait in ``pending`` and are folded,
    as one batch, when somebody reads the state. An append therefore costs the same
    at the tenth call as at the hundred-thousandth.
    """

    __slots__ = (
        "_opened",
        "base",
        "bytes_since",
        "created",
        "head",
        "kept_since",
        "partials",
        "partials_every",
        "pending",
        "snap_partial",
        "snap_seq",
        "snap_size",
        "taken",
        "version",
        "weighed",
    )

    def __init__(self, state: TaskState, snap_seq: int, snap_size: int, bytes_since: int) -> None:
        self.created: float | None = None
        """The stream's index row ``created_at``: which stream this is (a rewind elsewhere puts another
        stream under the same id, a delete and re-create too). ``None`` until first checked."""
        self.base = state
        self.pending: list[Recorded] = []
        self.version = state.version
        self._opened: Opened | None = None
        self.head = HeadTracker.of(state)
        """Where the task stands, as its index row says (kept current with every append)."""
        self.snap_seq = snap_seq
        self.snap_size = snap_size
        self.bytes_since = bytes_since
        """Bytes of the events appended since the last snapshot."""
        self.kept_since = 0
        """Of those, the bytes of call events: the state keeps them (by reference, see ``state_data``)."""
        self.partials: list[tuple[int, str]] = []
        """Partial snapshots of the state folded since the last snapshot, ``(seq, data)`` (see
        ``settle``): written with the next snapshot, which holds their calls."""
        self.partials_every = 0
        """Keep a partial snapshot every this many events at least (0: none); set by the log's memory."""
        self.snap_partial: str | None = None
        """The last snapshot cut down to a partial one (``partial_of``), when this log wrote it: what
        it becomes once a later one holds its calls."""
        self.taken = snap_size
        """Bytes of the snapshot it was loaded from and of the events it took before its last snapshot
        (``bytes_since`` counts those after; moved here when a snapshot is written, not counted
        twice on every append): see :meth:`weight`."""
        self.weighed = 0
        """Of its weight, what the memory has counted so far."""

    def took(self, rows: Sequence[EventRow]) -> None:
        """Count events written or read (another writer's) towards the next snapshot: their bytes,
        and of those the call events' (the state keeps them, by reference)."""
        for row in rows:
            size = len(row.data)
            self.bytes_since += size
            if row.type in CALL_EVENT_TYPES:
                self.kept_since += size

    def wrote(self, rec: Recorded, row: EventRow, opening: set[int]) -> None:
        """A one-event append (:func:`tether.log.staging.stage_alone`) was written: its event is pending,
        the calls it opens are opened, its bytes counted. (Its head moved when it was staged.)"""
        self.pending.append(rec)
        self.version = rec.seq
        if opening:
            self.opened().update(opening)
        self.took((row,))

    def weight(self) -> int:
        """About what it holds in memory, in bytes of stored JSON: its snapshot's and every event's it
        took (a call's record keeps its result; a state loaded from a snapshot reads its calls
        when asked). Counted against the log's memory's budget (see :class:`Memory`)."""
        return self.taken + self.bytes_since

    def put_away(self, reader: CallReader) -> None:
        """Its run stopped: keep its state with the calls' records left to be read by ``reader`` when
        asked for, as a state loaded from a snapshot keeps them. The records are most of what a
        folded state holds, and all of it is objects that every full collection of the cycle
        collector walks: an app that has run thousands of tasks would otherwise keep them all (as
        many as its budget admits) and walk them, its event loop stalled meanwhile. A state with
        events still to fold keeps them."""
        if self.pending:
            return
        calls = self.base.calls.unread(reader)
        if calls is not None:
            self.base = self.base.model_copy(update={"calls": calls})
            self.drop_opened()  # made from the records' list: made again from this one when asked

    def opened(self) -> Opened:
        """The ordinals of the calls opened, the pending events' too (what an append is checked
        against): made from the state when first needed. (A method, not a property: every append
        asks, and a property's getter is called from C, off the interpreter's fast path for a call.)"""
        opened = self._opened
        if opened is None:
            opened = self._opened = Opened(self.state.calls)
        return opened

    def drop_opened(self) -> None:
        """Forget the calls opened: made again from the state when next asked."""
        self._opened = None

    @property
    def state(self) -> TaskState:
        if self.pending:
            self.settle()
        return self.base

    def settle(self) -> None:
        """Fold the pending events. For a state that keeps its calls (most of the bytes since the last
        snapshot are call events), keep a partial snapshot at every seq that is a multiple of
        ``partials_every`` on the way, when it is small beside the calls' bytes it spans."""
        since = self.version - self.snap_seq
        if not self.partials_every or since <= 0 or self.kept_since * 2 < self.bytes_since:
            self.base = fold(self.pending, self.base)
        else:
            room = self.kept_since / since * self.partials_every / PARTIAL_SHARE

            def keep(state: TaskState, calls: CallList) -> None:
                partial = partial_data(state, calls)
                if len(partial) <= room:
                    self.partials.append((state.version, partial))

            self.base = fold(self.pending, self.base, every=self.partials_every, mark=keep)
        self.pending = []


class Opened:
    """The ordinals of a task's calls opened: those of its state when made (its calls answer without
    reading an unread prefix's index, for a call after it; a call after the last of them, the new
    call of nearly every append, without asking them) and those opened since, added by ``update``.
    A call once opened stays opened."""

    __slots__ = ("_calls", "_last", "_since")

    def __init__(self, calls: CallList) -> None:
        self._calls = calls
        self._last = calls.last()
        self._since: set[int] = set()

    def has(self, n: int) -> bool:
        """Whether call ``n`` is opened (a method, not ``in``: ``__contains__`` is called from C, off the fast path)."""
        return n in self._since or (n <= self._last and self._calls.has(n))

    def update(self, more: set[int]) -> None:
        self._since |= more


class Memory:
    """The log's entries by task id, least recently used dropped first beyond ``size`` entries or
    beyond ``budget`` bytes (each entry's :meth:`~Entry.weight`, counted when it is remembered and again each
    time it is touched: a writer touches its task when its run stops, a reader when it loads it),
    but never one of a task that a run in this process holds. An entry dropped is only a cache
    gone: the next read loads the task from its store.

    One App is shared by threads (ctx.map, a worker's concurrency, a server's requests): what
    the log remembers of a task is read and changed under that task's lock (striped, so
    unrelated tasks rarely wait on each other), the LRU's order under its own.
    """

    def __init__(self, size: int, partials_every: int = 0, budget: int = 16 * 1024 * 1024) -> None:
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._size = size
        self._budget = budget
        self._total = 0
        """The bytes counted of the entries remembered (the sum of their ``weighed``)."""
        self._held: dict[str, int] = {}
        """The tasks runs in this process hold (see :meth:`hold`), with how many runs."""
        self.partials_every = partials_every
        """Each remembered entry keeps a partial snapshot of its state every this many events at least
        (0: none)."""
        self._stripes = [threading.RLock() for _ in range(_STRIPES)]
        self._order = threading.RLock()

    def get(self, task_id: str) -> Entry | None:
        return self._entries.get(task_id)

    def remember(self, task_id: str, entry: Entry) -> None:
        entry.partials_every = self.partials_every
        with self._order:
            old = self._entries.pop(task_id, None)
            if old is not None:
                self._total -= old.weighed
            self._entries[task_id] = entry
            entry.weighed = 0
            self._weigh(entry)

    def touch(self, task_id: str) -> None:
        """Make the task's entry the most recently used, and count what it took since last counted."""
        with self._order:
            entry = self._entries.get(task_id)
            if entry is not None:
                self._entries.move_to_end(task_id)
                self._weigh(entry)

    def _weigh(self, entry: Entry) -> None:
        """Count ``entry``'s bytes again (it was just used), then drop the least recently used entries
        while there are too many or they hold too much: never ``entry``, nor a task a run holds."""
        weight = entry.weight()
        self._total += weight - entry.weighed
        entry.weighed = weight
        entries = self._entries
        over, excess = len(entries) - self._size, self._total - self._budget
        if over <= 0 and excess <= 0:
            return
        going = []
        for task_id, other in entries.items():  # the least recently used first
            if over <= 0 and excess <= 0:
                break
            if other is not entry and task_id not in self._held:
                going.append(task_id)
                over, excess = over - 1, excess - other.weighed
        for task_id in going:
            self._total -= entries.pop(task_id).weighed

    def hold(self, task_id: str) -> None:
        """A run in this process writes the task: its entry is not dropped until :meth:`let_go` (the
        run keeps its state anyway; dropped, its next append would read the task again)."""
        with self._order:
            self._held[task_id] = self._held.get(task_id, 0) + 1

    def let_go(self, task_id: str) -> bool:
        """The run that held the task stopped: its entry counts again, as the most recently used.
        Whether no other run holds it."""
        with self._order:
            left = self._held.pop(task_id, 0) - 1
            if left > 0:
                self._held[task_id] = left
            self.touch(task_id)
            return left <= 0

    @property
    def held(self) -> tuple[int, int]:
        """How many entries are remembered and the bytes counted of them."""
        with self._order:
            return len(self._entries), self._total

    def lock(self, task_id: str) -> threading.RLock:
        return self._stripes[hash(task_id) % _STRIPES]

    def forget(self, task_id: str) -> None:
        with self._order:
            entry = self._entries.pop(task_id, None)
            if entry is not None:
                self._total -= entry.weighed
