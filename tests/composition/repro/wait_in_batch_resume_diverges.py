"""Invariants 3-5: a wait in one asyncio.gather branch beside a sibling's call. Run as a worker with
concurrency runs it (several async runs in one process), the wait's request is recorded before the
sibling's call; the next run of the task (a resume before the answer, a takeover of a dead worker's lease,
a fork inside the batch) diverges: "the history records call #3 effect but the code now asks for the
answer to 'approve'". Under a worker the task is parked (before 49cf363, workers ran it again and again)."""

import asyncio
import sys

import tether

app = tether.App(sys.argv[1] if len(sys.argv) > 1 else "memory://")


@app.tool(readonly=True)
async def lookup(q: str) -> str:
    return q


@app.tool
async def effect(label: str) -> str:
    await asyncio.sleep(0.001)
    return label


@app.task
async def approval(ctx: tether.AsyncTaskContext) -> list:
    await ctx.call(lookup, "model")

    async def approve_then_refund() -> str | None:
        if await ctx.wait_for_input("approve"):
            return await ctx.call(effect, "refund")
        return None

    async def email() -> str:
        return await ctx.call(effect, "email")

    return list(await asyncio.gather(approve_then_refund(), email(), ctx.call(lookup, "policy")))


async def main() -> list:  # several runs at once, as `tether worker -c 4` runs them
    return await asyncio.gather(*(app.run_async(approval, task_id=f"a{i}") for i in range(4)))


print([h.status.value for h in asyncio.run(main())])
for entry in app.history("a0"):
    print(" ", entry.seq, entry.summary)
bad = 0
app.fork("a0", at=app.state("a0").version - 1, new_id="a0-fork")  # inside the batch, before it waits
for task_id in ["a0", "a0-fork"]:
    try:
        print(task_id, "resumed, no answer yet:", app.resume(task_id).status.value)
    except tether.NonDeterminismError as exc:
        bad += 1
        print(task_id, "NonDeterminismError:", exc)
sys.exit(1 if bad else 0)
