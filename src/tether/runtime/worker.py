"""Workers: claim runnable tasks, run them under a lease, shut down gracefully."""

from __future__ import annotations

import inspect
import signal
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigurationError, LeaseLostError, TaskNotFoundError, TetherError
from tether.runtime.claimed import run_claimed
from tether.runtime.leases import backoff_owner, owner_is_dead
from tether.store import WorkerRow
from tether.telemetry import hooks as telemetry
from tether.telemetry.logs import task_fields
from tether.telemetry.logs import worker_log as log

if TYPE_CHECKING:
    from tether.runtime.engine import Engine

__all__ = ["HEARTBEAT", "Worker"]

HEARTBEAT = 30.0
"""The default and the longest interval, in seconds, between a worker's liveness records
(:meth:`tether.Store.record_worker`): readers count a worker alive for three of them after its last
record (:data:`tether.runtime.liveness.ALIVE_WITHIN`), so a longer one would read as gone between two."""


class Worker:
    """Runs tasks for one app: ``concurrency`` threads, each claiming one task at a time.

    A claim takes the task's lease; a heartbeat renews it while the task runs;
    every append carries the lease's fencing token, so a worker that lost its
    lease (it was paused, or its network went away) cannot write. On SIGTERM or
    SIGINT the worker stops claiming and lets running tasks finish for up to
    ``grace`` seconds; a task still running then is left to its lease, which
    another worker takes over when it expires.

    A task whose lease a process on this host holds that no longer exists (killed, crashed) is
    taken over at once, not when its lease expires: the worker looks for such leases at most
    every ``poll`` seconds. A task whose run stops with an error (not the task's own failure,
    which is recorded in it) is not claimed again at once: the worker holds it aside, by a lease
    that runs out when its backoff does (``backoff`` seconds, doubled for each such run in a
    row, at most ``max_backoff``), and claims other tasks meanwhile.

    The worker says it is alive in its tenant's liveness records (what ``tether show``, the
    inspector and ``GET /v1/workers`` read): when it starts, every ``heartbeat`` seconds from its
    main thread whatever its threads do (an idle worker's polls write nothing), and when it stops,
    by a signal or with ``idle_exit``. ``target`` is the app as ``tether worker`` was given it
    (``module:app``), kept in the record so that a reader can say how to start another.
    """

    backoff = 1.0
    """Seconds a task whose run stopped with an error waits before a worker claims it again."""
    max_backoff = 60.0
    """The longest such wait, however many runs in a row stopped."""
    _remembered = 4096  # tasks whose runs in a row stopped: the oldest forgotten past this many

    def __init__(
        self,
        engine: Engine,
        *,
        concurrency: int = 1,
        idle_exit: bool = False,
        poll: float = 0.5,
        grace: float = 30.0,
        target: str | None = None,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        if concurrency < 1:
            raise TetherError(f"concurrency must be at least 1, got {concurrency}")
        if not 0 < heartbeat <= HEARTBEAT:
            raise ConfigurationError(
                f"heartbeat must be more than 0 and at most {HEARTBEAT:g} seconds (readers count a worker "
                f"alive for three heartbeats of {HEARTBEAT:g} s after its last record), got {heartbeat!r}"
            )
        self.engine = engine
        self.concurrency = concurrency
        self.idle_exit = idle_exit
        self.poll = poll
        self.grace = grace
        self.stopping = threading.Event()
        self.runs = 0
        self._busy = 0
        self._lock = threading.Lock()
        self._stopped: OrderedDict[str, int] = OrderedDict()  # task → its runs in a row that stopped
        self._next_look = 0.0  # when to look for leases of dead processes again (time.monotonic)
        self._host = f"{socket.gethostname()}:"
        self.heartbeat = heartbeat
        started = time.time()
        self._record = WorkerRow(engine.worker_id, started_at=started, seen_at=started, app=target)
        self._next_beat = 0.0  # when the main thread says it is alive again (time.monotonic)
        # A store written before wait_for_change took ``claimable`` (a backend of your own) is
        # waited on as it was then: it wakes on every change, which the keyword only narrows.
        self._wait_options = {"claimable": True} if _takes(engine.store.wait_for_change, "claimable") else {}

    def stop(self, *_: object) -> None:
        self.stopping.set()

    def run(self) -> int:
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        threads = [
            threading.Thread(target=self._loop, name=f"tether-worker-{i}", daemon=True) for i in range(self.concurrency)
        ]
        self._say_alive()
        try:
            for thread in threads:
                thread.start()
            self._watch(threads, until=None)
            self._watch(threads, until=time.monotonic() + self.grace)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._say_alive(stopped=True)  # a graceful end (a signal, idle_exit): not alive from now on
        return self.runs

    def _watch(self, threads: list[threading.Thread], *, until: float | None) -> None:
        """Wait while any of ``threads`` runs: until the worker is asked to stop (``until=None``), or
        until ``until`` (the grace of running tasks), saying it is alive every heartbeat meanwhile."""
        while any(t.is_alive() for t in threads):
            if until is None and self.stopping.wait(0.05):
                return
            if until is not None:
                if time.monotonic() >= until:
                    return
                time.sleep(0.05)
            if time.monotonic() >= self._next_beat:
                self._say_alive()

    def _say_alive(self, *, stopped: bool = False) -> None:
        """Record that this worker is alive (or, ``stopped``, that it stopped). A store that cannot
        take it now costs the record (readers see the worker as gone once it is old), never a run."""
        self._next_beat = time.monotonic() + self.heartbeat
        now = time.time()
        record = replace(self._record, seen_at=now, stopped_at=now if stopped else None)
        try:
            self.engine.store.record_worker(self.engine.tenant, record)
        except TetherError as exc:
            log.warning("worker %s: its liveness record was not written: %s", self.engine.worker_id, exc)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info(
            "worker %s: signal %d, finishing current tasks (grace %.0fs)", self.engine.worker_id, signum, self.grace
        )
        self.stopping.set()

    def _loop(self) -> None:
        engine = self.engine
        while not self.stopping.is_set():
            try:
                claimed = self._take_over() or engine.store.claim(
                    engine.tenant, engine.worker_id, engine.lease_ttl, time.time()
                )
            except TetherError:
                log.exception("worker %s: claim failed", engine.worker_id)
                claimed = None
            if claimed is None:
                with self._lock:
                    idle = self._busy == 0
                if self.idle_exit and idle:
                    return
                # Wake as soon as another writer makes a task claimable (a task started, answered,
                # cancelled, given back), and at least every ``poll`` seconds for sleeps, timeouts and
                # leases that run out. Not for every append of every run: N idle workers would each
                # take in every commit and claim again, for nothing, on every one of them.
                engine.store.wait_for_change(self.poll, interrupt=self.stopping, **self._wait_options)
                continue
            self._run(*claimed)

    def _take_over(self) -> tuple[str, int] | None:
        """The lease of a due task whose holder is a process on this host that no longer exists,
        taken (fenced: the dead holder's writes are refused); ``None`` when there is none.

        One read of the leases held on this host's due tasks, at most every ``poll`` seconds
        among this worker's threads (at once again after a take: the dead may have held more)."""
        now = time.monotonic()
        with self._lock:
            if now < self._next_look:
                return None
            self._next_look = now + self.poll
        engine = self.engine
        at = time.time()
        for owner, task_id in engine.store.lease_holders(engine.tenant, self._host, at):
            if not owner_is_dead(owner):
                continue
            token = engine.store.acquire_lease(
                engine.tenant, task_id, engine.worker_id, engine.lease_ttl, at, steal_from=owner
            )
            if token is not None:
                with self._lock:
                    self._next_look = 0.0
                extra = task_fields("taken_over", task_id, engine.tenant, engine.worker_id, tether_previous_owner=owner)
                log.warning(
                    "worker %s: task %s taken over from %s (process gone)",
                    engine.worker_id,
                    task_id,
                    owner,
                    extra=extra,
                )
                telemetry.takeover(task_id, owner, engine.worker_id)
                return task_id, token
        return None

    def _run(self, task_id: str, token: int) -> None:
        engine = self.engine
        with self._lock:
            self._busy += 1
        started = time.monotonic()
        with telemetry.noting_run(task_id) as note:  # the run tells the note its attempt as it begins

            def fields(action: str, **more: Any) -> dict[str, Any]:
                return task_fields(action, task_id, engine.tenant, engine.worker_id, note.attempt, **more)

            log.debug("worker %s: task %s started", engine.worker_id, task_id, extra=fields("claimed"))
            try:
                handle = run_claimed(engine, task_id, token, note)
                elapsed = time.monotonic() - started
                # One record per run, with what a person watching the worker wants on one line.
                status = handle.status.value
                extra = fields("finished", tether_status=status, tether_duration_s=elapsed)
                log.info("worker %s: task %s %s in %.3fs", engine.worker_id, task_id, status, elapsed, extra=extra)
                with self._lock:
                    self._stopped.pop(task_id, None)
            except (LeaseLostError, TaskNotFoundError) as exc:
                # Another holds the task now (a takeover, a cancel), or it is gone: nothing to hold aside.
                extra = fields("stopped", tether_error_type=type(exc).__name__)
                log.warning("worker %s: task %s stopped: %s", engine.worker_id, task_id, exc, extra=extra)
            except TetherError as exc:
                # Not the task's failure (that is recorded in it): the run could not go on here.
                aside, retry_in = self._hold_aside(task_id, token)
                extra = fields("failed", tether_error_type=type(exc).__name__, tether_retry_in_s=retry_in)
                log.warning("worker %s: task %s stopped: %s%s", engine.worker_id, task_id, exc, aside, extra=extra)
            except Exception as exc:
                aside, retry_in = self._hold_aside(task_id, token)
                extra = fields("failed", tether_error_type=type(exc).__name__, tether_retry_in_s=retry_in)
                log.exception("worker %s: task %s crashed the run%s", engine.worker_id, task_id, aside, extra=extra)
            finally:
                with self._lock:
                    self._busy -= 1
                    self.runs += 1

    def _hold_aside(self, task_id: str, token: int) -> tuple[str, float | None]:
        """Keep a task whose run stopped with an error from being claimed again (by any worker) until
        its backoff ends, by a lease that expires then: a claim passes over it and takes the tasks
        due after it meanwhile, where a lease let go would leave it the first due again. Returns
        what the log line says of it, and the seconds it is held aside for (``None``: it is not)."""
        with self._lock:
            stops = self._stopped.pop(task_id, 0) + 1
            self._stopped[task_id] = stops
            if len(self._stopped) > self._remembered:
                self._stopped.popitem(last=False)
        delay = min(self.max_backoff, self.backoff * 2 ** min(stops - 1, 32))
        engine = self.engine
        now = time.time()
        try:
            row = engine.store.get_task(engine.tenant, task_id)
            if row is not None and row.parked is not None:
                return "; parked: no worker runs it until someone acts on it", None  # no lease needed to keep it aside
            due = row.due_at if row is not None else None
            if due is None or due > now + delay:
                return "", None  # finished, parked for a person, or not due before the backoff ends anyway
            # The run let its lease go: take it for the backoff. (Never from another holder: even
            # one of this worker's own threads may have claimed the task since.) A run that could not
            # let go still holds it under its token: that lease is renewed for the backoff instead.
            owner = backoff_owner(engine.worker_id)
            held = engine.store.acquire_lease(engine.tenant, task_id, owner, delay, now) is not None
            held = held or engine.store.renew_lease(engine.tenant, task_id, token, delay, now)
        except TetherError as exc:
            return f" (not held aside: {exc})", None
        if not held:
            return "", None  # another worker runs it now
        return f"; not claimed again for {delay:g}s (its run {stops} in a row to stop)", delay


def _takes(method: Any, keyword: str) -> bool:
    """Whether ``method`` accepts the keyword argument ``keyword``."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): call it as the protocol says
        return True
    return any(p.name == keyword or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
