"""What LangGraph wrote, read with tether's tools: `tether history` and the thread views."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

from click.testing import CliRunner

from tests.integrations._lg_graph import expected, run
from tether.cli import main as tether_cli
from tether.integrations._langgraph_cli import main as threads_cli


def test_threads_show_and_history(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    run(f"sqlite:///{db}", "t1", 2)
    runner = CliRunner()
    listed = json.loads(runner.invoke(threads_cli, ["threads", "--db", db, "--json"]).output)
    assert [t["thread_id"] for t in listed] == ["t1"]
    assert listed[0]["checkpoints"] > 5 and any(ns.startswith("review:") for ns in listed[0]["namespaces"])
    shown = runner.invoke(threads_cli, ["show", "t1", "--db", db, "--json"])
    assert shown.exit_code == 0, shown.output
    values = json.loads(shown.output)["values"]
    assert values["messages"] == f"{len(expected(2))} items, last: HumanMessage: stop"
    history = json.loads(runner.invoke(threads_cli, ["history", "t1", "--db", db, "--json"]).output)
    assert {e["event"] for e in history} == {"CheckpointSaved", "WritesSaved"}
    assert any(e.get("stored", {}).get("messages", "").startswith("+") for e in history)
    # tether's own verb lists the same events.
    events = json.loads(runner.invoke(tether_cli, ["history", "langgraph:t1", "--db", db, "--json"]).output)
    assert [e["seq"] for e in events] == [e["seq"] for e in history]
    # Threads are tether's internal streams: not tasks.
    assert "no tasks" in runner.invoke(tether_cli, ["tasks", "--db", db]).output


def test_import_tether_does_not_import_langgraph() -> None:
    code = "import sys, tether; print('langgraph' in sys.modules, 'langchain_core' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_docs_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    page = Path(__file__).parents[2] / "docs" / "integrations" / "langgraph.md"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_langgraph"}
    for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
        exec(compile(block, page.name, "exec", dont_inherit=True), namespace)  # no postponed annotations
