"""A support agent's loop, made durable with tether. Runs offline: python examples/agent_loop.py

It stores into ``$TETHER_URL`` (default ``./agent_loop.db``), so the CLI sees it:
``tether show ticket-1001 --db agent_loop.db``, and from this folder's parent,
``tether resume ticket-1001 --app examples.agent_loop:app``.

The loop every agent runs: read the conversation's window, ask the model, which answers
with tool calls (several at once), run them in parallel, append their results to the
conversation, ask again. Here the model is a scripted stand-in shaped like OpenAI's chat
client (it returns an assistant message with ``tool_calls`` in OpenAI's shape), so the
example needs no key and no network. Swap ``ScriptedModel`` for ``openai.OpenAI()`` and
``chat_completion`` returns ``response.choices[0].message.model_dump(exclude_none=True)``.

What tether adds: every model answer and every tool result is recorded, so a process that
dies anywhere in the loop resumes where it was (the model is not asked again for a turn it
answered, a refund is not issued twice); the conversation is the task's own (an append
happens once however often the task resumes); the refund waits for a person's approval
with no process kept alive.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from pydantic import BaseModel

import tether

app = tether.App(os.environ.get("TETHER_URL", "sqlite:///agent_loop.db"))


class Ticket(BaseModel):
    """The task's typed data: what the agent has established so far."""

    order_id: str | None = None
    refund_cents: int = 0
    refunded: bool = False


class Approval(BaseModel):
    """What the person answers when asked to approve a refund."""

    approved: bool
    note: str = ""


class ScriptedModel:
    """Stands in for ``client.chat.completions.create``: answers from what the conversation holds."""

    def create(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        tool_results = [m for m in messages if m["role"] == "tool"]
        if not tool_results:  # first turn: look the order up and check shipping, in parallel
            order = {"order_id": "A-1001"}
            calls = [("call_lookup", "lookup_order", order), ("call_ship", "shipping_status", order)]
            return _assistant("Let me look into order A-1001.", calls)
        if len(tool_results) == 2:  # the parcel is lost: refund it
            refund = {"order_id": "A-1001", "cents": 4999}
            return _assistant("The parcel is lost; I will refund it.", [("call_refund", "issue_refund", refund)])
        refund = json.loads(tool_results[-1]["content"])
        if refund.get("status") == "declined":
            return _assistant("A colleague declined the refund; I have escalated your case.", [])
        return _assistant(f"Refunded 49.99 (reference {refund['reference']}). Sorry about the parcel!", [])


def _assistant(text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for call_id, name, args in calls
        ]
    return message


model = ScriptedModel()


@app.tool(readonly=True)
def chat_completion(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The model call: its answer is recorded, so resuming never asks (or bills) again."""
    return model.create(messages)


@app.tool(readonly=True)
async def lookup_order(order_id: str) -> dict[str, Any]:
    await asyncio.sleep(0.02)
    return {"order_id": order_id, "item": "headphones", "paid_cents": 4999}


@app.tool(readonly=True)
async def shipping_status(order_id: str) -> dict[str, Any]:
    await asyncio.sleep(0.01)
    return {"order_id": order_id, "status": "lost in transit"}


REFUNDS: dict[str, dict[str, Any]] = {}  # the payment provider: it deduplicates by idempotency key


@app.tool(retry=tether.Retry(max_attempts=3, backoff=0.1))
async def issue_refund(order_id: str, cents: int) -> dict[str, Any]:
    """A side effect: the call's idempotency key goes to the provider, so a retry never pays twice."""
    key = tether.current_call().key
    return REFUNDS.setdefault(key, {"status": "refunded", "reference": f"rf-{len(REFUNDS) + 1}", "cents": cents})


TOOLS = {"lookup_order": lookup_order, "shipping_status": shipping_status, "issue_refund": issue_refund}


@app.task(state=Ticket)
async def support(ctx: tether.AsyncTaskContext, question: str) -> str:
    if not ctx.session.messages():  # a new conversation (a resumed one already has these)
        ctx.session.add_many(
            [
                {"role": "developer", "content": "You are a support agent. Refunds need a person's approval."},
                {"role": "user", "content": question},
            ]
        )
    while True:
        window = ctx.session.window(max_tokens=8_000)
        reply = await ctx.call(chat_completion, window.to_openai())
        ctx.session.add(reply)  # stored verbatim, in OpenAI's shape
        calls = reply.get("tool_calls") or []
        if not calls:
            return str(reply["content"])
        results = await asyncio.gather(*(run_tool(ctx, call) for call in calls))  # in parallel
        ctx.session.add_many(
            [
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                for call, result in zip(calls, results, strict=True)
            ]
        )


async def run_tool(ctx: tether.AsyncTaskContext, call: dict[str, Any]) -> Any:
    name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
    if name == "lookup_order":
        ctx.update(order_id=args["order_id"])
    if name == "issue_refund":
        ctx.update(refund_cents=args["cents"])
        answer = await ctx.wait_for_input(
            "approve_refund", prompt=f"Refund {args['cents'] / 100:.2f} for {args['order_id']}?", schema=Approval
        )
        if not answer.approved:
            return {"status": "declined", "note": answer.note}
        result = await ctx.call(issue_refund, **args)
        ctx.update(refunded=True)
        return result
    return await ctx.call(TOOLS[name], **args)


def main() -> None:
    task_id = "ticket-1001"
    run = app.run(support, "My headphones never arrived (order A-1001).", task_id=task_id)
    if run.status is tether.Status.AWAITING_INPUT:
        ask = app.pending_inputs()[0]
        print(f"{task_id} waits for {ask.key!r}: {ask.prompt}")
        # A person answers, from any process:
        #   tether send ticket-1001 approve_refund '{"approved": true}' --db agent_loop.db
        app.send_input(task_id, "approve_refund", {"approved": True, "note": "lost parcel"})
        run = app.resume(task_id)
    print(f"{task_id} is {run.status.value}: {run.output}")
    for message in app.session(task_id).messages():
        print(f"  {message.role:>9}: {message.content[:80]}")


if __name__ == "__main__":
    main()
