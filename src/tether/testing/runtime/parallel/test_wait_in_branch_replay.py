"""A wait in one branch of a gather, beside siblings that call: the calls keep their ordinals on
replay whether the answer came before the question or after it, so each effect runs once."""
# mypy: disable-error-code="no-any-return,type-arg"

from __future__ import annotations

import asyncio

import pytest

import tether


class Crash(BaseException):
    """Stands for the process dying after the batch."""


@pytest.mark.parametrize("answered", ["before_asked", "after_asked"])
def test_a_branch_that_waits_then_calls_replays_beside_a_calling_sibling(store_url: str, answered: str) -> None:
    app = tether.App(store_url)
    effects: list[str] = []
    crash = {"on": True}

    @app.tool(readonly=True)
    async def lookup(q: str) -> str:
        await asyncio.sleep(0.005)
        return q

    @app.tool
    async def effect(label: str) -> str:
        effects.append(label)
        return label

    @app.task
    async def approval(ctx: tether.AsyncTaskContext) -> list:
        async def approve_then_refund() -> str | None:
            ok = await ctx.wait_for_input("approve")
            return await ctx.call(effect, "refund") if ok else None

        async def email() -> str:
            return await ctx.call(effect, "email")

        done = await asyncio.gather(approve_then_refund(), email(), ctx.call(lookup, "policy"))
        if crash["on"]:
            raise Crash  # the process dies with the whole batch recorded
        return list(done)

    app.start(approval, task_id="a")
    if answered == "before_asked":
        app.send_input("a", "approve", True)
    else:
        assert app.resume("a").status is tether.Status.AWAITING_INPUT
        app.send_input("a", "approve", True)
    with pytest.raises(Crash):
        app.resume("a")
    crash["on"] = False
    assert app.resume("a").output == ["refund", "email", "policy"]
    assert sorted(effects) == ["email", "refund"]  # each once: no divergence, nothing run again
    assert app.replay("a").clean
