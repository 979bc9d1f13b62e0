"""A Pydantic AI agent run inside a tether task, in a child process that SIGKILLs itself at a chosen point.

Usage: python _pydantic_ai_child.py URL WORKDIR TASK_ID KIND:K [stream]  (the checkpoints and logs of
_agents_child.py: ``after_commit``, ``in_tool_before_effect``, ``in_tool_after_effect``; the model
logs each request it answers to WORKDIR/model.log, the tools each execution to WORKDIR/tools.log,
the refund's effect lands in WORKDIR/effects/ once per idempotency key). With ``stream``, the
model streams its responses (text in pieces, tool calls as deltas) and the task runs the agent with
``agent.iter``, streaming every model request and tool-call node.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import tether
from tests.integrations._kill_points import KillPoints
from tether.integrations.pydantic_ai import TetherDurability, TetherHistory, run
from tether.log import TaskLog

URL, WORK, TASK_ID = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
STREAM = sys.argv[5:] == ["stream"]

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


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Looks the order up and checks shipping (in parallel), then refunds, then answers."""
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    log("model.log", f"turn {len(returns)}")
    if not returns:
        return ModelResponse(
            parts=[
                ToolCallPart("lookup_order", {"order_id": "A-1"}, tool_call_id="call_lookup"),
                ToolCallPart("shipping_status", {"order_id": "A-1"}, tool_call_id="call_ship"),
            ]
        )
    if len(returns) == 2:
        return ModelResponse(parts=[ToolCallPart("refund", {"order_id": "A-1", "cents": 4999}, tool_call_id="call_r")])
    return ModelResponse(parts=[TextPart(f"Done: {returns[-1].content}")])


async def stream_model(messages: list[ModelMessage], info: AgentInfo) -> Any:
    """The same script, streamed: each text in two pieces, each tool call as one delta."""
    for index, part in enumerate(model(messages, info).parts):
        if isinstance(part, TextPart):
            yield part.content[:5]
            yield part.content[5:]
        elif isinstance(part, ToolCallPart):
            call = DeltaToolCall(name=part.tool_name, json_args=part.args_as_json_str(), tool_call_id=part.tool_call_id)
            delta: DeltaToolCalls = {index: call}
            yield delta


agent = Agent(FunctionModel(model, stream_function=stream_model), system_prompt="Help with orders.", name="support")


@agent.tool_plain
async def lookup_order(order_id: str) -> str:
    log("tools.log", f"lookup_order {tether.current_call().key}")
    return f"{order_id}: headphones"


@agent.tool_plain
async def shipping_status(order_id: str) -> str:
    await asyncio.sleep(0.05)
    log("tools.log", f"shipping_status {tether.current_call().key}")
    return f"{order_id}: lost"


@agent.tool_plain
async def refund(order_id: str, cents: int) -> str:
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


app = tether.App(URL, lease_ttl=5.0)


@app.task
async def support(ctx: tether.AsyncTaskContext, question: str) -> str:
    if not STREAM:
        return str((await run(ctx, agent, question)).output)
    history = TetherHistory.in_task(ctx)
    options: dict[str, Any] = {"message_history": history.window(), "capabilities": [TetherDurability(ctx)]}
    async with agent.iter(question, **options) as agent_run:
        async for node in agent_run:
            if Agent.is_model_request_node(node) or Agent.is_call_tools_node(node):
                async with node.stream(agent_run.ctx) as events:
                    async for _ in events:
                        pass
    assert agent_run.result is not None
    history.add(agent_run.result.new_messages())
    return str(agent_run.result.output)


if __name__ == "__main__":
    handle = app.run(support, "Where is order A-1?", task_id=TASK_ID)
    if checkpoint.kind == "none":
        (WORK / "tally.json").write_text(json.dumps(checkpoint.hits))
    clean = app.replay(TASK_ID).clean if handle.status is tether.Status.COMPLETED else None
    print(handle.status.value, f"replay-clean={clean}")
