"""A real LangGraph chat graph on TetherSaver, also runnable as a process the tests kill.

The graph: ``agent`` answers with a scripted chat model (langchain-core's ``GenericFakeChatModel``,
no network), then the ``review`` subgraph notes the turn and ``interrupt()``s for the next human
message; ``stop`` ends the conversation. One ``invoke`` is one turn.

As a process: ``python -m tests.integrations._lg_graph URL THREAD TURNS [DELAY]`` starts or resumes
the thread from what tether holds, prints ``turn K`` after each turn, and ``done`` at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from tether.integrations.langgraph import TetherSaver

TEXT = ("The assistant checked the calendar and proposes Tuesday at 14:00 with the design team. " * 6)[:500]
DELAY = 0.0  # seconds each agent step sleeps: gives a killer something to interrupt


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: int


def answer(k: int) -> str:
    return f"answer {k}: {TEXT}"


def agent(state: Chat) -> dict[str, Any]:
    k = sum(isinstance(m, HumanMessage) for m in state["messages"])
    model = GenericFakeChatModel(messages=iter([AIMessage(content=answer(k))]))
    if DELAY:
        time.sleep(DELAY)
    return {"messages": [model.invoke(state["messages"])]}


def note(state: Chat) -> dict[str, Any]:
    return {"notes": state.get("notes", 0) + 1}


def ask_human(state: Chat) -> dict[str, Any]:
    text = interrupt({"question": "your turn", "seen": len(state["messages"])})
    return {"messages": [HumanMessage(content=text, id=f"human-{text}")]}


def route(state: Chat) -> str:
    return END if state["messages"][-1].content == "stop" else "agent"


def build(saver: TetherSaver) -> Any:
    review = StateGraph(Chat)
    review.add_node("note", note)
    review.add_node("ask_human", ask_human)
    review.add_edge(START, "note")
    review.add_edge("note", "ask_human")
    chat = StateGraph(Chat)
    chat.add_node("agent", agent)
    chat.add_node("review", review.compile())
    chat.add_edge(START, "agent")
    chat.add_edge("agent", "review")
    chat.add_conditional_edges("review", route, ["agent", END])
    return chat.compile(checkpointer=saver)


def expected(turns: int) -> list[str]:
    """The conversation after ``turns`` answered human messages, then ``stop``."""
    out = ["hello", answer(1)]
    for k in range(turns):
        out += [f"user {k}", answer(k + 2)]
    return [*out, "stop"]


def humans_answered(graph: Any, config: dict[str, Any]) -> int:
    return sum(isinstance(m, HumanMessage) for m in graph.get_state(config).values.get("messages", [])) - 1


def run(url: str, thread: str, turns: int) -> None:
    """Start or resume ``thread`` and talk until ``turns`` human answers are in, then stop."""
    graph = build(TetherSaver(url))
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    if not graph.get_state(config).values:
        graph.invoke({"messages": [HumanMessage(content="hello", id="human-hello")], "notes": 0}, config)
    while True:
        done = humans_answered(graph, config)
        if done >= turns:
            break
        graph.invoke(Command(resume=f"user {done}"), config)
        print(f"turn {done + 1}", flush=True)
    if graph.get_state(config).next:
        graph.invoke(Command(resume="stop"), config)
    print("done", flush=True)


if __name__ == "__main__":
    DELAY = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    run(sys.argv[1], sys.argv[2], int(sys.argv[3]))
