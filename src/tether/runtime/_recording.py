"""What a run records through (:class:`Recorder`): the record it walks (replay), the one write
path, and the checks every operation makes before it runs live; and how parallel branches
record together (:class:`GroupCommit`)."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel

from tether.errors import (
    Cancelled,
    ConflictError,
    LeaseLostError,
    NonDeterminismError,
    OutcomeUnknownError,
    SchemaVersionError,
    StoreUnavailableError,
    Suspend,
    TetherError,
)
from tether.events import (
    CancelRequested,
    Event,
    InputReceived,
    Recorded,
    StatusChanged,
)
from tether.log.conflicts import retry_on_conflict
from tether.model import TaskState, ToolCall
from tether.model.status import Status
from tether.runtime._commits import Branch, StagedWrite, deliver, write_branches
from tether.runtime._flow import Commit, Flow, Wait, _tuple_new, next_turn
from tether.runtime._replay import Replay, describe
from tether.runtime.specs import TaskSpec, ToolSpec

if TYPE_CHECKING:
    from tether.runtime.engine import Engine
    from tether.telemetry.otel import RunTrace


__all__ = [
    "NOT_A_TASK_FAILURE",
    "Compensation",
    "GroupCommit",
    "Recorder",
    "ReplayEnd",
    "RunEnded",
    "read_only",
    "upcast_data",
]

# Errors that say "this run cannot go on here", not "this task failed": they leave the task
# as it is (no failure record, no step marked failed) and reach the caller.
NOT_A_TASK_FAILURE = (
    NonDeterminismError,
    OutcomeUnknownError,
    ConflictError,
    SchemaVersionError,
    StoreUnavailableError,
)

_thread_id = threading.get_ident
perf_counter = time.perf_counter

# What another process may append to a task while a run holds it (send_input, cancel).
_EXTERNAL = (InputReceived, CancelRequested)


class Compensation(NamedTuple):
    """What undoes a completed call if its task fails or is cancelled: ``undo(result)``."""

    n: int
    """The ordinal of the call it undoes."""
    undo: ToolSpec
    result: Any
    """The call's recorded result, the undo's argument."""


class ReplayEnd(BaseException):
    """Stops a replay where the record runs out, before anything would run or be written."""

    def __init__(self, cursor: int) -> None:
        super().__init__(cursor)
        self.cursor = cursor


class RunEnded(BaseException):
    """Raised in a parallel branch that tries to record after its run stopped (suspended, failed,
    ended): the branch's work is left as the record says, and a later run takes it up again."""


class Recorder:
    """What one run of a task records through; the context owns it, and the run, the calls and
    ``ctx.session`` use it by these names.

    It holds the record the code walks (``cursor``, the replay), the one write path
    (:meth:`append`, which a replay can never pass), the state as of the latest append
    (:attr:`latest`), how the run stands (cancelled, compensating, ended), the checks an
    operation makes before it runs live, the numbering of calls and conversation operations
    as the code issues them, reads deferred to the next append, and the compensations to run
    if the task fails. It holds no reference to the context.
    """

    def __init__(
        self,
        engine: Engine,
        spec: TaskSpec,
        state: TaskState,
        history: list[Recorded],
        fence: int | None,
        *,
        replay_only: bool = False,
    ) -> None:
        self.engine = engine
        self.spec = spec
        self.task_id = state.task_id
        self.cursor = Replay(state.task_id, history, state)
        self.replay_only = replay_only  # ``app.replay``: nothing runs and nothing is written
        # A fork made among a cancel's compensations goes on compensating (:meth:`Replay.carried_cancel`).
        self.cancel_reason = state.cancel_reason or (self.cursor.carried_cancel() if state.parent else None)
        self.lock = threading.RLock()  # ctx.map's threads record through one writer
        # Counted under ``lock``: live calls issued and not ended (more than one: a parallel
        # batch), and replayed calls issued whose recorded outcome the code has not received.
        self.inflight = 0
        self.undelivered = 0
        self.taken = 0
        """How many times a write met what another process appended (an answer, a cancel) and went
        on after it: a wait written after one was decided before it (see :meth:`suspend`)."""
        self.branches = 0
        """An async task's calls under way as coroutines (started, not ended): a failure's or a cancel's
        compensations wait for them, so that a call that completes after the code has failed is
        undone too (on the loop's one thread: no lock)."""
        self.writer = GroupCommit(self)
        self.trace: RunTrace | None = None
        """The run's spans while telemetry is on (:mod:`tether.telemetry.hooks`); ``None`` when off."""
        self._version = state.version  # the latest version: appends go on from it
        self._fence = fence
        self._n = 0  # ordinal of the last call issued
        self._s = 0  # ordinal of the last conversation operation issued
        self._compensations: list[Compensation] = []
        self._compensating = False
        self._ended = False
        self._leaving = False  # the run decided to wait or sleep: no call starts any more
        self._until_live = False  # events deferred until the code goes live (see defer_until_live)
        self.asking: str | None = None
        """The key of the question this run has open (``ctx.wait_for_input``): one at a time."""
        self._owner = threading.get_ident()  # the thread the task's code runs in
        self._deferred: list[Event] = []  # recorded reads, written with the next append
        self._divergence: NonDeterminismError | None = None  # see :meth:`diverged`

    # ------------------------------------------------------------------ reading
    @property
    def latest(self) -> TaskState:
        """The task's state as of the latest append (live), from the log's memory."""
        return self.engine.log.load_as_writer(self.task_id, self._version)

    # ------------------------------------------------------------------ replay
    def replayed(self, expected: type[Event], matches: Callable[[Any], bool], requested: str) -> Recorded | None:
        """The recorded event this operation corresponds to, or ``None`` when it runs live."""
        try:
            recorded = self.cursor.take(expected, matches, requested)
        except NonDeterminismError as error:
            raise self.diverged(error) from None
        if recorded is None:
            self.check_nothing_left(requested)
        return recorded

    def diverged(self, error: NonDeterminismError) -> NonDeterminismError:
        """The code no longer does what its record says: from here the run runs and writes nothing, in
        any branch (a sibling's call past the record would do its effect under a key the record never
        gave it). Returns ``error``, for the caller to raise; every later operation raises it too."""
        with self.lock:
            if self._divergence is None:
                self._divergence = error
        return error

    def check_nothing_left(self, requested: str) -> None:
        """An operation with no record runs live — unless records the code has not asked for remain
        while nothing else is under way (no parallel call in flight or waiting for its recorded
        result): then the code no longer does what it did, and running it would write a history
        that cannot be replayed."""
        if self.cursor.done or self.undelivered or self.inflight:
            return
        left = self.cursor.first_left(code_only=True)
        if left is not None:
            raise self.diverged(NonDeterminismError(self.task_id, left.seq, describe(left.event), requested))

    def answered(self) -> bool:
        """Whether the recorded history goes on past this point (so a wait or sleep here ended)."""
        return not self.cursor.done

    # ------------------------------------------------------------------ issuing
    @property
    def last_call(self) -> int:
        """The ordinal of the last call the code issued (0: none yet)."""
        n = self._n
        return self.cursor.ordinal(n) if n and self.cursor.retries else n

    def issue_call(self, operation: str) -> tuple[int, ToolCall | None]:
        """The next call's ordinal, in program order, and its record if it has one (taken)."""
        if _thread_id() != self._owner:
            self._wrong_thread(operation)
        lock = self.lock
        lock.acquire()  # (not ``with``, here and in :meth:`settled`: every call pays for it)
        try:
            self._n += 1
            cursor = self.cursor
            n = cursor.ordinal(self._n) if cursor.retries else self._n  # shifted only past a retry's calls
            record = cursor.call(n)
            # A call with no record is not checked against records left ahead of it: in a parallel
            # batch a sibling issued after it may be recorded while it is not (a readonly call that
            # had not finished). Its identity is its ordinal: an inserted or removed call shifts the
            # ordinals of the recorded ones after it, and they refuse.
            if record is None or record.status == "intended":
                self.inflight += 1  # it will run: issued and not yet ended
            else:
                self.undelivered += 1  # its recorded outcome is handed back when the code awaits it
        finally:
            lock.release()
        return n, record

    def settled(self) -> None:
        """A live call ended (recorded, or stopped)."""
        lock = self.lock
        lock.acquire()
        try:
            self.inflight -= 1
        finally:
            lock.release()

    def issue_session_op(self) -> int:
        """The next conversation operation's ordinal, in program order."""
        if threading.get_ident() != self._owner:
            self._wrong_thread("ctx.session")
        with self.lock:
            self._s += 1
            return self._s

    def _wrong_thread(self, operation: str) -> None:
        raise TetherError(
            f"{operation} was called from a thread task {self.task_id!r} did not start: a call's identity "
            "(its ordinal and idempotency key) comes from the order the task issues it, which another thread "
            "cannot keep. Run calls in parallel threads with ctx.map(tool, items), or in an async task with "
            "asyncio.gather(ctx.call(...), ...)"
        )

    # ------------------------------------------------------------------ writing
    def append(self, events: list[Event]) -> None:
        """The one write path: ``events`` (after any deferred reads) at the task's next version."""
        lock = self.lock
        lock.acquire()  # (not ``with``: every call's append takes it; two plain calls skip the context protocol)
        try:
            staged = self.staged(events)
            task_id, events, fence = staged.task_id, staged.events, staged.fence
            append = self.engine.log.append
            # No snapshot mid-run: the run holds the task, and snapshots once when it stops. Tried again
            # for as long as what came in meanwhile is an answer or a cancel (``_take_external``).
            trace = self.trace
            began = perf_counter() if trace is not None else 0.0
            # The first try here, the rest in _append_again: every recorded call comes through this
            # method, and a closure over its locals (retry_on_conflict's attempt) would make each of
            # them a cell for every call, where a conflict is rare.
            try:
                version = append(task_id, events, self._version, fence=fence, snapshot=False)
            except LeaseLostError:
                raise
            except ConflictError:
                version = 0  # tried again below, outside the handler: no later error carries this conflict
            if not version:
                version = self._append_again(task_id, events, fence)
            if trace is not None:
                trace.committed(perf_counter() - began)
            self.appended(version)
        finally:
            lock.release()

    def staged(self, events: list[Event]) -> StagedWrite:
        """What an append of ``events`` writes now (after any deferred reads). The caller holds
        :attr:`lock` until it reports the write with :meth:`appended`."""
        if self.replay_only:
            raise ReplayEnd(self.cursor.walked)  # a replay never writes, whatever asks it to
        if self._divergence is not None:
            raise self._divergence
        if self._ended:
            raise RunEnded(f"task {self.task_id!r}: this run has stopped; a later run takes the work up")
        events = [*self._deferred, *events] if self._deferred else events
        return _tuple_new(StagedWrite, (self.task_id, events, self._version, self._fence))

    def appended(self, version: int) -> None:
        """What :meth:`staged` gave was written: the task is at ``version``."""
        self._version = version
        if self._deferred:
            self._deferred.clear()
            self._until_live = False

    def defer(self, event: Event) -> None:
        """Record ``event`` with the next append: a read that nothing depends on until something is written."""
        with self.lock:
            self._deferred.append(event)

    def _append_again(self, task_id: str, events: list[Event], fence: int | None) -> int:
        """:meth:`append`'s tries after its first met a conflict: again for as long as what came in
        meanwhile is an answer or a cancel (taken in by :meth:`_take_external`); the new version."""
        self._take_external()
        append = self.engine.log.append
        return retry_on_conflict(
            lambda: append(task_id, events, self._version, fence=fence, snapshot=False),
            stream=task_id,
            tries=None,
            on_conflict=lambda _: self._take_external(),
        )

    def _take_external(self) -> None:
        """Accept what another process appended meanwhile (an answer, a cancel); anything else is a conflict."""
        newer = self.engine.log.events(self.task_id, after=self._version)
        for rec in newer:
            if not isinstance(rec.event, _EXTERNAL):
                raise ConflictError(self.task_id, expected=self._version, actual=newer[-1].seq)
            if isinstance(rec.event, CancelRequested):
                self.cancel_reason = rec.event.reason or "cancelled"
        if not newer:
            raise ConflictError(self.task_id, expected=self._version, actual=None)
        self._version = newer[-1].seq
        self.taken += 1

    # ------------------------------------------------------------------ going live, stopping
    def going_live(self) -> None:
        """Called before an operation runs live: a cancelled task stops here, before doing anything,
        and so does a replay (``app.replay``), which never runs or writes anything — after the
        cancel, so that a replay of a cancelled task goes on to its compensations, as the run did."""
        if self._divergence is not None:
            raise self._divergence
        if self.cancel_reason is not None and not self._compensating:
            raise Cancelled(self.cancel_reason)
        if self.replay_only:
            raise ReplayEnd(self.cursor.walked)
        if self._leaving:
            raise Suspend("the task waits: what it has not started yet starts when it runs again")
        if self._until_live and not (self.spec.is_async and self.engine.commits.offloading):
            self._until_live = False
            self.append([])  # what the run began with; a loop shared with other runs writes it with the next

    def defer_until_live(self, events: list[Event]) -> None:
        """Write ``events`` when the code goes live (past its record), or with its first write."""
        with self.lock:
            self._deferred[:0] = events
            self._until_live = True

    def suspend(self, status: str, wake_at: float | None, reason: str, *, beside: int = 0) -> Flow[None]:
        """Record that the task waits (``status``) and leave the run: no process needs to stay.

        The calls of an async task's other branches under way (``branches``, less the ``beside`` that
        are the caller's own) end first, and are recorded: cut off when the run lets go, a call's
        effect could be done with no result recorded, and the next run would do it again under its
        key though no process stopped. Once the wait is decided nothing else starts (see
        :meth:`going_live`): the next run starts it.

        An answer or a cancel may land between the decision to wait and the write that records it:
        the write meets it and goes on after it, and its wake-up (none, for a wait without a timeout)
        would stand over the one the answer set, leaving the task waiting for what it has. Then the
        task is running again at once, and this returns: the caller looks again (a cancel stops it
        here). So it does when one landed while the calls beside ended."""
        self.going_live()  # a cancelled task does not go back to waiting
        taken = self.taken
        while self.branches > beside:
            yield Wait(0.001)
        if self.taken != taken:
            return
        self._leaving = True
        self.branches += 1  # the run lets go once this is written (run._code waits for branches)
        try:
            yield Commit(self.writer, [StatusChanged(status=status, wake_at=wake_at)])
        finally:
            self.branches -= 1
        if self.taken == taken:
            raise Suspend(reason)
        # A branch that went live meanwhile stopped, and may stop the code: the task is left running,
        # its lease let go, for the next run (a worker) to take up.
        self._leaving = False
        yield Commit(self.writer, [StatusChanged(status=Status.RUNNING.value)])
        self.going_live()

    def end(self) -> None:
        """The run stopped: a parallel branch still going records nothing more."""
        with self.lock:
            self._ended = True

    # ------------------------------------------------------------------ compensation
    def compensate_with(self, n: int, undo: ToolSpec, result: Any) -> None:
        """Call ``n`` completed with ``result``: ``undo(result)`` runs if the task fails or is cancelled."""
        self._compensations.append(Compensation(n, undo, result))

    def compensations_due(self) -> list[Compensation]:
        """The run is compensating from now on (a cancel no longer stops it): the compensations to run,
        latest call first, without those a failure a retry answered has run already. Those this
        failure (or cancel) recorded before the run stopped are among them: they replay from their
        records, as the rest of the run did."""
        self._compensating = True
        self.cursor.compensating()
        done = self.cursor.compensated_before()
        # In reverse order of the calls' ordinals (parallel calls finish in any order).
        due = sorted(self._compensations, key=lambda c: c.n, reverse=True)
        return [c for c in due if c.n not in done]


class GroupCommit:
    """How a context's calls record: at once in a sync task; together, and off the event loop when
    other async runs share it, in an async one.

    A sync task's records are written where it runs (:meth:`append`). An async task's go through
    :meth:`commit_soon`: branches of an ``asyncio.gather`` that finish in the same turn of the
    event loop are written together at the end of that turn (or at once, when every call in
    flight has finished), in the order they finished, and each branch goes on once that
    transaction has committed: its record is as durable, and its result as late, as if written
    alone; there are fewer commits.

    Where they are written depends on who else is running (``CommitThread.offloading``). While
    other async runs of the app are under way, the batch goes to the app's commit thread, which
    writes it with the other tasks' records waiting at that moment, and the loop serves the
    others meanwhile. A lone run writes on its loop, which has nothing else of tether's to do:
    handing each commit to a thread and back would only add its latency.
    """

    __slots__ = ("_batch", "_queued", "_recorder")

    def __init__(self, recorder: Recorder) -> None:
        # A proxy: the recorder owns its writer, and a strong reference back would make every
        # finished recorder (with the whole record it walked) garbage only the cycle collector
        # can free, late, and at a cost that grows with the heap.
        self._recorder = weakref.proxy(recorder)
        self._batch: list[tuple[list[Event], asyncio.Future[None] | None]] = []  # written on the loop
        self._queued: list[Branch] = []  # for the commit thread

    def append(self, events: list[Event]) -> None:
        self._recorder.append(events)

    def commit_soon(self, events: list[Event]) -> Awaitable[None] | None:
        """Write ``events`` now (``None``), or queue them and return what to await."""
        rec = self._recorder
        if rec.replay_only:
            rec.append(events)  # raises ReplayEnd: a replay writes nothing
        if rec.engine.commits.offloading:
            return self._to_thread(events)
        batch = self._batch
        if not batch and rec.inflight <= 1:
            rec.append(events)
            return None
        if len(batch) + 1 >= rec.inflight:
            # Every other call in flight is waiting on this batch: nothing can join it, so it is
            # written now, and this branch goes on without waiting another turn.
            waiter = None
        else:
            loop = asyncio.get_running_loop()
            waiter = loop.create_future()
            if not batch:
                loop.call_soon(self._flush)
        batch.append((events, waiter))
        if waiter is None:
            self._flush()
            return next_turn()  # on with the others it woke, in the order they joined
        return waiter

    def _flush(self) -> None:
        """Write the branches batched on the loop in one transaction and wake them. A branch that
        flushes for itself (its waiter ``None``) gets its own error raised here."""
        batch, self._batch = self._batch, []
        mine: BaseException | None = None
        for (_, waiter), error in zip(batch, write_branches(self._recorder.append, batch), strict=True):
            if waiter is None:
                mine = error
            else:
                deliver(waiter, error)
        if mine is not None:
            raise mine

    def _to_thread(self, events: list[Event]) -> Awaitable[None]:
        """Queue ``events`` for the commit thread: handed over at the end of this turn, or at once
        when every call in flight has finished; the awaitable is done once they are durable."""
        rec = self._recorder
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        queued = self._queued
        queued.append((events, waiter))
        if len(queued) >= rec.inflight:
            self._hand_over()
        elif len(queued) == 1:
            loop.call_soon(self._hand_over)
        return waiter

    def _hand_over(self) -> None:
        queued, self._queued = self._queued, []
        if queued:
            rec = self._recorder
            rec.engine.commits.submit(rec, queued)


@functools.cache
def read_only(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` as ``ctx.data`` hands it out: assigning a field raises, naming ``ctx.update``
    (the assignment would change this object and record nothing)."""

    def __setattr__(self: BaseModel, name: str, value: Any) -> None:  # noqa: N807
        raise TetherError(
            f"ctx.data is read-only: assigning {model.__name__}.{name} would record nothing. "
            f"Use ctx.update({name}=...), which validates and records the change"
        )

    def __eq__(self: BaseModel, other: object) -> bool:  # noqa: N807
        return isinstance(other, model) and self.model_dump() == other.model_dump()

    namespace = {
        "__setattr__": __setattr__,
        "__eq__": __eq__,
        "__hash__": model.__hash__,
        "__module__": model.__module__,
        "__qualname__": model.__qualname__,
    }
    return type(model.__name__, (model,), namespace)


def upcast_data(spec: TaskSpec, state: TaskState) -> dict[str, Any]:
    """The task's stored data, migrated to the model's current ``schema_version``."""
    data = dict(state.data)
    stored = state.data_version
    current = spec.data_version
    if stored is None or current is None or stored == current:
        return data
    if stored > current:
        raise SchemaVersionError(
            f"task {state.task_id!r} stores {spec.state.__name__ if spec.state else 'data'} at schema version "
            f"{stored}, newer than the code's {current}",
            found=stored,
            supported=current,
        )
    version = stored
    while version < current:
        step = spec.upcast.get(version)
        if step is None:
            raise SchemaVersionError(
                f"task {state.task_id!r} stores its data at schema version {version} and the model is at "
                f"{current}, but no upcaster is registered for {version} (upcast={{{version}: fn}})",
                found=version,
                supported=current,
            )
        data = step(data)
        version += 1
    data["schema_version"] = current
    return data
