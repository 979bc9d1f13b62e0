"""Invariant 5 (a finished task replays clean): an answer sent before the task asks, for a wait in one
asyncio.gather branch beside a sibling's call. The run completes; its replay diverges ("the history
records call #1 issue_refund but the code now asks for call #1 send_email"). Since d2c54aa (the fix of
a wait in a parallel branch); it replays clean at 5eab8ad."""

import asyncio
import sys

import tether

app = tether.App(sys.argv[1] if len(sys.argv) > 1 else "memory://")


@app.tool
async def send_email(to: str) -> str:
    return f"sent {to}"


@app.tool
async def issue_refund(order: str) -> str:
    return f"refunded {order}"


@app.task
async def support(ctx: tether.AsyncTaskContext, order: str) -> list:
    async def approve_then_refund() -> str | None:
        if await ctx.wait_for_input("approve"):
            return await ctx.call(issue_refund, order)
        return None

    async def email() -> str:
        return await ctx.call(send_email, "customer")

    return list(await asyncio.gather(approve_then_refund(), email()))


app.start(support, "o1", task_id="s1")
app.send_input("s1", "approve", True)  # answered before the task asks
print(app.resume("s1").status.value)
report = app.replay("s1")
print(report)
sys.exit(0 if report.clean else 1)
