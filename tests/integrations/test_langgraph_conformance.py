"""LangGraph's published checkpointer conformance suite, every capability, against TetherSaver.

Run on every backend and in both modes: ``async`` drives the saver's async methods (as an async
graph does); ``sync`` drives its sync methods, through a twin whose async methods call them directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from tether.integrations.langgraph import TetherSaver


class SyncDriven(TetherSaver):
    """The suite only awaits; this twin answers each awaited call with the sync method, in the caller's thread."""

    async def aget_tuple(self, config: Any) -> Any:
        return self.get_tuple(config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        for tup in self.list(config, **kwargs):
            yield tup

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Any) -> None:
        self.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Any, *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)


@pytest.fixture(params=["async", "sync"])
def saver_class(request: pytest.FixtureRequest) -> type[TetherSaver]:
    return TetherSaver if request.param == "async" else SyncDriven


def test_conformance_every_capability(store_url: str, saver_class: type[TetherSaver]) -> None:
    @checkpointer_test(name=f"TetherSaver-{saver_class.__name__}")
    async def factory() -> AsyncIterator[TetherSaver]:
        saver = saver_class(store_url)
        yield saver
        saver.log.store.close()

    report = asyncio.run(validate(factory))
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert not failures, failures
    # Every capability was detected and run, the optional ones too (none skipped as "not implemented").
    passed = {name for name, r in report.results.items() if r.detected and r.passed}
    assert passed == {c.value for c in ALL_CAPABILITIES}
    assert all(r.tests_passed > 0 for r in report.results.values())
