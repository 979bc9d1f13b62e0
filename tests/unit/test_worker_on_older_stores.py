"""A worker on a store written against the protocol before ``wait_for_change`` took ``claimable``
(a backend of a user's own) waits on it as the protocol then said, and runs its tasks."""

from __future__ import annotations

import threading
import time

import tether
from tether.runtime.worker import Worker
from tether.store.memory import MemoryStore


class OlderStore(MemoryStore):
    """A store whose wait knows nothing of ``claimable``."""

    def __init__(self) -> None:
        super().__init__()
        self.waits = 0

    def wait_for_change(self, timeout: float, *, interrupt: threading.Event | None = None) -> bool:  # type: ignore[override]
        self.waits += 1
        return super().wait_for_change(timeout, interrupt=interrupt)


def test_a_worker_runs_tasks_on_a_store_whose_wait_takes_no_claimable() -> None:
    store = OlderStore()
    app = tether.App(store)

    @app.task
    def echo(ctx: tether.TaskContext, x: int) -> int:
        return x

    worker = Worker(app.engine, poll=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while store.waits == 0:  # idle: it waits on the store
            assert thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        handle = app.start(echo, 7)
        while app.get(handle.task_id).status is not tether.Status.COMPLETED:
            assert thread.is_alive() and time.monotonic() < deadline, app.get(handle.task_id).status
            time.sleep(0.01)
        assert app.get(handle.task_id).output == 7
    finally:
        worker.stop()
        thread.join(30)
        app.close()
