"""Taking a lease, at the runtime's edge: a lease let go between the refusal and the read is taken (the
kit's tether.testing.runtime.leases.test_ledger_and_leases checks the ledger and leases on every
backend)."""

from __future__ import annotations

from typing import Any

import tether


def test_a_lease_let_go_between_the_refusal_and_the_read_is_taken() -> None:
    """A worker lets its lease go just after ``acquire`` was refused: the row then names no holder,
    and the lease is taken, not refused as held "by None" (seen once when a cancel met a worker)."""
    from tether.runtime.leases import acquire
    from tether.store.memory import MemoryStore

    class LetGo(MemoryStore):
        refused = 0

        def acquire_lease(self, *args: Any, **kwargs: Any) -> int | None:
            if self.refused == 0:
                self.refused = 1
                return None  # held at that moment; let go before the row is read
            return super().acquire_lease(*args, **kwargs)

    app = tether.App(LetGo())
    app.log.create(type="t", task_id="j")
    assert acquire(app.store, app.tenant, "j", "me", 30.0, force=True) >= 1
