"""Async tasks' group commit, inside one process: a forked child's commit thread of its own, and a
transaction that wakes its branches a few per turn of the loop (the kit's
tether.testing.runtime.parallel.test_async_io checks the store I/O on every backend)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import tether
from tether.testing.runtime.parallel.test_async_io import GIVE_UP, _tools


def test_a_forked_child_writes_through_a_commit_thread_of_its_own() -> None:
    # An app whose commit thread runs, copied into a child by fork (which copies no threads):
    # the child's records must still be written (by a thread of its own), not wait forever.
    app = tether.App("memory://")  # the memory store is copied whole: no connection is shared
    app.engine.commits.always = True  # a lone run's records go through the thread too
    send, _ = _tools(app)

    @app.task(name="one")
    async def one(ctx: tether.AsyncTaskContext) -> str:
        return str(await ctx.call(send, 1))

    assert asyncio.run(app.run_async(one, task_id="parent")).output == "sent 1"  # the parent's thread runs
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(int(GIVE_UP))  # a child whose records are never written dies, and the test fails
            code = 0 if asyncio.run(app.run_async(one, task_id="child")).output == "sent 1" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    app.close()


def test_a_transaction_wakes_its_branches_a_few_per_turn_of_the_loop() -> None:
    """However many branches one transaction wakes, a turn of the loop wakes at most ``PER_TURN`` of
    them: whatever else the loop serves gets its turns in between, not after all of them. Each
    branch gets its own outcome."""
    from tether.runtime._commits import PER_TURN, Wakeups

    refused = RuntimeError("refused")

    async def main() -> tuple[list[int], list[asyncio.Future[None]]]:
        loop = asyncio.get_running_loop()
        waiters: list[asyncio.Future[None]] = [loop.create_future() for _ in range(3 * PER_TURN + 5)]
        woken = Wakeups()
        woken.add(loop, [([], w) for w in waiters[:-1]], None)
        woken.add(loop, [([], waiters[-1])], refused)
        sender = threading.Thread(target=woken.send)  # from another thread, as the commit thread does
        sender.start()
        sender.join()
        done: list[int] = []
        while not all(w.done() for w in waiters):
            await asyncio.sleep(0)  # one turn of the loop
            done.append(sum(w.done() for w in waiters))
        return done, waiters

    done, waiters = asyncio.run(main())
    steps = [b - a for a, b in zip([0, *done], done, strict=False)]
    assert max(steps) <= PER_TURN and len([s for s in steps if s]) >= 4, steps
    assert all(w.result() is None for w in waiters[:-1]) and waiters[-1].exception() is refused
