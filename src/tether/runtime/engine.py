"""The engine: what the runtime's parts share for one app.

An :class:`~tether.App` builds one and is the public facade over it; runs, the worker, the
recorder, the call flow, sessions and time travel take the engine (or the one part of it they
need) and never the app, so the runtime's modules import one way: the app imports them, they
import the engine, and the engine imports none of them.
"""

from __future__ import annotations

import os
import socket
import uuid

from tether.log import TaskLog
from tether.runtime._commits import CommitThread
from tether.runtime.ledger import Ledger
from tether.runtime.specs import Registry, TaskSpec

__all__ = ["Engine"]


class Engine:
    """The task log and its store, the tenant, the registered code, the commit thread, the ledger,
    this process's worker id, the lease's time and the inline-wait policy."""

    __slots__ = ("commits", "inline_wait", "lease_ttl", "ledger", "log", "registry", "store", "tenant", "worker_id")

    def __init__(self, log: TaskLog, *, lease_ttl: float, inline_wait: float) -> None:
        self.log = log
        self.store = log.store
        self.tenant = log.tenant
        self.registry = Registry()
        """The tasks and tools registered with ``@app.task`` and ``@app.tool``."""
        self.commits = CommitThread(log)
        """Writes async tasks' records off their event loops (see ``runtime/_commits.py``)."""
        self.ledger = Ledger(self.store, self.tenant)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        """Who holds the leases this process takes: host, process id and a per-app suffix."""
        self.lease_ttl = lease_ttl
        """Seconds a run holds a task without renewing its lease."""
        self.inline_wait = inline_wait
        """Sleeps and backoffs up to this many seconds wait in the running process; longer ones suspend."""

    def spec_of(self, task_id: str) -> TaskSpec:
        """The registered code of a stored task (refused, naming the type, when it is not registered)."""
        return self.registry.task(self.log.load(task_id).type)

    def close(self) -> None:
        self.commits.close()
        self.store.close()
