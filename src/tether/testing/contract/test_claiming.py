"""Claiming: a worker takes the task due first, each once, never one that is held, waiting or asleep."""

from __future__ import annotations

import time
from dataclasses import replace

from tether.store import Store
from tether.testing.contract._records import TENANT, _event, _row


def test_claim_takes_the_task_due_first(store: Store) -> None:
    now = time.time()

    def task(task_id: str, status: str, created: float, wake: float | None = None, lease: float | None = 0) -> None:
        row = replace(_row(task_id, status=status), created_at=created, wake_at=wake)
        held = {} if lease == 0 else {"lease_owner": "w0", "lease_expires": lease, "lease_token": 1}
        store.create_task(TENANT, replace(row, **held), _event(1))  # type: ignore[arg-type]

    task("done", "completed", created=now - 5000)
    task("held", "running", created=now - 1000, lease=now + 30)  # its worker is alive
    task("no-expiry", "running", created=now - 2000, lease=None)  # an owner and no expiry: held, whatever the time
    task("waiting", "awaiting_input", created=now - 900)  # no timeout: only an answer wakes it
    task("later", "sleeping", created=now - 800, wake=now + 100)
    task("pending", "pending", created=now - 100)
    task("early", "pending", created=now + 50)  # made by a host whose clock runs ahead: due at its time
    task("orphan", "running", created=now - 50, lease=now - 1)  # its worker's lease ran out
    task("woken", "sleeping", created=now - 700, wake=now - 200)
    task("answered", "awaiting_input", created=now - 600, wake=now - 10)
    store.create_task("another-tenant", replace(_row("theirs"), created_at=now - 9000), _event(1))
    taken = [store.claim(TENANT, f"w{i}", 3600, now) for i in range(1, 6)]  # each claimer takes one, once
    # Oldest due first: a sleeper or an answered wait by its wake-up, a pending or orphaned task by its creation.
    assert [c and c[0] for c in taken] == ["woken", "pending", "orphan", "answered", None]
    assert taken[2] is not None and taken[2][1] == 2  # a lease taken over is fenced anew
    late = [store.claim(TENANT, "w9", 3600, now + 101) for _ in range(4)]
    assert [c and c[0] for c in late] == ["held", "early", "later", None]  # held's lease ran out meanwhile
