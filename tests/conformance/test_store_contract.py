"""The shipped store contract (``tether.store.contract``), run against every backend here."""

from __future__ import annotations

import pytest

from tether.store import open_store
from tether.store.contract import CHECKS, Check, run_contract


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_store_contract(store_url: str, check: Check) -> None:
    if check.capability == "push" and store_url.startswith("sqlite"):
        pytest.skip("SQLite wakes on other connections' commits (data_version), tested with real processes")
    store = open_store(store_url)
    try:
        check(store)
    finally:
        store.close()


def test_run_contract_reports_a_broken_backend() -> None:
    """The contract can fail: a backend that ignores expected_version is caught."""
    from tether.store.memory import MemoryStore

    class Careless(MemoryStore):
        def append(self, tenant, task_id, events, expected_version, *, fence=None, index=None):  # type: ignore[no-untyped-def]
            actual = self.get_task(tenant, task_id)
            version = actual.version if actual is not None else expected_version
            moved = [e._replace(seq=version + i) for i, e in enumerate(events, start=1)]
            return super().append(tenant, task_id, moved, version, fence=fence, index=index)

    results = {r.check.name: r.passed for r in run_contract(lambda: Careless("memory://"))}
    assert results["append_at_a_stale_version_writes_nothing"] is False
    assert results["create_then_read_back"] is True


def test_run_contract_reports_a_backend_appending_streams_one_by_one() -> None:
    """A backend whose append across streams is a loop of single appends (each its own commit) is
    caught: a stale stream after a good one leaves the good one written."""
    from tether.store.memory import MemoryStore

    class OneByOne(MemoryStore):
        def append_streams(self, tenant, appends):  # type: ignore[no-untyped-def]
            for part in appends:
                index, fence = part.index, part.fence
                self.append(tenant, part.task_id, part.events, part.expected_version, fence=fence, index=index)

    results = {r.check.name: r.passed for r in run_contract(lambda: OneByOne("memory://"))}
    assert results["append_streams_at_a_stale_version_on_one_stream_writes_nothing"] is False
    assert results["append_streams_honours_the_fence"] is False
    assert results["append_streams_writes_every_stream"] is True
