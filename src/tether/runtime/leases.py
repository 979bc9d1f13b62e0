"""Leases as a run holds them: taking one (from a holder that is dead on this machine, at once),
and the heartbeat that renews it while the run goes on."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from tether.errors import TaskBusyError, TetherError
from tether.store import Store

__all__ = ["Heartbeat", "acquire", "owner_is_dead"]

_log = logging.getLogger("tether")


def acquire(store: Store, tenant: str, task_id: str, owner: str, ttl: float, *, force: bool = False) -> int:
    """Take the task's lease for ``owner``: a free one, an expired one, or one whose holder is a dead
    process on this machine (or any, with ``force``); else :class:`TaskBusyError` naming the holder."""
    now = time.time()
    for _ in range(3):  # a lease let go between the refusal and the read of its row is free: take it
        token = store.acquire_lease(tenant, task_id, owner, ttl, now)
        if token is not None:
            return token
        row = store.get_task(tenant, task_id)
        if row is None or row.lease_owner is not None:
            break
    if row is not None and row.lease_owner is not None and (force or owner_is_dead(row.lease_owner)):
        token = store.acquire_lease(tenant, task_id, owner, ttl, now, steal_from=row.lease_owner)
        if token is not None:
            return token
    holder = row.lease_owner if row is not None else None
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


