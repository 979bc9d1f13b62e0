"""The SIGKILL-and-resume check the framework adapters share.

A child script (``_agents_child.py``, ``_pydantic_ai_child.py``) runs one support-agent task: the
model looks an order up and checks shipping in parallel, refunds it, answers. It kills itself with
SIGKILL at a chosen checkpoint; fresh children resume it until it completes (each child a process
of its own, forked from a server that has imported the SDK: tests/_forkserver.py). Then: every
model turn was answered once, every tool call that finished ran once (only a kill inside the
refund, after its effect, runs it again, under the same key), the refund's effect happened once,
the record and the conversation equal an uninterrupted run's, and the record replays cleanly.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tether
from tests._forkserver import ForkServer, ForkServers
from tests.crash.conftest import SCENARIOS
from tests.integrations.conftest import CHILD_ENV, HERE

TASK_ID = "support-1"
MODEL_TURNS = ["turn 0", "turn 2", "turn 3"]
# What each child script imports, done once in its fork servers instead of in every child: its own
# imports, then what the SDK and tether import lazily during a run (the stores; the Agents SDK's HTTP
# client for its tracing, Pydantic AI's price table and anyio's asyncio backend).
STORES = ("tether.store.postgres", "tether.store.sqlite")
CHILD_IMPORTS = {
    "_agents_child.py": (
        "agents",
        "agents.testing",
        "tether",
        "tether.log",
        "tether.integrations.openai_agents",
        *STORES,
        "anyio.streams.tls",
        "h11",
        "httpcore2",
        "truststore",
    ),
    "_pydantic_ai_child.py": (
        "pydantic_ai",
        "pydantic_ai.messages",
        "pydantic_ai.models.function",
        "tether",
        "tether.log",
        "tether.integrations.pydantic_ai",
        *STORES,
        "anyio._backends._asyncio",
        "genai_prices.data",
    ),
}


def run_child(
    server: ForkServer, script: str, url: str, work: Path, kill_at: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return server.run(HERE / script, url, str(work), TASK_ID, kill_at, *extra, timeout=120)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def outcome(url: str, work: Path, result_of: Callable[[tether.ToolCall], Any]) -> dict[str, Any]:
    app = tether.App(url)
    state = app.state(TASK_ID)
    return {
        "status": state.status.value,
        "output": state.output,
        "calls": [(c.n, c.tool, c.key, c.args, result_of(c)) for c in state.calls],
        "messages": [(m.role, m.content, m.tool_calls) for m in app.session(TASK_ID).messages()],
        "effects": sorted(p.name for p in (work / "effects").iterdir()),
    }


def kill_points(commits: int) -> list[str]:
    """Where the first life of each scenario kills itself. The kinds of place: after a commit near the
    start of the run (1-3), in its middle (a third, half, two thirds through), near its end (the last
    two), and inside the refund before and after its effect. With ``TETHER_CRASH_SCENARIOS`` set (a
    deep run), every one of those commits; unset, one commit of each kind, a different one each run,
    and both places in the tool."""
    kinds = [[1, 2, 3], [commits // 3, commits // 2, (2 * commits) // 3], [commits - 1, commits]]
    chosen = {k for kind in kinds for k in kind} if SCENARIOS else {random.choice(kind) for kind in kinds}
    return [f"after_commit:{k}" for k in sorted(chosen)] + ["in_tool_before_effect:1", "in_tool_after_effect:1"]


def sigkill_then_resume(
    script: str,
    fork_servers: ForkServers,
    tmp_path: Path,
    make_url: Any,
    result_of: Callable[[tether.ToolCall], Any] = lambda c: c.result,
    extra: tuple[str, ...] = (),
    model_turns: list[str] = MODEL_TURNS,
) -> None:
    # Each run is a process forked from a server that has the SDK imported: the killed one from the
    # first server, the ones resuming it from the second (a hash seed of their own).
    first_life, next_lives = fork_servers(CHILD_IMPORTS[script], CHILD_ENV)
    ref = tmp_path / "reference"
    ref.mkdir()
    ref_url = make_url(ref)
    first = run_child(first_life, script, ref_url, ref, "none:0", *extra)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["completed", "replay-clean=True"], first.stdout
    reference = outcome(ref_url, ref, result_of)
    assert reference["output"] == "Done: refunded 4999 for A-1"
    assert lines(ref / "model.log") == model_turns
    assert len(reference["effects"]) == 1
    commits = json.loads((ref / "tally.json").read_text())["after_commit"]
    points = kill_points(commits)
    for point in points:
        work = tmp_path / point.replace(":", "-")
        work.mkdir()
        url = make_url(work)
        killed = run_child(first_life, script, url, work, point, *extra)
        assert (work / "killed").exists(), point
        assert killed.returncode == -signal.SIGKILL, point + killed.stderr
        for _ in range(3):
            resumed = run_child(next_lives, script, url, work, "none:0", *extra)
            assert resumed.returncode == 0, point + resumed.stderr
            if resumed.stdout.split()[0] == "completed":
                break
        assert resumed.stdout.split() == ["completed", "replay-clean=True"], point + resumed.stdout
        assert outcome(url, work, result_of) == reference, point
        assert lines(work / "model.log") == model_turns, point  # no turn asked twice
        executions = lines(work / "tools.log")
        assert sorted(set(executions)) == sorted(lines(ref / "tools.log")), point  # the same keys
        repeats = len(executions) - len(set(executions))
        if point.startswith("in_tool"):
            assert repeats == 1 and executions[-1].startswith("refund"), point
        else:
            assert repeats == 0, point
