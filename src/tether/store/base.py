"""The ``Store`` protocol: the I/O every backend implements, and nothing else.

A backend stores opaque, already-encoded records and enforces the few rules that
must hold *inside* one transaction: an append lands only at the version the
caller expected (and, when a fencing token is given, only while that token is
current); a ledger key is unique. The fold, snapshot policy, checksums,
upcasting and idempotency keys live once, outside ``store/`` (see
:mod:`tether.log`).

Every method is scoped by tenant: a task id is only ever looked up together
with its tenant, so no call can see another tenant's rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from tether.errors import ConflictError, InvalidInputError, LeaseLostError, TaskNotFoundError, TetherError
from tether.model.status import TERMINAL

__all__ = [
    "COMPLETES",
    "FINISHED",
    "WORKERS_KEPT",
    "ChangeSignal",
    "EventRow",
    "IndexUpdate",
    "LedgerRow",
    "SnapshotRow",
    "Store",
    "StreamAppend",
    "TaskFilter",
    "TaskHead",
    "TaskRow",
    "WorkerRow",
    "read_across_forks",
    "redact_url",
    "refusal",
]

K = TypeVar("K")


class EventRow(NamedTuple):
    """One stored event: its place in the stream, its type and shape version, and its JSON."""

    seq: int
    type: str
    schema: int
    at: float
    data: str | bytes
    fence: int | None = None
    """The fencing token of the lease the writer held, if any: who wrote it, for audits."""


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """A cached fold of a task's events up to ``seq``; ``checksum`` covers ``data``."""

    seq: int
    schema: int
    checksum: str
    data: str | bytes
    """Text (JSON, a task's state) or bytes (a format of its writer's own, read without decoding
    text first), read back as it was stored: text as ``str``, bytes as ``bytes``, any byte value."""


COMPLETES = "CallCompleted"
"""The event type that commits a call: each one stored adds one to its task's ``calls_done``
(the index row counts committed calls as they land, so a listing shows where a task stands
without folding it; the log sends the count itself when a batch does anything else to it)."""


@dataclass(frozen=True, slots=True)
class TaskHead:
    """Where a task stands, as its index row keeps it beside the events (see :mod:`tether.log.heads`).

    The log computes it with the fold's own rules and writes it in the transaction of the append
    that changed it; a read of a task's status, position, output, waiting or failure reads this,
    never the events.
    """

    calls_done: int
    """How many of its calls are committed (status ``completed``)."""
    summary: str
    """JSON: the plan's progress (``[steps, committed]`` or ``null``), ``waiting`` and ``failure``."""
    output: str | None
    """The output's JSON; ``None`` when it has none."""


FINISHED = frozenset(status.value for status in TERMINAL)
"""The statuses a task ends in, as its index row stores them."""


@dataclass(frozen=True, slots=True)
class TaskRow:
    """The index entry of a task: what listing and claiming filter on, and where it stands.

    ``version`` and ``updated_at`` are its newest event's, kept by the store with every append;
    ``calls_done``, ``summary`` and ``output`` are its :class:`TaskHead` (``summary`` is ``None``
    for a task written before tether kept heads, until its next append).
    """

    task_id: str
    tenant: str
    type: str
    status: str
    user_id: str | None
    session_id: str | None
    created_at: float
    updated_at: float
    version: int
    parent_id: str | None = None
    parent_seq: int | None = None
    lease_owner: str | None = None
    lease_expires: float | None = None
    lease_token: int = 0
    wake_at: float | None = None
    calls_done: int = 0
    summary: str | None = None
    output: str | None = None
    parked: str | None = None
    """Why no worker runs the task until someone acts on it (``"NonDeterminismError: ..."``), or
    ``None``: set by :meth:`Store.park`, cleared by the next append that moves its status or wake-up."""

    @property
    def head(self) -> TaskHead | None:
        """The row's :class:`TaskHead`, or ``None`` when it holds none yet."""
        return None if self.summary is None else TaskHead(self.calls_done, self.summary, self.output)

    @property
    def due_at(self) -> float | None:
        """When a claim may take the task, its lease aside (every store's claim says it so: the SQL
        stores' ``_sql.DUE``): a pending or running one at its wake-up time if it has one (an answer,
        a cancel), else at its creation; a sleeping or waiting one at its wake-up time. ``None``:
        never by itself (a wait with no timeout, which its answer wakes; a finished task)."""
        if self.status in ("pending", "running"):
            return self.wake_at if self.wake_at is not None else self.created_at
        return self.wake_at if self.status in ("sleeping", "awaiting_input") else None

    def held_by(self, now: float) -> str | None:
        """Who holds the task's lease at ``now``: its owner while the lease has not expired (a lease
        with an owner and no expiry is held, as every store's claim and lease take read it), else
        ``None``. (The lease's rule, as claims and lease takes apply it; readers show :meth:`runner`.)"""
        owner = self.lease_owner
        return owner if owner is not None and (self.lease_expires is None or self.lease_expires > now) else None

    def runner(self, now: float) -> str | None:
        """Who runs the task at ``now``, as listings show it (``tether tasks``, serve): the lease's
        holder, except that a finished task is run by nobody. Its run is only giving the lease back
        (or its process died before it could): nothing more runs in it, and no run takes it over."""
        return None if self.status in FINISHED else self.held_by(now)


class Position(NamedTuple):
    """Where a stream stands, as :meth:`Store.stream_positions` reads it."""

    task_id: str
    created_at: float
    """Which stream it is (a rewind or a delete and re-create puts another under the same id)."""
    version: int


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """What :meth:`Store.list_tasks` selects. ``None`` means "any"."""

    status: tuple[str, ...] | None = None
    type: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    internal: bool = False
    """Include tether's own streams (types ``tether.*``: sessions, user documents) when no type is given."""
    id_prefix: str | None = None
    """Only tasks whose id starts with this (exactly: no pattern characters)."""
    forks_of: str | None = None
    """Only the forks made of this task (its children, not theirs)."""


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """An idempotency key: ``started`` until its result is recorded, then ``done``."""

    key: str
    status: str
    result: str | bytes | None
    started_at: float
    finished_at: float | None
    runs: int


WORKERS_KEPT = 86_400.0
"""Seconds a worker's record is kept after it was last seen: :meth:`Store.record_worker` drops older
ones, so a store keeps the workers of about a day, not every process that ever ran."""


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A worker process as it last said it was alive (:meth:`Store.record_worker`): what an inspector
    reads to say whether any worker is there to act on a task.

    Example:
        >>> WorkerRow("host:41:ab12", started_at=0.0, seen_at=30.0, app="support:app").alive(60.0, within=90.0)
        True
    """

    worker_id: str
    started_at: float
    seen_at: float
    """When it last said it was alive: its start, every heartbeat, its stop."""
    app: str | None = None
    """The app it runs as ``tether worker`` names it (``module:app``), when known."""
    stopped_at: float | None = None
    """When it stopped (a graceful stop); ``None`` while it runs or when it died without saying so."""

    def alive(self, now: float, *, within: float) -> bool:
        """Whether it ran at ``now`` as far as its record says: not stopped, seen in the last ``within`` s."""
        return self.stopped_at is None and now - self.seen_at <= within


@dataclass(frozen=True, slots=True)
class IndexUpdate:
    """Columns of the task's index row that an append changes along with its events (its version,
    last change and committed calls move with every append, without one).

    ``status=None`` leaves the status as it is (an answer to a wait only moves ``wake_at``);
    ``moves=False`` leaves status and ``wake_at`` alone (an update of the head alone). ``head``,
    when given, is written whole, after the events (its ``calls_done`` is the count after them).
    ``session_id``, when given, is the conversation the row names from then on if it names none yet
    (a task started without one, at the first use of the one made for it: a listing by
    ``session_id`` then finds the task); a row that names one keeps it.
    """

    status: str | None
    wake_at: float | None = None
    head: TaskHead | None = None
    moves: bool = True
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class StreamAppend:
    """One stream's part of :meth:`Store.append_streams`: what :meth:`Store.append` takes for one stream.

    Example:
        >>> StreamAppend("a", [EventRow(2, "DecisionMade", 1, 0.0, "{}")], 1).expected_version
        1
    """

    task_id: str
    events: Sequence[EventRow]
    expected_version: int
    fence: int | None = None
    index: IndexUpdate | None = None


class ChangeSignal:
    """A counter of changes that threads can wait on: backends that learn of commits by a push
    (their own writes in memory, LISTEN/NOTIFY in PostgreSQL) bump it; waiting workers wake."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._count = 0

    def bump(self) -> None:
        with self._condition:
            self._count += 1
            self._condition.notify_all()

    def wait(self, timeout: float, interrupt: threading.Event | None = None) -> bool:
        """Block until the next bump (``True``), ``timeout`` or ``interrupt`` (``False``)."""
        deadline = time.monotonic() + timeout
        with self._condition:
            start = self._count
            while self._count == start:
                if interrupt is not None and interrupt.is_set():
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._condition.wait(min(remaining, 0.05))  # short waits: an interrupt is seen soon
            return True


class Closing:
    """A resource closed by its ``close()``, and so a context manager, ``with`` and ``async with``
    alike: the block's end closes it, however the block ends. The async exit closes it in a thread
    (closing waits for a pool, a listener, a commit thread), so the event loop is not blocked.

    Example:
        >>> from tether.store import open_store
        >>> with open_store("memory://") as store:
        ...     store.url
        'memory://'
    """

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self: C) -> C:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        import asyncio

        await asyncio.to_thread(self.close)


C = TypeVar("C", bound=Closing)


@runtime_checkable
class Store(Protocol):
    """Durable storage for task event streams, snapshots, the ledger and leases."""

    url: str

    # -- streams ----------------------------------------------------------------
    def create_task(self, tenant: str, row: TaskRow, first: EventRow) -> None:
        """Create the task's index row and its first event, atomically.

        The row's lease is stored as given: a task created with ``lease_owner`` set is held from
        its first moment (a run creating the task it runs), and no claim takes it until the lease
        is released or expires. Raises ``ConflictError(expected=0)`` if the task id exists in this
        tenant.
        """
        ...

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
        """Append ``events`` (seq ``expected_version + 1`` onwards), all or nothing.

        Raises ``ConflictError`` when the stream is not at ``expected_version``,
        ``LeaseLostError`` when ``fence`` is not the task's current lease token,
        ``TaskNotFoundError`` when there is no such task. Nothing is written then.
        """
        ...

    def append_streams(self, tenant: str, appends: Sequence[StreamAppend]) -> None:
        """Append to several streams in one transaction: every stream's events land, or none do.

        Each part is checked as :meth:`append` checks one (its version, its fence, its numbering)
        and the first refusal is raised — ``ConflictError``, ``LeaseLostError``,
        ``TaskNotFoundError``, ``InvalidInputError`` — with nothing written on any stream. A
        stream may appear once (``InvalidInputError`` otherwise).
        """
        ...

    def compact(self, tenant: str, task_id: str, expected_version: int, events: Sequence[EventRow]) -> int:
        """Replace a stream's history: delete its events (and snapshots) and append ``events`` (seq
        ``expected_version + 1`` onwards) in their place, in one transaction; return how many rows
        went. Versions only grow, so a reader's cached version is never reused for other events.

        For streams whose newest events can restate everything before them (tether's own, such as a
        LangGraph thread whose pruned checkpoints must free their bytes); never for tasks, whose log
        is their history. A fork stops being one (its new events stand alone). Raises
        ``ConflictError`` when the stream is not at ``expected_version`` or while forks point at it,
        ``TaskNotFoundError`` when there is no such stream; nothing is written then.
        """
        ...

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
        """Set a task's branch aside and put a fork of it in its place, in one transaction.

        The task is renamed ``archive_id`` (its events stay where they are) and gets
        ``archived`` appended at ``expected_version + 1``; a new task ``task_id`` is created
        from ``fork`` (its parent the archived branch) with ``forked`` as its first event.
        """
        ...

    def read_events(self, tenant: str, task_id: str, *, after: int = 0, upto: int | None = None) -> list[EventRow]:
        """Events with ``after < seq <= upto`` in order (a fork's include its parent's)."""
        ...

    def get_task(self, tenant: str, task_id: str) -> TaskRow | None: ...

    def delete_task(self, tenant: str, task_id: str) -> int:
        """Delete a stream, its events and snapshots; return how many events went.

        Refused with ``ConflictError`` while forks point at it.
        """
        ...

    def list_tasks(self, tenant: str, flt: TaskFilter, *, limit: int = 100, offset: int = 0) -> list[TaskRow]:
        """Tasks matching ``flt``, newest first."""
        ...

    def count_tasks(self, tenant: str, flt: TaskFilter, *, cap: int) -> int:
        """How many tasks match ``flt``, counted up to ``cap`` (``cap`` when there are more), from
        the index alone: its cost grows with the tasks counted, not with the rest of the store."""
        ...

    def stream_positions(self, tenant: str, type: str, prefix: str, *, user_id: str | None = None) -> list[Position]:
        """``(task_id, created_at, version)`` of every stream of ``type`` (and ``user_id``, if given)
        whose id starts with ``prefix``, in no particular order: the narrow read of a listing that
        keeps the rest itself (the ADK session service), with the version a :class:`TaskRow` reads."""
        ...

    # -- snapshots --------------------------------------------------------------
    def put_snapshot(self, tenant: str, task_id: str, snapshot: SnapshotRow, *, replaces: int | None = None) -> None:
        """Store ``snapshot`` (over one at the same seq); with ``replaces``, drop this task's snapshot
        at that seq in the same transaction (a missing one is no error: snapshots are a cache)."""
        ...

    def get_snapshot(self, tenant: str, task_id: str, *, at_most: int) -> SnapshotRow | None:
        """The newest snapshot with ``seq <= at_most``."""
        ...

    def read_latest(self, tenant: str, task_id: str) -> tuple[SnapshotRow | None, list[EventRow]]:
        """The stream's newest snapshot (of any schema, checksum unchecked) and its events after it
        (all of them without one): what opening a stream reads, in one round trip where the backend
        can. ``TaskNotFoundError`` if there is no such stream."""
        ...

    # -- idempotency ledger -----------------------------------------------------
    def ledger_get(self, tenant: str, key: str) -> LedgerRow | None: ...

    def ledger_begin(self, tenant: str, key: str, now: float) -> LedgerRow:
        """Record that a run for ``key`` starts and return the row as it was before.

        A new key comes back as ``status="new"``; an existing one as it stands
        (``started`` or ``done``), with ``runs`` incremented for ``started``.
        """
        ...

    def ledger_finish(self, tenant: str, key: str, result: str | bytes, now: float) -> LedgerRow:
        """Record the result unless one is already there; return the row that stands."""
        ...

    def ledger_forget(self, tenant: str, key: str) -> None: ...

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
        """Take the task's lease if it is free, expired, or held by ``steal_from``; return the new token.

        ``steal_from`` names an owner the caller knows is dead (a process on this host that no
        longer exists), so its lease need not run out first; with ``at_version``, one taken from only
        while the task is at that version (its holder appended nothing since the caller looked).
        """
        ...

    def claim(self, tenant: str, owner: str, ttl: float, now: float) -> tuple[str, int] | None:
        """Lease one runnable task, atomically; return its id and fencing token.

        Runnable: ``pending``, or ``running`` with no live lease (its worker died or let go), once
        due (at ``wake_at`` if set, else at ``created_at``); ``sleeping`` or ``awaiting_input``
        with ``wake_at <= now``. A lease with an owner and no expiry is live. Oldest due first.
        """
        ...

    def lease_holders(self, tenant: str, prefix: str, now: float) -> list[tuple[str, str]]:
        """Who holds the live leases of due tasks at ``now``: ``(owner, task_id)`` for each owner whose
        name starts with ``prefix``, with one task it holds; in no particular order.

        What a claim would take but for those leases (the tasks it passes over): a worker reads it
        with its host's prefix to take over at once what a dead process on its host held. It reads
        no task that is not due, or finished.
        """
        ...

    def record_worker(self, tenant: str, worker: WorkerRow) -> None:
        """Keep ``worker``'s record, in place of the one with its id, and drop the records of the tenant
        last seen more than :data:`WORKERS_KEPT` seconds before ``worker.seen_at``. Writes no event."""
        ...

    def workers(self, tenant: str, *, seen_after: float = 0.0, limit: int = 20) -> list[WorkerRow]:
        """The tenant's worker records last seen after ``seen_after``, the most recently seen first, at
        most ``limit``."""
        ...

    def park(self, tenant: str, task_id: str, version: int, reason: str) -> bool:
        """Mark the task as needing attention, with ``reason``, if it is still at ``version``: no claim
        takes it until an append moves its status or wake-up (an answer, a cancel, a retry, a run that
        goes on), which clears the mark. Writes no event. ``False`` (nothing changed) if the task moved
        on meanwhile or does not exist."""
        ...

    def renew_lease(self, tenant: str, task_id: str, token: int, ttl: float, now: float) -> bool:
        """Extend the lease held with ``token``; ``False`` if it was taken over."""
        ...

    def release_lease(self, tenant: str, task_id: str, token: int) -> None: ...

    def wait_for_change(
        self, timeout: float, *, interrupt: threading.Event | None = None, claimable: bool = False
    ) -> bool:
        """Block until the store may have changed (another writer committed), ``timeout`` passed,
        or ``interrupt`` was set; ``True`` when something changed. Lets idle workers wake at once
        when a task becomes runnable instead of polling on a long interval.

        ``claimable``: the caller acts only on a task a claim may take (an idle worker). A backend
        that can tell such commits from the rest may leave out the others (a run's appends under
        its lease), so that each append does not wake every idle worker; one that cannot wakes
        the caller on every change, as without it."""
        ...

    def close(self) -> None: ...


# -- what every backend's reads and refusals share ------------------------------------------------
def read_across_forks(
    stream: K,
    after: int,
    upto: int | None,
    parent_of: Callable[[K], tuple[K, int] | None],
    segment: Callable[[K, int, int | None], Iterable[EventRow]],
) -> list[EventRow]:
    """The events with ``after < seq <= upto`` of a stream that may be a fork.

    A fork shares its parent's events up to the fork point by reference (and a fork of a fork,
    its grandparent's): walk up while the fork point is past ``after``, then read each stream's
    part, oldest first. ``parent_of(stream)`` gives ``(parent, fork point)`` or ``None``;
    ``segment(stream, after, upto)`` reads that stream's own rows in order.
    """
    chain: list[tuple[K, int | None]] = []  # (stream, last seq taken from it)
    limit, current = upto, stream
    while True:
        chain.append((current, limit))
        parent = parent_of(current)
        if parent is None:
            break
        parent_id, at = parent
        if at <= after:
            break
        limit = at if limit is None else min(limit, at)
        current = parent_id
    rows: list[EventRow] = []
    for part, last in reversed(chain):
        rows.extend(segment(part, rows[-1].seq if rows else after, last))
    return rows


def check_batch(task_id: str, events: Sequence[EventRow], expected_version: int) -> None:
    """An append's events are numbered ``expected_version + 1`` onwards, without a gap: refused
    before anything is written otherwise (every backend calls this first)."""
    if len(events) == 1 and events[0].seq == expected_version + 1:
        return  # the common case, first
    if not events:
        raise InvalidInputError(f"an append to {task_id!r} needs at least one event")
    if events[0].seq != expected_version + 1:
        raise ConflictError(task_id, expected=events[0].seq - 1, actual=expected_version)
    for offset, event in enumerate(events[1:], start=2):
        if event.seq != expected_version + offset:
            raise InvalidInputError(
                f"an append to {task_id!r} numbers its events {[e.seq for e in events]}; "
                f"they must follow on from version {expected_version} without a gap"
            )


def check_streams(appends: Sequence[StreamAppend]) -> None:
    """A multi-stream append's parts, each numbered as :func:`check_batch` wants, each stream once:
    refused before anything is written otherwise."""
    if not appends:
        raise InvalidInputError("append_streams() needs at least one stream")
    seen: set[str] = set()
    for part in appends:
        if part.task_id in seen:
            raise InvalidInputError(f"append_streams() names {part.task_id!r} twice; give each stream once")
        seen.add(part.task_id)
        check_batch(part.task_id, part.events, part.expected_version)


def refusal(
    task_id: str, tenant: str, token: int | None, fence: int | None, expected: int, version: Callable[[], int]
) -> TetherError:
    """Why a guarded append wrote nothing: no such task (``token`` is ``None``), a stale fence,
    or the stream not at ``expected`` (``version()`` says where it is)."""
    if token is None:
        return TaskNotFoundError(task_id, tenant=tenant)
    if fence is not None and token != fence:
        return LeaseLostError(task_id, token=fence, current=token)
    return ConflictError(task_id, expected=expected, actual=version())


_SECRET_PARAMS = frozenset({"password", "passfile", "sslpassword"})


def redact_url(url: str) -> str:
    """``url`` with its password (in the authority or the query string) replaced by ``***``: the
    form every log line, banner, error and ``store.url`` shows."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.partition(':')[0]}:***@{host}"
        query = parts.query
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k in _SECRET_PARAMS for k, _ in pairs):
            query = urlencode([(k, "***" if k in _SECRET_PARAMS else v) for k, v in pairs], safe="*")
        if (netloc, query) == (parts.netloc, parts.query):
            return url
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:  # not a URL we can take apart: show none of it rather than a secret
        return url.partition("://")[0] + "://***"
