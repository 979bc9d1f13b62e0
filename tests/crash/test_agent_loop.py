"""The agent loop with parallel calls and its conversation, killed with SIGKILL at random points.

Each scenario runs ``_loop_agent.py`` in a child that kills itself at a randomly chosen
checkpoint (after a commit to the task or the session, inside a tool before or after its
effect, in a flaky or readonly tool, halfway through a sleep), then runs fresh children
(each forked from a server that has imported tether: tests/_forkserver.py) until the task
completes, and checks, every time:

* the task completes, with exactly one effect per logical call in the sink;
* every repeat of a call presented the same key as its first run;
* a call whose result was recorded never ran again;
* the conversation and the final state equal an uninterrupted run's (but for attempts,
  timings, and the ordinals that depend on the order parallel calls finished);
* ``app.replay`` of the finished task reports no divergence, and writes nothing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkServer, ForkServers
from tests.conftest import dump_database
from tests.crash.conftest import SCENARIOS

HERE = Path(__file__).parent
AGENT = HERE / "_loop_agent.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE.parent.parent)])}
SEED = int(os.environ.get("TETHER_CRASH_SEED", random.randrange(1 << 30)))
MODES = ("async", "threads")
AGENT_IMPORTS = ("asyncio", "sqlite3", "tether", "tether.log.streams", "tether.log")


@pytest.fixture
def children(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    """Where runs of the agent are forked from (tests/_forkserver.py): killed runs from the first
    server, runs that resume or replay them from the second (a hash seed of their own)."""
    return fork_servers(AGENT_IMPORTS, ENV)


def run_agent(server: ForkServer, url: str, tmp: Path, kill_at: str, mode: str) -> subprocess.CompletedProcess[str]:
    return server.run(AGENT, url, str(tmp / "sink.db"), "loop-1", kill_at, mode, timeout=120)


def normalised(app: tether.App, state: tether.TaskState) -> dict[str, Any]:
    """What must equal an uninterrupted run's: the ordinals of calls issued after others finished
    depend on the finishing order, so calls compare as a multiset, without keys."""
    calls = sorted(
        (json.dumps([c.tool, c.args, c.status, c.result, c.kind], sort_keys=True) for c in state.calls),
    )
    shown = app.session("loop-1").messages()
    messages = [(m.role, m.content, [c.id for c in m.tool_calls], m.tool_call_id) for m in shown]
    return {"status": state.status.value, "output": state.output, "calls": calls, "messages": messages}


def sink(tmp: Path, table: str, after: int = 0) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(tmp / "sink.db")
    try:
        return conn.execute(f"SELECT rowid, * FROM {table} WHERE rowid > ?", (after,)).fetchall()
    finally:
        conn.close()


def effects_by_payload(tmp: Path) -> dict[str, str]:
    rows = sink(tmp, "effects")
    by_payload = {payload: key for _, key, payload in rows}
    assert len(by_payload) == len(rows), "two keys delivered the same logical effect"
    return by_payload


@pytest.fixture(params=MODES)
def reference(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    make_url: Any,
    children: tuple[ForkServer, ForkServer],
) -> Any:
    mode = request.param
    tmp = tmp_path_factory.mktemp(f"reference-{mode}")
    url = make_url(tmp)
    done = run_agent(children[0], url, tmp, "none:0", mode)
    assert done.returncode == 0, done.stderr
    app = tether.App(url)
    state = app.state("loop-1")
    assert state.status is tether.Status.COMPLETED
    tally = json.loads((tmp / "sink.db.tally").read_text())
    expected = {"after_commit", "after_session_append", "in_tool_before_effect", "in_tool_after_effect"}
    expected |= {"in_tool_flaky", "in_tool_readonly", "in_sleep"}
    assert set(tally) == expected, tally
    return {"mode": mode, "state": normalised(app, state), "payloads": sorted(effects_by_payload(tmp)), "tally": tally}


@pytest.mark.crash
@pytest.mark.timeout(600)
def test_agent_loop_survives_random_sigkills(
    tmp_path: Path, reference: dict[str, Any], make_url: Any, children: tuple[ForkServer, ForkServer]
) -> None:
    first_life, next_lives = children
    mode = reference["mode"]
    rng = random.Random(SEED + MODES.index(mode))
    kinds = sorted(reference["tally"])
    landed: dict[str, int] = {}
    # TETHER_CRASH_SCENARIOS split between the modes; unset, one per kind of place in each mode.
    count = SCENARIOS // len(MODES) + (SCENARIOS % len(MODES) if mode == "async" else 0) if SCENARIOS else len(kinds)
    for scenario in range(count):
        tmp = tmp_path / f"s{scenario}"
        tmp.mkdir()
        url = make_url(tmp)
        kind = kinds[scenario % len(kinds)]  # every kind of place, each at a random occurrence
        kill_at = f"{kind}:{rng.randint(1, reference['tally'][kind])}"
        first = run_agent(first_life, url, tmp, kill_at, mode)
        note = tmp / "sink.db.killed"
        where = note.read_text().strip() if note.exists() else None
        context = f"mode={mode} seed={SEED} scenario={scenario} kill_at={kill_at} where={where}"
        if where is not None:
            assert first.returncode == -signal.SIGKILL, context + first.stderr
            landed[where] = landed.get(where, 0) + 1
        else:
            assert first.returncode == 0, context + first.stderr
        app = tether.App(url)
        for _ in range(5):  # resume until the task ends
            state = app.state("loop-1")
            if state.status in (tether.Status.COMPLETED, tether.Status.FAILED):
                break
            recorded = {c.key for c in state.calls if c.status == "completed"}
            runs_before = max((r[0] for r in sink(tmp, "runs")), default=0)
            resumed = run_agent(next_lives, url, tmp, "none:0", mode)
            assert resumed.returncode == 0, context + resumed.stderr
            # A call whose result was recorded never runs again.
            rerun = {key for _, key, _ in sink(tmp, "runs", after=runs_before)}
            assert not rerun & recorded, context
        state = app.state("loop-1")
        assert state.status is tether.Status.COMPLETED, context
        # Exactly one effect per logical call; every delivery presented that call's one key.
        by_payload = effects_by_payload(tmp)
        assert sorted(by_payload) == reference["payloads"], context
        assert {key for _, key, _ in sink(tmp, "raw")} == set(by_payload.values()), context
        assert normalised(app, state) == reference["state"], context
        before = dump_database(url)
        replayed = run_agent(next_lives, url, tmp, "replay:0", mode)
        assert replayed.returncode == 0, context + replayed.stderr
        report = json.loads(replayed.stdout)
        assert report["clean"], f"{context}: {report['report']}"
        assert dump_database(url) == before, context
    print(f"\n{mode} seed {SEED}: kills landed {landed}")
    if sum(landed.values()) >= len(kinds) * 2:
        assert len(landed) >= len(kinds) - 1, landed
