"""Leases as a run holds them: taking one (from a holder that is dead on this machine, at once),
the heartbeat that renews it while the run goes on, and what a listing says of its holder."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime

from tether.errors import TaskBusyError, TetherError
from tether.store import Store, TaskRow

__all__ = ["Heartbeat", "acquire", "backoff_owner", "describe_holder", "is_backoff", "owner_is_dead"]

_log = logging.getLogger("tether")


def acquire(
    store: Store, tenant: str, task_id: str, owner: str, ttl: float, *, force: bool = False, at: int | None = None
) -> int:
    """Take the task's lease for ``owner``: a free one, an expired one, one whose holder is a dead
    process on this machine, or one a worker holds the task aside by while it backs off (no run holds
    it); any, with ``force``; a live holder's with ``at``, if the task is still at that version (the
    holder wrote nothing since). Else :class:`TaskBusyError` naming the holder."""
    now = time.time()
    for _ in range(3):  # a lease let go between the refusal and the read of its row is free: take it
        token = store.acquire_lease(tenant, task_id, owner, ttl, now)
        if token is not None:
            return token
        row = store.get_task(tenant, task_id)
        if row is None or row.lease_owner is not None:
            break
    holder = row.lease_owner if row is not None else None
    if holder is not None and (force or is_backoff(holder) or owner_is_dead(holder)):
        token = store.acquire_lease(tenant, task_id, owner, ttl, now, steal_from=holder)
        if token is not None:
            return token
    elif holder is not None and at is not None:
        token = store.acquire_lease(tenant, task_id, owner, ttl, now, steal_from=holder, at_version=at)
        if token is not None:
            return token
    raise TaskBusyError(task_id, owner=holder, expires=row.lease_expires if row is not None else None)


class Heartbeat:
    """Renews a task's lease in the background while a run holds it, every third of its TTL.

    One thread of the process renews every lease its runs hold (200 concurrent async tasks are
    one thread, not 200), so entering and leaving costs a dict operation: an event loop that
    starts and ends many runs never waits on a thread's start or join.
    """

    def __init__(self, store: Store, tenant: str, task_id: str, token: int, ttl: float) -> None:
        self._lease = _Lease(store, tenant, task_id, token, ttl)

    def __enter__(self) -> Heartbeat:
        _BEATER.hold(self._lease)
        return self

    def __exit__(self, *exc: object) -> None:
        _BEATER.let_go(self._lease)


class _Lease:
    __slots__ = ("due", "interval", "store", "task_id", "tenant", "token", "ttl")

    def __init__(self, store: Store, tenant: str, task_id: str, token: int, ttl: float) -> None:
        self.store, self.tenant, self.task_id, self.token, self.ttl = store, tenant, task_id, token, ttl
        self.interval = ttl / 3
        self.due = 0.0


class _Beater:
    """The process's heartbeat thread: renews each held lease when it falls due; started at the
    first lease held (again in a forked child, which inherits no threads)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._held: dict[int, _Lease] = {}
        self._pid = 0

    def hold(self, lease: _Lease) -> None:
        lease.due = time.monotonic() + lease.interval
        with self._cond:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._held = {}
                threading.Thread(target=self._run, name="tether-heartbeat", daemon=True).start()
            self._held[id(lease)] = lease
            self._cond.notify()

    def let_go(self, lease: _Lease) -> None:
        with self._cond:
            self._held.pop(id(lease), None)

    def _run(self) -> None:
        pid = os.getpid()
        while True:
            with self._cond:
                if self._pid != pid:
                    return  # a thread of the parent, copied into a forked child, never runs there
                now = time.monotonic()
                due = [lease for lease in self._held.values() if lease.due <= now]
                if not due:
                    wake = min((lease.due for lease in self._held.values()), default=now + 3600.0)
                    self._cond.wait(wake - now)
                    continue
                for lease in due:
                    lease.due = now + lease.interval
            for lease in due:
                try:
                    renewed = lease.store.renew_lease(lease.tenant, lease.task_id, lease.token, lease.ttl, time.time())
                except TetherError:
                    continue  # the store is away for a moment: the next beat tries again
                except Exception:  # a bug must not stop the beat of every other lease
                    _log.exception("renewing the lease of task %r failed", lease.task_id)
                    continue
                if not renewed:
                    self.let_go(lease)  # taken over: the run's next append is refused by its fencing token


_BEATER = _Beater()


def owner_is_dead(owner: str) -> bool:
    """True when ``owner`` names a process on this machine that no longer exists."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return is_zombie(pid)


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


_BACKOFF = ":backoff"


def backoff_owner(worker: str) -> str:
    """The owner a worker holds a task aside by while it backs off (a run of it stopped with an
    error): its own name, marked, so that a listing says so and a person's resume takes it."""
    return worker + _BACKOFF


def is_backoff(owner: str) -> bool:
    """True when ``owner`` is a worker's backoff (:func:`backoff_owner`): no run holds the task."""
    return owner.endswith(_BACKOFF)


def describe_holder(row: TaskRow, now: float) -> str | None:
    """Who runs the task, as a listing shows it (``tether tasks``): the lease's holder, and what
    becomes of the task if that holder is gone. ``None`` when nobody holds it (see ``TaskRow.runner``).

    Only a process on this machine can be seen to be gone: its task is taken over at once by a
    worker running here. Of any other holder the listing says when its lease ends, which is when
    another worker takes the task over if the holder has stopped renewing it.
    """
    owner = row.runner(now)
    if owner is None:
        return None
    if owner_is_dead(owner):
        return f"{owner} (process gone: a worker running on this host takes it over at once)"
    expires = row.lease_expires
    if expires is None:
        return owner
    until = _clock(expires, now)
    if is_backoff(owner):
        return f"{owner.removesuffix(_BACKOFF)}: a run stopped with an error; claimed again from {until}"
    if owner.partition(":")[0] == socket.gethostname():
        return f"{owner} until {until}, renewed while it runs"
    return f"{owner} until {until}; if that process has stopped, another worker takes it over then"


def _clock(at: float, now: float) -> str:
    """A time a lease ends, for a person: the local time (with its date when not today) and how far off."""
    when, today = datetime.fromtimestamp(at), datetime.fromtimestamp(now)
    shown = when.strftime("%H:%M:%S" if when.date() == today.date() else "%Y-%m-%d %H:%M:%S")
    return f"{shown} (in {max(0, round(at - now))} s)"
