"""The app the composition scenarios' workers import: a task with a conversation and a wait, a plain
task, and the agent of the parallel-approval scenario (three lookups, then a wait in one branch of a
gather beside a sibling's email). Side effects go to a SQLite sink, one row per execution."""

from __future__ import annotations

import asyncio
import os
import sqlite3

import tether

app = tether.App(os.environ["TETHER_TEST_URL"], lease_ttl=float(os.environ.get("TETHER_TEST_LEASE_TTL", "30")))


def _effect(name: str) -> None:
    conn = sqlite3.connect(os.environ["TETHER_TEST_SINK"], timeout=30)
    try:
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS effects (task TEXT, name TEXT, key TEXT)")
            call = tether.current_call()
            conn.execute("INSERT INTO effects VALUES (?, ?, ?)", (call.key.split(":")[0], name, call.key))
    finally:
        conn.close()


@app.task
def chat(ctx: tether.TaskContext, question: str) -> str:
    ctx.session.add("user", question)
    answer = ctx.wait_for_input("answer", prompt=question)
    ctx.session.add("assistant", str(answer))
    return str(answer)


@app.task
def plain(ctx: tether.TaskContext, n: int) -> int:
    return n * 2


@app.tool(readonly=True)
async def model(turn: int) -> dict:
    await asyncio.sleep(0.002)
    return {"turn": turn}


@app.tool(readonly=True)
async def lookup(q: str) -> str:
    await asyncio.sleep(0.005)
    return q.upper()


@app.tool
async def issue_refund(order: str) -> str:
    _effect("refund")
    await asyncio.sleep(0.002)
    return f"refunded {order}"


@app.tool
async def send_email(to: str) -> str:
    _effect("email")
    await asyncio.sleep(0.002)
    return f"sent {to}"


@app.task
async def support(ctx: tether.AsyncTaskContext, order: str) -> list:
    await ctx.call(model, 1)
    found = await asyncio.gather(*(ctx.call(lookup, q) for q in ("order", "shipping", "policy")))
    await ctx.call(model, 2)

    async def approve_then_refund() -> str | None:
        approved = await ctx.wait_for_input("approve", prompt=f"Refund {order}?")
        return await ctx.call(issue_refund, order) if approved else None

    async def email() -> str:
        return await ctx.call(send_email, "customer")

    done = await asyncio.gather(approve_then_refund(), email())
    await ctx.call(model, 3)
    return [*found, *done]
