"""Leases as a run holds them: taking one (from a holder that is dead on this machine, at once),
and the heartbeat that renews it while the run goes on."""

from __future__ import annotations

import os
import socket
import threading
import time

from tether.errors import TaskBusyError
from tether.store import Store

__all__ = ["Heartbeat", "acquire", "owner_is_dead"]


def acquire(store: Store, tenant: str, task_id: str, owner: str, ttl: float, *, force: bool = False) -> int:
    """Take the task's lease for ``owner``: a free one, an expired one, or one whose holder is a dead
    process on this machine (or any, with ``force``); else :class:`TaskBusyError` naming the holder."""
    now = time.time()
    token = store.acquire_lease(tenant, task_id, owner, ttl, now)
    if token is not None:
        return token
    row = store.get_task(tenant, task_id)
    if row is not None and row.lease_owner is not None and (force or owner_is_dead(row.lease_owner)):
        token = store.acquire_lease(tenant, task_id, owner, ttl, now, steal_from=row.lease_owner)
        if token is not None:
            return token
    holder = row.lease_owner if row is not None else None
    raise TaskBusyError(task_id, owner=holder, expires=row.lease_expires if row is not None else None)


class Heartbeat:
    """Renews a task's lease in the background while a run holds it."""

    def __init__(self, store: Store, tenant: str, task_id: str, token: int, ttl: float) -> None:
        self._store, self._tenant, self._task_id, self._token, self._ttl = store, tenant, task_id, token, ttl
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._beat, name=f"tether-heartbeat-{task_id}", daemon=True)

    def _beat(self) -> None:
        interval = self._ttl / 3
        while not self._stop.wait(interval):
            renewed = self._store.renew_lease(self._tenant, self._task_id, self._token, self._ttl, time.time())
            if not renewed:
                self.lost = True  # the next append is refused by its fencing token
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()



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


