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


def test_a_wait_for_a_claimable_task_ends_by_its_timeout_or_a_create(store: Store) -> None:
    """``wait_for_change(timeout, claimable=True)`` (how an idle worker waits) is part of the
    protocol: it returns by its timeout when nothing happens, and a store may wake it for any
    commit, but it must not sleep through the one that makes a task claimable by more than its
    timeout (the worker polls again then)."""
    began = time.monotonic()
    assert store.wait_for_change(0.05, claimable=True) in (True, False)
    assert time.monotonic() - began < 5.0
    woke: list[bool] = []
    reader = threading.Thread(target=lambda: woke.append(store.wait_for_change(0.5, claimable=True)))
    reader.start()
    _create(store, "claimable")
    reader.join(6)
    assert not reader.is_alive() and len(woke) == 1
