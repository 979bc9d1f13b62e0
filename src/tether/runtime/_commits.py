"""Async tasks' records, written off the event loop: one commit thread per app, and group commit
across tasks.

An async task's calls hand their records (an intent, a result) to the app's :class:`CommitThread`
and await them. The thread writes whatever is waiting when it is free in one transaction — the
records of parallel branches of one task, and of every other task on any event loop of the
process — then wakes each branch on its own loop. The loop never waits on the store: while a
transaction is under way it runs other coroutines, and what they record meanwhile goes into the
next transaction. A branch goes on only once its own records are durable, as if written alone.

A transaction of several tasks is all or nothing (``TaskLog.append_together``). When it is
refused (one task's record cannot be stored, another process appended to one of them, a lease
was lost), each task's records are written again on their own, so one task's refusal reaches
that task only.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from tether.errors import InvalidInputError
from tether.events import Event
from tether.log import TaskLog

__all__ = ["PER_TURN", "Branch", "CommitThread", "StagedWrite", "Wakeups", "deliver", "write_branches"]

Branch = tuple[list[Event], "asyncio.Future[None]"]
"""One branch's records and the future it awaits."""


class StagedWrite(NamedTuple):
    """What a task's writer writes now, as one append or as its part of a transaction of several tasks."""

    task_id: str
    events: list[Event]
    """The events to write, after any deferred reads."""
    version: int
    """The version they go on from."""
    fence: int | None
    """The lease's fencing token."""


class Recorder(Protocol):
    """What the commit thread needs of a task's writer (``runtime._recording.Recorder``)."""

    @property
    def lock(self) -> threading.RLock: ...

    def append(self, events: list[Event]) -> None:
        """Write ``events`` on their own (checked and fenced as every append of the run)."""

    def staged(self, events: list[Event]) -> StagedWrite:
        """``events`` as one part of a transaction of several tasks."""

    def appended(self, version: int) -> None:
        """Take in that a transaction wrote this task's part, up to ``version``."""


class _Submission:
    __slots__ = ("batch", "loop", "recorder")

    def __init__(self, recorder: Recorder, loop: asyncio.AbstractEventLoop, batch: list[Branch]) -> None:
        self.recorder = recorder
        self.loop = loop
        self.batch = batch


class CommitThread:
    """The thread that writes an app's async records. Started at the first submission (again in a
    forked child, which inherits no threads); a daemon, so it never holds a process open.

    Submissions go through a ``SimpleQueue``: putting one never takes a lock the thread holds,
    so the event loop never waits on the thread to hand it work.
    """

    def __init__(self, log: TaskLog) -> None:
        self._log = log
        self.always = False
        """Offload a lone async run's records too: its loop never waits on the store, at the cost of
        a thread handoff per commit (by default a lone run writes on its loop; see ``offloading``)."""
        self._runs = 0  # async runs under way, on any loop of the process
        self.in_hand = 0
        """How many submissions the thread is writing now (taken off the queue, not yet woken)."""
        self._queue: queue.SimpleQueue[_Submission | None] = queue.SimpleQueue()
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._closed = False

    def submit(self, recorder: Recorder, batch: list[Branch]) -> None:
        """Queue ``batch`` (one task's branches, in the order they finished) to be written."""
        if self._pid != os.getpid():
            self._started()
        self._queue.put(_Submission(recorder, asyncio.get_running_loop(), batch))

    def _started(self) -> None:
        with self._start:
            if self._closed:
                raise RuntimeError("the app is closed")
            if self._pid != os.getpid():  # the first submission in this process
                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._run, args=(self._queue,), name="tether-commits", daemon=True
                )
                self._thread.start()
                self._pid = os.getpid()

    @property
    def offloading(self) -> bool:
        """Whether async runs' records go through this thread now: while two or more async runs of
        the app are under way (or always, with ``always``)."""
        return self.always or self._runs > 1

    def run_started(self) -> None:
        """An async run began (its records may share this thread with others')."""
        with self._start:
            self._runs += 1

    def run_ended(self) -> None:
        with self._start:
            self._runs -= 1

    @property
    def waiting(self) -> int:
        """How many submissions are queued for the next transaction (approximately, while it runs)."""
        return self._queue.qsize()

    def close(self) -> None:
        """Stop the thread once what is queued is written."""
        with self._start:
            self._closed = True
            thread = self._thread if self._pid == os.getpid() else None
            self._pid = -1  # a submission after this finds the app closed
        if thread is not None and thread is not threading.current_thread():
            self._queue.put(None)
            thread.join()

    # ------------------------------------------------------------------ the thread
    def _run(self, waiting: queue.SimpleQueue[_Submission | None]) -> None:
        while True:
            first = waiting.get()
            batch = []
            stop = first is None
            if first is not None:
                batch.append(first)
            while True:  # and everything queued meanwhile: one transaction
                try:
                    more = waiting.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                else:
                    batch.append(more)
            if batch:
                self.in_hand = len(batch)
                try:
                    self._write(batch)
                finally:
                    self.in_hand = 0
            if stop:
                return

    def _write(self, waiting: list[_Submission]) -> None:
        # One group per task, in the order its submissions came (a task's records stay in order).
        groups: dict[int, _Submission] = {}
        for sub in waiting:
            group = groups.get(id(sub.recorder))
            if group is None:
                groups[id(sub.recorder)] = _Submission(sub.recorder, sub.loop, list(sub.batch))
            else:
                group.batch.extend(sub.batch)
        woken = Wakeups()
        if len(groups) > 1:
            try:
                _write_together(self._log, list(groups.values()))
            except BaseException:
                pass
            else:
                for group in groups.values():
                    woken.add(group.loop, group.batch, None)
                woken.send()
                return
        for group in groups.values():
            errors = write_branches(group.recorder.append, group.batch)
            for branch, error in zip(group.batch, errors, strict=True):
                woken.add(group.loop, [branch], error)
        woken.send()


class Wakeups:
    """The branches a transaction woke, handed to each loop in one callback: a loop is woken once
    per transaction, not once per task (each wake-up is a write to its self-pipe and a turn)."""

    __slots__ = ("_by_loop",)

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[None], BaseException | None]]] = {}

    def add(self, loop: asyncio.AbstractEventLoop, batch: list[Branch], error: BaseException | None) -> None:
        self._by_loop.setdefault(loop, []).extend((waiter, error) for _, waiter in batch)

    def send(self) -> None:
        for loop, woken in self._by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, woken, 0)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for these branches any more


def _write_together(log: TaskLog, groups: Sequence[_Submission]) -> None:
    """Every group's records in one transaction, each task's lock held from staging to bookkeeping."""
    locks = [group.recorder.lock for group in sorted(groups, key=lambda g: id(g.recorder))]  # one order:
    held = 0  # never two waits crossed; taken and let go by hand, no ExitStack: this runs for every group commit
    try:
        for lock in locks:
            lock.acquire()
            held += 1
        parts = [group.recorder.staged([e for events, _ in group.batch for e in events]) for group in groups]
        fences = {part.task_id: part.fence for part in parts if part.fence is not None}
        versions = log.append_together(
            [(part.task_id, part.events, part.version) for part in parts], fences=fences, snapshot=False
        )
        for group, version in zip(groups, versions, strict=True):
            group.recorder.appended(version)
    finally:
        for lock in reversed(locks[:held]):
            lock.release()


def write_branches(
    append: Callable[[list[Event]], None], batch: Sequence[tuple[list[Event], Any]]
) -> list[BaseException | None]:
    """Branches' records through ``append`` in one transaction; if one branch's record is refused
    (it cannot be stored), each branch's on its own. Each branch's error, or ``None``: an error that
    stopped the whole transaction (lease lost, store down) is every branch's."""
    if len(batch) > 1:
        try:
            append([e for events, _ in batch for e in events])
        except InvalidInputError:
            pass  # one branch's record cannot be stored: the others' still are, each on its own
        except BaseException as exc:
            return [exc] * len(batch)
        else:
            return [None] * len(batch)
    errors: list[BaseException | None] = []
    for events, _ in batch:
        try:
            append(events)
        except BaseException as exc:
            errors.append(exc)
        else:
            errors.append(None)
    return errors


PER_TURN = 16
"""How many branches one turn of the loop wakes. A transaction may wake hundreds; each goes on to
its next call in the turn after it is woken, running its Python there, and nothing else on the loop
runs until that turn is over: hundreds in one turn would hold the loop for milliseconds. Woken a few
at a time, the others' turns come in between: the loop goes on serving whatever else it runs (a web
server's requests), at a few iterations' cost."""


def _deliver(woken: list[tuple[asyncio.Future[None], BaseException | None]], start: int) -> None:
    end = start + PER_TURN
    for waiter, error in woken[start:end]:
        deliver(waiter, error)
    if end < len(woken):
        asyncio.get_running_loop().call_soon(_deliver, woken, end)


def deliver(waiter: asyncio.Future[None], error: BaseException | None) -> None:
    """Wake a branch waiting on its records: done, or with the error that stopped them."""
    if waiter.done():  # its branch was cancelled meanwhile: what it did is recorded all the same
        return
    if error is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(error)
