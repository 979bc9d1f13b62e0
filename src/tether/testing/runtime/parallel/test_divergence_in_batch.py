"""A divergence in one parallel branch stops every branch: a sibling's call past the record never runs
its tool, and the run writes nothing (the database compared before and after)."""
# mypy: disable-error-code="dict-item,no-any-return,type-arg"

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

import tether
from tether.testing import dump_database


class Crash(BaseException):
    """Stands for the process dying."""


def _everything_but_the_lease(url: str, app: tether.App) -> object:
    """The whole database, but for the task row's lease token, which the resume's lease moved: events,
    snapshots and the ledger byte for byte, and every other column of the row."""
    dump = dump_database(url, app.store)
    row = app.store.get_task(app.tenant, "t")
    assert row is not None
    if isinstance(dump, str):
        dump = [line for line in dump.splitlines() if not line.startswith('INSERT INTO "tasks"')]
    elif "_tasks" in dump:  # type: ignore[operator]
        dump = {**dump, "_tasks": {k: v.events for k, v in dump["_tasks"].items()}}  # type: ignore[index]
    else:
        dump = {k: v for k, v in dump.items() if k != "tasks"}  # type: ignore[attr-defined]
    return dump, replace(row, lease_token=0)


@pytest.mark.tether_requires("dump")
@pytest.mark.parametrize("swallowed", [False, True])
def test_a_divergent_branch_stops_its_siblings_before_they_run_or_write(store_url: str, swallowed: bool) -> None:
    app = tether.App(store_url)
    effects: list[str] = []
    second_run = {"on": False}

    @app.tool
    async def charge(order: str) -> str:
        effects.append(f"charge {order}")
        return order

    @app.tool
    async def refund(order: str) -> str:
        effects.append(f"refund {order}")
        return order

    @app.tool
    async def notify(to: str) -> str:
        effects.append(f"notify {to}")
        return to

    @app.task
    async def job(ctx: tether.AsyncTaskContext) -> list:
        if not second_run["on"]:
            await ctx.call(charge, "o1")
            raise Crash  # the process dies with call #1 recorded

        async def first() -> str:
            # The code changed: call #1 was charge("o1"); it now asks for refund("o1"). Code that swallows
            # the error (an agent framework catching a tool's exceptions) goes on past it.
            try:
                return await ctx.call(refund, "o1")
            except Exception:
                if not swallowed:
                    raise
                await asyncio.sleep(0)
                return await ctx.call(notify, "after the divergence")

        async def second() -> str:
            return await ctx.call(notify, "customer")  # call #2: past the record, it would run live

        return list(await asyncio.gather(first(), second()))

    with pytest.raises(Crash):
        app.run(job, task_id="t")
    effects.clear()
    second_run["on"] = True
    before = _everything_but_the_lease(store_url, app)
    with pytest.raises(tether.NonDeterminismError, match="charge"):
        app.resume("t")
    assert effects == [], "a branch ran a tool after its sibling diverged"
    assert _everything_but_the_lease(store_url, app) == before
    assert app.get("t").status is tether.Status.RUNNING  # as it was, for fixed code to resume
