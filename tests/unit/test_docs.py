"""The docs' Python examples run, in order, one namespace per page."""

from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
PAGES = sorted(DOCS.glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import PG_PROBLEM

    if page.name == "postgres.md" and PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")  # a real module: dataclasses look theirs up
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for block in blocks:
        exec(compile(block, f"{page.name}", "exec"), namespace)
    assert os.getcwd() == str(tmp_path)


def test_readme_links_every_page() -> None:
    readme = (DOCS.parent / "README.md").read_text()
    for page in PAGES:
        assert f"docs/{page.name}" in readme, page.name
