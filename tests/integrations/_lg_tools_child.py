"""One life of a ``create_react_agent`` whose tools run in a ``TetherToolNode``, killed (SIGKILL) at a
chosen point and resumed by the next process.

``python _lg_tools_child.py URL WORK THREAD KILL_AT MODE DURABILITY``: MODE ``sync`` (``invoke``) or ``async``
(``ainvoke``); KILL_AT ``kind:n`` (``none:0`` never): ``effect:1`` inside the refund right after its
effect, ``sibling:1`` in the lookup once the refund's answer is recorded, ``model:2`` as the model is
asked its second turn. The model asks for three tools at once (lookup, shipping, refund), then
answers. Each tool notes ``name key`` in WORK/tools.log when it runs; the refund's effect is a file
named by its key in WORK/effects (made once per key: what a payment API's idempotency key gives).
Prints the final messages as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from tests.integrations._kill_points import KillPoints
from tether.integrations.langgraph import TetherSaver, TetherToolNode, tool_key
from tether.runtime.ledger import Ledger

CALLS = [
    {"name": "lookup", "args": {"order": "A-1"}, "id": "call-lookup"},
    {"name": "shipping", "args": {"order": "A-1"}, "id": "call-shipping"},
    {"name": "refund", "args": {"order": "A-1", "amount": 4999}, "id": "call-refund"},
]


class ScriptedModel(GenericFakeChatModel):
    """Asks for the three tools, then answers; its turn is the number of AI messages so far."""

    kill: Any = None
    work: Path = Path()

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        turn = 1 + sum(isinstance(m, AIMessage) for m in messages)
        self.kill("model")
        with open(self.work / "model.log", "a") as f:
            f.write(f"turn {turn}\n")
        if turn == 1:
            reply = AIMessage("", tool_calls=CALLS, id="ai-1")
        else:
            answers = sorted(str(m.content) for m in messages if m.type == "tool")
            reply = AIMessage(f"Done: {'; '.join(answers)}", id=f"ai-{turn}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def build(url: str, work: Path, thread: str, kill: KillPoints) -> tuple[Any, TetherSaver]:
    saver = TetherSaver(url)
    ledger = Ledger(saver.log.store, saver.log.tenant)

    def recorded(*names: str) -> None:
        """Wait until the answers of these tool calls are recorded (so only the killed call is in flight)."""
        deadline = time.monotonic() + 30
        for name in names:
            while (row := ledger.get(f"langgraph:{thread}:tools:call-{name}")) is None or row.status != "done":
                assert time.monotonic() < deadline, f"{name} never finished"
                time.sleep(0.002)

    def ran(name: str) -> str:
        key = tool_key()
        with open(work / "tools.log", "a") as f:
            f.write(f"{name} {key}\n")
        return key

    @tool
    def lookup(order: str) -> dict[str, Any]:
        """Look an order up."""
        if kill.kind == "sibling":  # dies once its siblings' answers are recorded
            recorded("refund", "shipping")
        kill("sibling")
        ran("lookup")
        return {"order": order, "total": 4999}

    @tool
    def shipping(order: str) -> str:
        """Where an order is."""
        ran("shipping")
        return f"{order} shipped"

    @tool
    def refund(order: str, amount: int) -> str:
        """Refund an order."""
        key = ran("refund")
        effect = work / "effects" / key.replace(":", "_")
        if not effect.exists():  # the payment API's own check of the idempotency key
            effect.write_text(str(amount))
        if kill.kind == "effect":  # dies after its effect, once its siblings' answers are recorded
            recorded("lookup", "shipping")
        kill("effect")
        return f"refunded {amount} for {order}"

    from langgraph.prebuilt import create_react_agent

    model = ScriptedModel(messages=iter(()), kill=kill, work=work)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        agent = create_react_agent(model, TetherToolNode([lookup, shipping, refund], saver), checkpointer=saver)
    return agent, saver


def main(url: str, work: Path, thread: str, kill_at: str, mode: str, durability: str) -> None:
    (work / "effects").mkdir(exist_ok=True)
    kill = KillPoints(work, kill_at)
    agent, saver = build(url, work, thread, kill)
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    started = saver.get_tuple(config) is not None
    given = None if started else {"messages": [("user", "refund A-1")]}
    if mode == "sync":
        agent.invoke(given, config, durability=durability)
    else:
        asyncio.run(agent.ainvoke(given, config, durability=durability))
    state = agent.get_state(config)
    print(json.dumps([[m.type, m.content] for m in state.values["messages"]]))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:7])
