"""Who holds a task's lease, as every reader of an index row says it (the CLI's and serve's "held by",
the memory store's claim and lease take): the owner until the lease expires; one without expiry is held."""

from __future__ import annotations

from dataclasses import replace

from tether.store import TaskRow

ROW = TaskRow("t", "default", "job", "running", None, None, 0.0, 0.0, 1)


def test_a_lease_is_held_by_its_owner_until_it_expires() -> None:
    held = replace(ROW, lease_owner="w1", lease_expires=100.0, lease_token=1)
    assert held.held_by(99.9) == "w1"
    assert held.held_by(100.0) is None  # expired at its expiry, as the stores' `lease_expires <= now` says
    assert replace(held, lease_expires=None).held_by(1e12) == "w1"  # an owner and no expiry: held
    assert ROW.held_by(0.0) is None and replace(ROW, lease_expires=100.0).held_by(0.0) is None


def test_a_finished_task_is_run_by_nobody_though_its_lease_is_still_held() -> None:
    """Listings show who runs a task (``runner``): a finished task's lease, still held while its run
    gives it back (or because its process died first), runs nothing; the lease's rule is unchanged."""
    for status in ("completed", "failed", "cancelled"):
        done = replace(ROW, status=status, lease_owner="w1", lease_expires=100.0, lease_token=1)
        assert done.runner(50.0) is None
        assert done.held_by(50.0) == "w1"  # claims and lease takes still see the lease
    for status in ("pending", "running", "sleeping", "awaiting_input"):
        live = replace(ROW, status=status, lease_owner="w1", lease_expires=100.0, lease_token=1)
        assert live.runner(50.0) == "w1" and live.runner(100.0) is None


def test_tether_tasks_never_says_a_finished_tasks_dead_process_will_be_taken_over() -> None:
    """A run killed after its task finished but before it gave the lease back: the listing says
    nobody runs it (no "process gone: the next run takes it over" for a task no run takes)."""
    import socket
    import time

    import tether

    app = tether.App("memory://")
    job = app.task(name="job")(lambda ctx: 1)
    running = app.start(job).task_id
    done = app.run(job).task_id
    dead = f"{socket.gethostname()}:999999999:gone"  # a pid no process has
    for task_id in (running, done):
        assert app.store.acquire_lease(app.tenant, task_id, dead, 60.0, time.time()) is not None
    lines = {line.task_id: line for line in app.list_tasks()}
    assert lines[done].held_by is None
    assert lines[running].held_by is not None and "process gone" in lines[running].held_by
