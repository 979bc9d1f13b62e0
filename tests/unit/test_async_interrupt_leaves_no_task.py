"""An async task's run stopped by an interrupt (Ctrl-C, SIGTERM, a KeyboardInterrupt inside a tool)
through the sync ``app.run`` raises ``RunInterrupted`` and leaves nothing behind on the event loop:
no asyncio task still holding the interrupt. Such a task logs "Task exception was never retrieved",
with a traceback, whenever the collector frees it — long after, inside unrelated code (on CPython
3.11, when that code was in the middle of ``ast.parse``, the parse failed with ``SystemError: AST
constructor recursion depth mismatch``: a test session reported every test passed, then exited 1).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator

import pytest

import tether


@pytest.fixture
def app() -> Iterator[tether.App]:
    app = tether.App("memory://")
    yield app
    app.close()


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_async_run_leaves_no_task_holding_the_interrupt(
    app: tether.App, caplog: pytest.LogCaptureFixture, stop: type[BaseException]
) -> None:
    @app.tool
    async def charge() -> str:
        await asyncio.sleep(0)
        raise stop  # stands for the process being stopped inside the call

    @app.tool
    async def email() -> str:
        await asyncio.sleep(0.05)  # still under way beside it
        return "sent"

    @app.task
    async def checkout(ctx: tether.AsyncTaskContext) -> list[str]:
        return list(await asyncio.gather(ctx.call(charge), ctx.call(email)))

    caplog.set_level(logging.ERROR, logger="asyncio")
    with pytest.raises((tether.RunInterrupted, SystemExit)):
        app.run(checkout, task_id="co")
    gc.collect()  # whatever was left in a cycle is freed (and would log) now, not at a random moment
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    assert app.state("co").call(1).status == "intended"  # type: ignore[union-attr]  # resumable, in doubt
