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
    text = page.read_text()
    if page.name == "redis.md":
        # Its examples name a server at the default port; they run on this process's own (AOF,
        # fsync always: what durability="full" asks for), under a key prefix of this test's.
        from tests import _redis_server
        from tests.conftest import REDIS_PROBLEM

        if REDIS_PROBLEM:
            pytest.skip(REDIS_PROBLEM)
        own = _redis_server.session_server().url
        text = text.replace("redis://127.0.0.1:6379/0?prefix=myapp", f"{own}?prefix=docs{os.getpid()}{id(tmp_path)}")
    # Every fenced block is Python (run here) or says what else it is: a block spelt ```py or
    # ```python3 would otherwise be skipped in silence, its example never checked.
    openers = re.findall(r"^```(\S*)\n(?:.*?\n)?```$", text, re.S | re.M)
    assert set(openers) <= {"python", "bash", "sh", "console", "sql", "text", ""}, sorted(set(openers))
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, f"{page.name} has no Python example to check"
    monkeypatch.chdir(tmp_path)  # the examples write their databases here, not into the docs
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
