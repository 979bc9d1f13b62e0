"""The idempotency ledger: a key begun once, its first result kept."""

from __future__ import annotations

import time

from tether.store import Store
from tether.testing.contract._records import TENANT


def test_the_ledger_runs_a_key_once(store: Store) -> None:
    now = time.time()
    assert store.ledger_begin(TENANT, "k", now).status == "new"
    again = store.ledger_begin(TENANT, "k", now)
    assert again.status == "started"
    done = store.ledger_finish(TENANT, "k", '"paid"', now)
    assert done.status == "done"
    assert store.ledger_finish(TENANT, "k", '"paid twice"', now).result in ('"paid"', b'"paid"')  # the first stands
    assert store.ledger_begin(TENANT, "k", now).status == "done"
    store.ledger_forget(TENANT, "k")
    assert store.ledger_get(TENANT, "k") is None
