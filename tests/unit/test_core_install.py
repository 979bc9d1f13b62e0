"""The core installs alone: ``pip install tether`` (what ``make demo`` installs) is enough for
``import tether``, a task on SQLite with a call and a wait checked against its schema, and the
reading and time-travel commands; an extra's feature asked for without its extra says which one to
install. Checked in a child process where nothing outside the core's dependency closure can be
imported (every other installed distribution's modules refuse to load), so a core dependency that
only an extra uses, or a core module that imports an extra's package, fails here rather than in a
fresh clone's ``make demo``."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SRC = Path(__file__).parents[2] / "src"

CHILD = r"""
import importlib.abc, sys

BLOCKED = frozenset(sys.argv[1].split(","))

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{name} is outside tether's core", name=name)
        return None

sys.meta_path.insert(0, Refuse())

from click.testing import CliRunner

import tether
from tether.cli import main

db = sys.argv[2]
app = tether.App(f"sqlite:///{db}", inline_wait=0)

@app.tool(readonly=True)
def search(goal: str) -> list[str]:
    return ["BA117"]

@app.task
def trip(ctx: tether.TaskContext, goal: str) -> str:
    ctx.plan(["search", "approve"])
    with ctx.step("search"):
        found = ctx.call(search, goal)
    with ctx.step("approve"):
        ok = ctx.wait_for_input("ok", prompt="Book it?", schema={"type": "boolean"})
    return found[0] if ok else "none"

app.run(trip, "NYC", task_id="t1")
try:
    app.send_input("t1", "ok", "maybe")  # jsonschema, imported when a wait has a schema
except tether.InvalidInputError:
    pass
else:
    raise AssertionError("a value outside the schema was taken")
app.send_input("t1", "ok", True)
assert app.resume("t1").result() == "BA117"
app.close()

runner = CliRunner()
for args in (["tasks"], ["show", "t1"], ["history", "t1"], ["logs", "t1"], ["state", "t1", "--at", "3"],
             ["diff", "t1", "2", "5"], ["fork", "t1", "--at", "3"], ["tasks", "--json"]):
    done = runner.invoke(main, [*args, "--db", db], catch_exceptions=False)
    assert done.exit_code == 0, (args, done.output)
refused = {
    "serve": runner.invoke(main, ["serve", "--db", db]).output,
    "postgres": runner.invoke(main, ["tasks", "--db", "postgresql://nowhere/db"]).output,
}
assert "tether[serve]" in refused["serve"], refused
assert "tether[postgres]" in refused["postgres"], refused
print("core ok")
"""


def core_closure() -> set[str]:
    """The distributions ``pip install tether`` brings: tether's requirements without an extra, and theirs."""
    seen: set[str] = set()
    todo = ["tether"]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def test_the_core_runs_without_any_extra(tmp_path: Path) -> None:
    core = core_closure()
    assert {"pydantic", "orjson", "click", "rich", "jsonschema", "jsonpatch"} <= core, core
    assert not {"psycopg", "fastapi", "langgraph", "openai-agents", "httpx"} & core, core
    outside = {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if not {canonicalize_name(d) for d in dists} & core and module != "tether"
    }
    assert {"psycopg", "fastapi", "uvicorn", "langgraph", "agents", "pytest"} <= outside  # the check can fail
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(sorted(outside)), str(tmp_path / "tether.db")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    assert done.stdout.strip().splitlines()[-1] == "core ok"
