"""A process that talks into one LangGraph thread while another does the same, then prints what it saved.

``python -m tests.integrations._lg_writer URL THREAD NAME COUNT GATE``: waits for GATE to exist, runs
COUNT turns of a one-node graph on THREAD, and prints the JSON list of checkpoint ids its puts returned.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from tether.integrations.langgraph import TetherSaver


class Log(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class Recording(TetherSaver):
    """Remembers the id of every checkpoint it stored."""

    saved: list[str]

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        result = super().put(config, checkpoint, metadata, new_versions)
        self.saved.append(result["configurable"]["checkpoint_id"])
        return result


def main(url: str, thread: str, name: str, count: int, gate: Path) -> None:
    saver = Recording(url)
    saver.saved = []
    builder = StateGraph(Log)
    builder.add_node("say", lambda state: {"messages": [AIMessage(content=f"{name} saw {len(state['messages'])}")]})
    builder.add_edge(START, "say")
    graph = builder.compile(checkpointer=saver)
    (gate.parent / f"ready-{name}").touch()
    while not gate.exists():
        time.sleep(0.001)
    config = {"configurable": {"thread_id": thread}}
    for i in range(count):
        graph.invoke({"messages": [AIMessage(content=f"{name}:{i}", id=f"{name}-{i}")]}, config)
    print(json.dumps(saver.saved), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]))
