"""The task list's live feed: one read of a tenant's newest tasks per change, shared by every client
watching that tenant.

Each client of ``GET /v1/events`` compares the newest tasks' versions with those it saw last and
sends the tasks that moved. Read by each client, a change cost one listing per client (each one
the newest 500 index rows, each brought up to its newest event), and so did every client's quiet
recheck; a server with 50 inspectors open read the index 50 times for every commit. Here a client
takes the last read if it began after the change the client was woken for (the feed's count
moved before the read started, so the read sees it), and otherwise starts one that the clients
woken meanwhile share. A task's summary is made once per read for all of them.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tether.serve._json import summary_json
from tether.store import TaskFilter, TaskRow

if TYPE_CHECKING:
    from tether.runtime.app import App
    from tether.serve.feed import ChangeFeed

__all__ = ["NEWEST", "Listings", "Look"]

NEWEST = 500
"""How many of a tenant's newest tasks the live list follows."""


class Look:
    """One read of a tenant's newest tasks: the feed's count when it began, the read (its rows by
    id, once done), and the summaries made of them so far (by id and version)."""

    __slots__ = ("bodies", "count", "read", "started")

    def __init__(self, count: int, read: asyncio.Task[dict[str, TaskRow]]) -> None:
        self.count = count
        self.started = time.monotonic()
        self.read = read
        self.bodies: dict[tuple[str, int], dict[str, Any]] = {}

    async def rows(self) -> dict[str, TaskRow]:
        """The rows read, by id, waited for if the read is under way (a client that leaves meanwhile
        does not stop it for the others)."""
        return await asyncio.shield(self.read)

    async def summary(self, get_app: Callable[[], App], row: TaskRow) -> dict[str, Any]:
        """The task list's line for ``row``, made off the event loop, once for every client."""
        key = (row.task_id, row.version)
        body = self.bodies.get(key)
        if body is None:
            body = self.bodies[key] = await asyncio.to_thread(_summary, get_app, row)
        return body


class Listings:
    """The last read of each tenant's newest tasks, per event loop (a read is a task of its loop)."""

    def __init__(self, feed: ChangeFeed, *, newest: int = NEWEST) -> None:
        self._feed = feed
        self._newest = newest
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Look]] = (
            weakref.WeakKeyDictionary()
        )
        self.reads: Counter[str] = Counter()
        """How many reads of the store were made, by tenant (for tests and the curious)."""

    def look(self, tenant: str, get_app: Callable[[], App], *, count: int, max_age: float) -> Look:
        """A read of ``tenant``'s newest tasks that began once the feed's count was ``count`` or
        more, and at most ``max_age`` seconds ago: the last one, when it is (done or under way),
        or a new one. ``get_app`` is called in the thread that reads. A read that fails is the
        failure of every client waiting on it; the next look reads again."""
        loop = asyncio.get_running_loop()
        looks = self._by_loop.setdefault(loop, {})
        last = looks.get(tenant)
        if last is not None and last.count >= count and time.monotonic() - last.started <= max_age:
            return last
        count = self._feed.count  # taken before the read starts: whatever it counted, the read sees
        look = looks[tenant] = Look(count, loop.create_task(asyncio.to_thread(_listing, get_app, self._newest)))
        self.reads[tenant] += 1

        def settled(read: asyncio.Task[dict[str, TaskRow]]) -> None:
            failed = read.cancelled() or read.exception() is not None  # (its exception retrieved)
            if failed and looks.get(tenant) is look:
                del looks[tenant]

        look.read.add_done_callback(settled)
        return look


def _listing(get_app: Callable[[], App], newest: int) -> dict[str, TaskRow]:
    app = get_app()
    return {r.task_id: r for r in app.store.list_tasks(app.tenant, TaskFilter(), limit=newest, offset=0)}


def _summary(get_app: Callable[[], App], row: TaskRow) -> dict[str, Any]:
    return summary_json(get_app(), row)
