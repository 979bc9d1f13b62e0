"""Real processes killed with SIGKILL at random points, then resumed until the task ends.

Each scenario runs the agent in a child that kills itself at a randomly chosen
checkpoint (after a commit, inside a tool before or after its effect, in the
middle of a backoff), then runs fresh children until the task completes, and
checks the invariants a user relies on. The children are forked from servers that
have imported tether (tests/_forkserver.py), a process each all the same.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkServer, ForkServers
from tests.crash.conftest import scenarios

HERE = Path(__file__).parent
AGENT = HERE / "_agent.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)])}
SEED = int(os.environ.get("TETHER_CRASH_SEED", random.randrange(1 << 30)))
AGENT_IMPORTS = ("sqlite3", "tether", "tether.log")


@pytest.fixture
def children(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    """Where runs of the agent are forked from: killed runs from the first server, runs that
    resume them from the second (a hash seed of their own)."""
    return fork_servers(AGENT_IMPORTS, ENV)


def run_agent(server: ForkServer, url: str, tmp: Path, task_id: str, kill_at: str) -> subprocess.CompletedProcess[str]:
    return server.run(AGENT, url, str(tmp / "sink.db"), task_id, kill_at, timeout=120)


def normalised(state: tether.TaskState) -> dict[str, Any]:
    """The state without what legitimately differs between runs: attempts and timings."""
    return {
        "status": state.status.value,
        "output": state.output,
        "plan": [(s.name, s.status) for s in state.plan],
        "calls": [(c.n, c.tool, c.key, c.args, c.status, c.result, c.kind) for c in state.calls],
        "decisions": [(d.name, d.choice, d.rationale) for d in state.decisions],
        "observations": {k: (o.value, o.source) for k, o in state.observations.items()},
        "failure": state.failure,
    }


def sink_rows(tmp: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    conn = sqlite3.connect(tmp / "sink.db")
    raw = conn.execute("SELECT key, kind FROM raw").fetchall()
    effects = conn.execute("SELECT key, kind FROM effects").fetchall()
    conn.close()
    return raw, effects


@pytest.fixture
def reference(
    tmp_path_factory: pytest.TempPathFactory, make_url: Any, children: tuple[ForkServer, ForkServer]
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("reference")
    url = make_url(tmp)
    done = run_agent(children[0], url, tmp, "trip-1", "none:0")
    assert done.returncode == 0, done.stderr
    state = tether.App(url).state("trip-1")
    raw, effects = sink_rows(tmp)
    assert len(raw) == len(effects) == 3
    # How many checkpoints of each kind an uninterrupted run passes, so kills can land on any.
    tally = json.loads((tmp / "sink.db.tally").read_text())
    assert set(tally) == {
        "after_commit",
        "in_tool_before_effect",
        "in_tool_after_effect",
        "in_backoff",
        "in_tool_flaky",
        "in_tool_readonly",
    }, tally
    return {"state": normalised(state), "effects": sorted(effects), "tally": tally}


@pytest.mark.crash
@pytest.mark.timeout(360)
def test_random_sigkills_then_resume(
    tmp_path: Path, reference: dict[str, Any], make_url: Any, children: tuple[ForkServer, ForkServer]
) -> None:
    first_life, next_lives = children
    rng = random.Random(SEED)
    landed: dict[str, int] = {}
    kinds = sorted(reference["tally"])
    count = scenarios(len(kinds))
    for scenario in range(count):
        tmp = tmp_path / f"s{scenario}"
        tmp.mkdir()
        url = make_url(tmp)
        kind = kinds[scenario % len(kinds)]  # every kind of place, each at a random occurrence
        kill_at = f"{kind}:{rng.randint(1, reference['tally'][kind])}"
        first = run_agent(first_life, url, tmp, "trip-1", kill_at)
        killed_note = tmp / "sink.db.killed"
        where = killed_note.read_text().strip() if killed_note.exists() else None
        context = f"seed={SEED} scenario={scenario} kill_at={kill_at} where={where}"
        if where is not None:
            assert first.returncode == -signal.SIGKILL, context + first.stderr
            landed[where] = landed.get(where, 0) + 1
        else:
            assert first.returncode == 0, context + first.stderr
        for _ in range(5):  # resume until the task ends
            state = tether.App(url).state("trip-1")
            if state.status in (tether.Status.COMPLETED, tether.Status.FAILED):
                break
            resumed = run_agent(next_lives, url, tmp, "trip-1", "none:0")
            assert resumed.returncode == 0, context + resumed.stderr
        assert state.status is tether.Status.COMPLETED, context
        raw, effects = sink_rows(tmp)
        # Exactly one effect per logical call, under the same key as an uninterrupted run.
        assert sorted(effects) == reference["effects"], context
        # Every delivery of a call presented its one key; extra deliveries only when the kill
        # landed inside the effect itself (after it reached the sink, before the result was recorded).
        assert {k for k, _ in raw} == {k for k, _ in effects}, context
        extra = len(raw) - len(effects)
        if where == "in_tool_after_effect":
            assert extra <= 1, context
        else:
            assert extra == 0, context
        assert normalised(state) == reference["state"], context
    # The random points must have covered the kinds of places that matter.
    if count >= len(kinds):
        assert set(landed) == set(kinds), landed
    print(f"\nseed {SEED}: kills landed {landed}")


@pytest.mark.crash
@pytest.mark.timeout(360)
def test_killed_from_outside_at_random_times(
    tmp_path: Path, reference: dict[str, Any], make_url: Any, children: tuple[ForkServer, ForkServer]
) -> None:
    """The parent SIGKILLs the child after a random delay: no cooperation from the child at all.
    The child killed is a fresh interpreter (the delays count its start-up); the resumes are forked."""
    rng = random.Random(SEED + 1)
    for scenario in range(5):
        tmp = tmp_path / f"o{scenario}"
        tmp.mkdir()
        url = make_url(tmp)
        child = subprocess.Popen(
            [sys.executable, str(AGENT), url, str(tmp / "sink.db"), "trip-1", "none:0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=ENV,
        )
        try:
            child.wait(timeout=rng.uniform(0.3, 1.5))
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.wait()
        for _ in range(5):
            resumed = run_agent(children[1], url, tmp, "trip-1", "none:0")
            assert resumed.returncode == 0, resumed.stderr
            state = tether.App(url).state("trip-1")
            if state.status is tether.Status.COMPLETED:
                break
        raw, effects = sink_rows(tmp)
        assert sorted(effects) == reference["effects"]
        assert len(raw) - len(effects) <= 1
        assert normalised(state) == reference["state"]
