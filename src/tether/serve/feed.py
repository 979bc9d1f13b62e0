"""Live updates for server-sent events, driven by the store's own wake-ups.

One thread waits on :meth:`Store.wait_for_change` (SQLite's ``data_version``, PostgreSQL's
LISTEN/NOTIFY) and wakes every listener when something committed; each listener then reads
what changed for its tenant. The server's own writes go through the same connection, which
SQLite does not report to itself, so the API calls :meth:`ChangeFeed.bump` after each.
"""

from __future__ import annotations

import asyncio
import threading

from tether.errors import TetherError
from tether.store import Store

__all__ = ["ChangeFeed"]


class ChangeFeed:
    """A counter of store changes that asyncio listeners can await."""

    def __init__(self, store: Store, *, timeout: float = 10.0) -> None:
        self._store = store
        self._timeout = timeout
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._thread: threading.Thread | None = None
        self.count = 0

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tether-serve-feed", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                changed = self._store.wait_for_change(self._timeout, interrupt=self._stop)
            except TetherError:  # the store is away for a moment: listeners keep their heartbeat
                self._stop.wait(1.0)
                continue
            if changed:
                self.bump()

    def bump(self) -> None:
        """Wake every listener (something may have changed)."""
        with self._lock:
            self.count += 1
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed
                pass

    async def wait(self, since: int, timeout: float) -> bool:
        """Wait until the count moves past ``since`` (``True``) or ``timeout`` seconds pass (``False``)."""
        self.start()
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            if self.count != since:  # a change landed while the listener was busy
                return True
            self._waiters.add(entry)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._waiters.discard(entry)
