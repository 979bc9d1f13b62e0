"""Inside a running event loop (every Agents SDK, Pydantic AI and ADK program is in one), the long
synchronous calls that would start a loop of their own refuse, naming an async twin; the twin named
works from the same loop."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

import tether
from tether.errors import TetherError
from tether.runtime.handles import CheckReport
from tether.timetravel import ReplayReport


def test_replay_check_and_cancel_inside_a_loop_name_an_async_twin_that_works() -> None:
    app = tether.App("memory://")
    sent: list[str] = []

    @app.tool
    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    @app.task
    async def mail(ctx: tether.AsyncTaskContext) -> Any:
        await ctx.call(send, "ada")
        return await ctx.wait_for_input("approve", prompt="Send the rest?")

    try:
        run = app.run(mail, task_id="m1")  # outside any loop: waits for its input
        assert run.status is tether.Status.AWAITING_INPUT

        async def inside() -> list[Any]:
            results = []
            for name, args in [("replay", ("m1",)), ("check", ()), ("cancel", ("m1",))]:
                with pytest.raises(TetherError) as refused:
                    getattr(app, name)(*args)
                named = re.search(r"await app\.(\w+)\(\)", str(refused.value))
                assert named is not None, str(refused.value)
                assert named.group(1) == f"{name}_async"
                results.append(await getattr(app, named.group(1))(*args))
            return results

        replayed, checked, cancelled = asyncio.run(inside())
        assert isinstance(replayed, ReplayReport) and replayed.clean
        assert isinstance(checked, CheckReport) and [r.task_id for r in checked.reports] == ["m1"]
        assert cancelled.status is tether.Status.CANCELLED
        assert sent == ["ada"]  # replay and check ran no tool
    finally:
        app.close()
