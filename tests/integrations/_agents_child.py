"""An OpenAI Agents SDK run inside a tether task, in a child process that SIGKILLs itself at a chosen point.

Usage: python _agents_child.py URL WORKDIR TASK_ID KIND:K [streamed|team]

Checkpoints: ``after_commit`` (after every commit to the task log), ``in_tool_before_effect`` and
``in_tool_after_effect`` (inside the refund tool, around its effect). The process kills itself at
the K-th checkpoint of KIND (``none:0`` never does, and writes how many of each it passed to
WORKDIR/tally.json). The scripted model logs every call it answers to WORKDIR/model.log, the tools
every execution to WORKDIR/tools.log, and the refund's effect lands in WORKDIR/effects/ once per
idempotency key (a payment provider that deduplicates by key).

``team``: the same work split between agents. Support looks the order up and asks a Shipping agent,
used as a tool (``durable_agent(ctx, shipping).as_tool(...)``), in parallel; then hands off (a
``handoff()`` object) to a Refunds agent, which refunds and answers. Every agent's model logs its
turns to model.log (``turn 0``, ``shipping``, ``turn 2``, ``refunds 0``, ``refunds 1``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, handoff, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

import tether
from tests.integrations._kill_points import KillPoints
from tether.integrations.openai_agents import TetherSession, approvals, durable_agent, run, run_streamed
from tether.log import TaskLog

URL, WORK, TASK_ID = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
STREAMED = sys.argv[5:] == ["streamed"]
TEAM = sys.argv[5:] == ["team"]
TEAM_TURNS = ["turn 0", "shipping", "turn 2", "refunds 0", "refunds 1"]
set_tracing_disabled(True)

checkpoint = KillPoints(WORK, sys.argv[4])


_append = TaskLog.append


def append_then_maybe_die(self: TaskLog, *args: Any, **kwargs: Any) -> Any:
    version = _append(self, *args, **kwargs)
    if args and args[0] == TASK_ID:
        checkpoint("after_commit")
    return version


TaskLog.append = append_then_maybe_die  # type: ignore[method-assign]


def log(name: str, line: str) -> None:
    with open(WORK / name, "a") as f:
        f.write(line + "\n")


def answer(call: Any) -> Any:
    """The model: looks the order up and checks shipping (in parallel), then refunds, then answers."""
    outputs = [i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
    log("model.log", f"turn {len(outputs)}")
    if not outputs:
        return [
            function_call("lookup_order", {"order_id": "A-1"}, call_id="call_lookup"),
            function_call("shipping_status", {"order_id": "A-1"}, call_id="call_ship"),
        ]
    if len(outputs) == 2:
        return [function_call("refund", {"order_id": "A-1", "cents": 4999}, call_id="call_refund")]
    return [assistant_message(f"Done: {outputs[-1]['output']}")]


@function_tool
async def lookup_order(order_id: str) -> str:
    """Look an order up."""
    log("tools.log", f"lookup_order {tether.current_call().key}")
    return f"{order_id}: headphones"


@function_tool
async def shipping_status(order_id: str) -> str:
    """Where the parcel is."""
    await asyncio.sleep(0.05)
    log("tools.log", f"shipping_status {tether.current_call().key}")
    return f"{order_id}: lost"


@function_tool
async def refund(order_id: str, cents: int) -> str:
    """Refund an order: a side effect, deduplicated by the call's idempotency key."""
    key = tether.current_call().key
    log("tools.log", f"refund {key}")
    checkpoint("in_tool_before_effect")
    effects = WORK / "effects"
    effects.mkdir(exist_ok=True)
    receipt = effects / key.replace(":", "_")
    if not receipt.exists():
        receipt.write_text(f"{order_id} {cents}")
    checkpoint("in_tool_after_effect")
    return f"refunded {cents} for {order_id}"


agent = Agent(
    name="Support",
    instructions="Help with orders.",
    model=ScriptedModel([ModelStep.respond(answer) for _ in range(3)]),
    tools=[lookup_order, shipping_status, refund],
)


def outputs_of(call: Any) -> list[dict[str, Any]]:
    return [i for i in call.input if isinstance(i, dict) and i.get("type") == "function_call_output"]


def support_answer(call: Any) -> Any:
    """Support, in a team: asks the order system and the Shipping agent, then hands off to Refunds."""
    outputs = outputs_of(call)
    log("model.log", f"turn {len(outputs)}")
    if not outputs:
        return [
            function_call("lookup_order", {"order_id": "A-1"}, call_id="call_lookup"),
            function_call("shipping_status", {"input": "A-1"}, call_id="call_ship"),
        ]
    return [function_call("transfer_to_refunds", {}, call_id="call_handoff")]


def shipping_answer(call: Any) -> Any:
    log("model.log", "shipping")
    return [assistant_message("A-1: lost")]


def refunds_answer(call: Any) -> Any:
    refunded = [o for o in outputs_of(call) if o.get("call_id") == "call_refund"]
    log("model.log", f"refunds {len(refunded)}")
    if not refunded:
        return [function_call("refund", {"order_id": "A-1", "cents": 4999}, call_id="call_refund")]
    return [assistant_message(f"Done: {refunded[-1]['output']}")]


shipping = Agent(name="Shipping", model=ScriptedModel([ModelStep.respond(shipping_answer) for _ in range(2)]))
refunds = Agent(
    name="Refunds", model=ScriptedModel([ModelStep.respond(refunds_answer) for _ in range(3)]), tools=[refund]
)
team = Agent(
    name="Support",
    instructions="Help with orders.",
    model=ScriptedModel([ModelStep.respond(support_answer) for _ in range(3)]),
    tools=[lookup_order],
    handoffs=[handoff(refunds)],
)

app = tether.App(URL, lease_ttl=5.0)


@app.task
async def support(ctx: tether.AsyncTaskContext, question: str) -> str:
    if TEAM:
        asked = durable_agent(ctx, shipping).as_tool("shipping_status", "Where the parcel is.")
        result = await run(ctx, team.clone(tools=[lookup_order, asked]), question, session=TetherSession.in_task(ctx))
        return str(result.final_output)
    if not STREAMED:
        result = await run(ctx, agent, question, session=TetherSession.in_task(ctx))
        return str(result.final_output)
    streaming = run_streamed(ctx, agent, question, session=TetherSession.in_task(ctx))
    async for _ in streaming.stream_events():
        pass
    assert await approvals(ctx, streaming) is None
    return str(streaming.final_output)


if __name__ == "__main__":
    handle = app.run(support, "Where is order A-1?", task_id=TASK_ID)
    if checkpoint.kind == "none":
        (WORK / "tally.json").write_text(json.dumps(checkpoint.hits))
    report = app.replay(TASK_ID) if handle.status is tether.Status.COMPLETED else None
    clean = report.clean if report is not None else None
    if report is not None and not clean:
        print(report, file=sys.stderr)
    print(handle.status.value, f"replay-clean={clean}")
