"""Wake-ups: a reader waiting for a change on a store wakes as soon as that store commits one
(optional: ``push``)."""

from __future__ import annotations

import threading
import time

import pytest

from tether.store import Store
from tether.testing.contract._records import TENANT, _create, _event


@pytest.mark.tether_requires("push")
def test_another_writer_wakes_a_waiting_reader(store: Store) -> None:
    _create(store, "a")
    woke: list[bool] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        woke.append(store.wait_for_change(5.0))

    reader = threading.Thread(target=wait)
    reader.start()
    started.wait()
    time.sleep(0.05)
    store.append(TENANT, "a", [_event(2)], 1)
    reader.join(6)
    assert woke == [True]
