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
