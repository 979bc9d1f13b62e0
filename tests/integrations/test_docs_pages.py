"""The integration pages' Python examples run, in order, one namespace per page (tests/unit/test_docs.py
runs docs/*.md only)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

PAGES = Path(__file__).parents[2] / "docs" / "integrations"
FRAMEWORK = {
    "langgraph.md": "langgraph",
    "openai-agents.md": "agents",
    "pydantic-ai.md": "pydantic_ai",
    "adk.md": "google.adk",
}


@pytest.mark.parametrize("page", sorted(PAGES.glob("*.md")), ids=lambda p: p.name)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if page.name in FRAMEWORK:
        pytest.importorskip(FRAMEWORK[page.name])
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert blocks, f"{page.name} has no Python example"
    module = types.ModuleType(f"docs_integrations_{page.stem.replace('-', '_')}")  # annotations resolve in it
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)


@pytest.mark.parametrize("module", ["openai_agents", "pydantic_ai", "adk"])
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    pytest.importorskip({"openai_agents": "agents", "pydantic_ai": "pydantic_ai", "adk": "google.adk"}[module])
    imported = importlib.import_module(f"tether.integrations.{module}")
    result = doctest.testmod(imported, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
