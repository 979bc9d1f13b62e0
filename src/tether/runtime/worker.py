"""Workers: claim runnable tasks, run them under a lease, shut down gracefully."""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

from tether.errors import TetherError
from tether.runtime.run import run_claimed

if TYPE_CHECKING:
    from tether.runtime.app import App

__all__ = ["Worker"]

log = logging.getLogger("tether.worker")


class Worker:
    """Runs tasks for one app: ``concurrency`` threads, each claiming one task at a time.

    A claim takes the task's lease; a heartbeat renews it while the task runs;
    every append carries the lease's fencing token, so a worker that lost its
    lease (it was paused, or its network went away) cannot write. On SIGTERM or
    SIGINT the worker stops claiming and lets running tasks finish for up to
    ``grace`` seconds; a task still running then is left to its lease, which
    another worker takes over when it expires.
    """

    def __init__(
        self, app: App, *, concurrency: int = 1, idle_exit: bool = False, poll: float = 0.5, grace: float = 30.0
    ) -> None:
        if concurrency < 1:
            raise TetherError(f"concurrency must be at least 1, got {concurrency}")
        self.app = app
        self.concurrency = concurrency
        self.idle_exit = idle_exit
        self.poll = poll
        self.grace = grace
        self.stopping = threading.Event()
        self.runs = 0
        self._busy = 0
        self._lock = threading.Lock()

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
        try:
            for thread in threads:
                thread.start()
            while any(t.is_alive() for t in threads) and not self.stopping.is_set():
                time.sleep(0.05)
            deadline = time.monotonic() + self.grace
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.runs

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("worker %s: signal %d, finishing current tasks (grace %.0fs)", self.app.worker_id, signum, self.grace)
        self.stopping.set()

    def _loop(self) -> None:
        app = self.app
        while not self.stopping.is_set():
            try:
                claimed = app.store.claim(app.tenant, app.worker_id, app.lease_ttl, time.time())
            except TetherError:
                log.exception("worker %s: claim failed", app.worker_id)
                claimed = None
            if claimed is None:
                with self._lock:
                    idle = self._busy == 0
                if self.idle_exit and idle:
                    return
                # Wake as soon as another writer commits (a task started, answered, cancelled),
                # and at least every ``poll`` seconds for sleeps and timeouts that fall due.
                app.store.wait_for_change(self.poll, interrupt=self.stopping)
                continue
            task_id, token = claimed
            with self._lock:
                self._busy += 1
            started = time.monotonic()
            log.debug("worker %s: task %s started", app.worker_id, task_id, extra={"tether_run": (task_id, None, 0.0)})
            try:
                handle = run_claimed(app, task_id, token)
                elapsed = time.monotonic() - started
                # One record per run, with what a person watching the worker wants on one line.
                run = (task_id, handle.status.value, elapsed)
                log.info(
                    "worker %s: task %s %s in %.3fs", app.worker_id, task_id, run[1], elapsed, extra={"tether_run": run}
                )
            except TetherError as exc:
                # Not the task's failure (that is recorded in it): the run could not go on here.
                log.warning("worker %s: task %s stopped: %s", app.worker_id, task_id, exc)
            except Exception:
                log.exception("worker %s: task %s crashed the run", app.worker_id, task_id)
            finally:
                with self._lock:
                    self._busy -= 1
                    self.runs += 1
