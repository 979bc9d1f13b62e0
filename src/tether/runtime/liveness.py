"""Whether any worker is there to act on a task, read off the workers' liveness records (each
worker writes one when it starts, at most every :data:`~tether.runtime.worker.HEARTBEAT` seconds
while it runs, and when it stops): what ``tether show``, the inspector and the HTTP API tell a
person when nothing moves. The words they say it in are :meth:`Liveness.note`'s, for all three."""

from __future__ import annotations

from typing import NamedTuple

from tether.runtime.worker import HEARTBEAT
from tether.store import Store, TaskRow, WorkerRow

__all__ = ["ALIVE_WITHIN", "Liveness", "ago_text", "liveness", "needs_worker"]

ALIVE_WITHIN = 3 * HEARTBEAT
"""Seconds since its last record within which a worker that has not said it stopped counts as
alive: three heartbeats, so one slow write does not make a running worker read as gone. A worker
killed without a word (SIGKILL, a lost machine) reads as gone once its last record is older."""
_LOOKED_AT = 50  # records read: more workers than this alive at once still reads as "50 alive"


class Liveness(NamedTuple):
    """The workers of a tenant as their records say at ``now``.

    Example:
        >>> Liveness(0, WorkerRow("h:1:a", 0.0, 100.0, app="support:app"), 400.0).note()
        'no worker has been seen for 5 min: run `tether worker support:app`'
    """

    alive: int
    """How many count as alive (seen within the window, see :data:`ALIVE_WITHIN`, and not stopped)."""
    last: WorkerRow | None
    """The most recently seen record, alive or not; ``None`` when no worker ever wrote one."""
    now: float

    @property
    def command(self) -> str:
        """How to start a worker for the app the last one ran (``module:app`` when none said)."""
        app = self.last.app if self.last is not None and self.last.app else "module:app"
        return f"tether worker {app}"

    def note(self) -> str | None:
        """What a person needs to hear when no worker is alive (``None`` when one is), commands in
        backticks: the terminal prints it as it is, the inspector sets them as code."""
        if self.alive:
            return None
        last = self.last
        if last is None:
            return f"no worker has run on this store yet: run `{self.command}`"
        if last.stopped_at is not None:
            ago = ago_text(self.now - last.stopped_at)
            return f"no worker is running: the last one stopped {ago} ago: run `{self.command}`"
        return f"no worker has been seen for {ago_text(self.now - last.seen_at)}: run `{self.command}`"


def ago_text(seconds: float) -> str:
    """A span as a person says it: ``40 s``, ``5 min``, ``3 h``, ``2 days``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def liveness(store: Store, tenant: str, now: float, *, within: float = ALIVE_WITHIN) -> Liveness:
    """The tenant's workers as their records say at ``now`` (one read): alive when seen in the last
    ``within`` seconds and not stopped."""
    rows = store.workers(tenant, limit=_LOOKED_AT)
    alive = sum(1 for w in rows if w.alive(now, within=within))
    return Liveness(alive, rows[0] if rows else None, now)


def needs_worker(row: TaskRow, now: float) -> bool:
    """Whether the task waits on a worker at ``now``: a claim may take it (pending, answered, a cancel
    or retry requested, a sleep or a wait's timeout due, a dead run's lease run out), no lease holds
    it, and it is not parked for a person."""
    due = row.due_at
    return due is not None and due <= now and row.held_by(now) is None and row.parked is None
