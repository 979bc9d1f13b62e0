"""The agent loop a demanding user writes — a person in the batch — killed with SIGKILL at random points.

``_approval_loop.py`` asks a scripted model for six parallel tool calls (searches, an email, a flaky
weather API, a charge through the ledger, a question for a person), then for a booking that must
happen at most once (``on_unknown="raise"``), keeping its conversation in ``ctx.session``. Each
scenario kills the first or the second process at a random checkpoint (after a commit to the task
or the session, before or after a real side effect, inside the model or a search), then runs fresh
processes until the task completes, doing what its operators would: answering the question, and
settling a booking in doubt with ``app.resolve_call`` (it happened, or ``happened=False``) after
looking at the outside world. Every time:

* a call whose result was recorded never runs again, and each side effect runs once per key — once
  more at most for the one call the kill cut off (at least once), never for the booking (at most once);
* the conversation equals an uninterrupted run's, the tool results in the model's order;
* an uninterrupted run records no attempt as interrupted (a wait in the batch used to cut the calls
  under way off, and run their effects again under their keys: no process had stopped);
* ``tether show`` and ``tether history`` say the task completed, each call returning once;
* ``app.replay`` of the finished task is clean, and writes nothing.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tether
import tether.cli
from tests._forkserver import ForkServer, ForkServers
from tests.conftest import dump_database
from tests.crash.conftest import SCENARIOS as CRASH_SCENARIOS

HERE = Path(__file__).parent
AGENT = HERE / "_approval_loop.py"
ROOT = HERE.parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
# A scenario takes ~4 s (up to eight processes): a quarter of TETHER_CRASH_SCENARIOS (tests/crash/conftest.py;
# 400 for a long soak), and 4 when it is unset: each process killed at two kinds of place.
SCENARIOS = max(4, CRASH_SCENARIOS // 4)
SEED = int(os.environ.get("TETHER_CRASH_SEED", random.randrange(1 << 30)))
PRELOAD = ("asyncio", "pydantic", "tether", "tether.log.streams", "tether.log", "tether.cli")
TASK = "trip-1"


@pytest.fixture
def children(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    """Killed runs fork from the first server; the runs that resume them from the second."""
    return fork_servers(PRELOAD, ENV)


def effects(work: Path) -> list[tuple[str, str]]:
    log = work / "effects.log"
    return [tuple(line.split("\t")[:2]) for line in log.read_text().splitlines()] if log.exists() else []  # type: ignore[misc]


def settle_booking(app: tether.App, work: Path, out: subprocess.CompletedProcess[str]) -> None:
    """What a person does with a booking in doubt: looks at the outside world, and says what happened."""
    [call] = [c for c in app.state(TASK).calls if c.tool == "book" and c.status == "intended"]
    assert f"app.resolve_call({TASK!r}, {call.n}, happened=False)" in out.stderr, out.stderr
    if ("book", call.key) in effects(work):
        app.resolve_call(TASK, call.n, {"booked": "BA117"})
    else:
        app.resolve_call(TASK, call.n, happened=False)


def to_the_end(app: tether.App, children: tuple[ForkServer, ForkServer], url: str, work: Path, kill: str) -> None:
    """Runs the task in fresh processes until it completes; ``kill`` (``LIFE/KIND:K``) names the
    process that kills itself, and where."""
    life_to_kill, _, where = kill.partition("/")
    for life in range(1, 9):
        before = app.state(TASK) if life > 1 else None
        recorded = {c.key for c in before.calls if c.status == "completed"} if before else set()
        seen = len(effects(work))
        killed_here = str(life) == life_to_kill
        server = children[0] if killed_here else children[1]
        out = server.run(AGENT, url, str(work), where if killed_here else "none:0", timeout=120)
        assert not {key for _, key in effects(work)[seen:]} & recorded, "a recorded call ran again"
        state = app.state(TASK)
        if state.status is tether.Status.COMPLETED:
            return
        if out.returncode == 1 and "OutcomeUnknownError" in out.stderr:
            settle_booking(app, work, out)
        else:
            assert out.returncode in (0, -signal.SIGKILL), out.stderr
        if state.status is tether.Status.AWAITING_INPUT and "approve" not in state.received:
            app.send_input(TASK, "approve", {"approved": True}, actor="ops")
    raise AssertionError(f"{TASK} did not complete: {app.state(TASK).status}")


def observed(app: tether.App, url: str, work: Path) -> dict[str, Any]:
    """What must equal an uninterrupted run's: the conversation, and the side effects by key."""
    state = app.state(TASK)
    assert state.status is tether.Status.COMPLETED
    messages = [(m.role, m.content, m.tool_call_id, [c.id for c in m.tool_calls]) for m in app.session(TASK).messages()]
    interrupted = [a for c in state.calls for a in c.attempts if a.error_type == "Interrupted"]
    return {
        "messages": messages,
        "runs": collections.Counter(effects(work)),
        "interrupted": len(interrupted),
        "output": state.output,
    }


def cli(server: ForkServer, url: str, *args: str) -> Any:
    """``python -m tether.cli ARGS --db URL --json`` in a process of its own, forked with tether imported."""
    done = server.run(Path(tether.cli.__file__).with_name("__main__.py"), *args, "--db", url, "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check_told(app: tether.App, url: str, server: ForkServer) -> None:
    """``tether show`` and ``tether history`` say what happened: completed, each call returning once."""
    shown = cli(server, url, "show", TASK)
    assert shown["status"] == "completed"
    assert sorted((c["n"], c["status"]) for c in shown["calls"]) == [(c.n, "completed") for c in app.state(TASK).calls]
    history = cli(server, url, "history", TASK)
    returned = collections.Counter(e["data"]["n"] for e in history if e["type"] == "CallCompleted")
    assert set(returned.values()) == {1} and sorted(returned) == [c.n for c in app.state(TASK).calls]


def check_replay(children: tuple[ForkServer, ForkServer], url: str, work: Path) -> None:
    before = dump_database(url)
    replayed = children[1].run(AGENT, url, str(work), "none:0", "replay", timeout=120)
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["clean"], report["report"]
    assert dump_database(url) == before


@pytest.mark.crash
@pytest.mark.timeout(900)
def test_approval_loop_survives_random_sigkills(
    tmp_path: Path, make_url: Any, children: tuple[ForkServer, ForkServer]
) -> None:
    work = tmp_path / "reference"
    work.mkdir()
    url = make_url(work)
    app = tether.App(url)
    to_the_end(app, children, url, work, "0/none:0")
    reference = observed(app, url, work)
    assert reference["interrupted"] == 0  # no process stopped: no attempt says one did
    assert reference["output"] == "All set (9 results)."
    check_told(app, url, children[1])
    check_replay(children, url, work)
    tallies = [json.loads(line) for line in (work / "tally").read_text().splitlines()]
    rng = random.Random(SEED)
    for scenario in range(SCENARIOS):
        life = 1 + scenario % 2
        kinds = sorted(tallies[life - 1])
        kind = kinds[(scenario // 2) % len(kinds)]
        kill = f"{life}/{kind}:{rng.randint(1, tallies[life - 1][kind])}"
        run_scenario(tmp_path / f"s{scenario}", make_url, children, reference, kill)


def run_scenario(
    work: Path, make_url: Any, children: tuple[ForkServer, ForkServer], reference: dict[str, Any], kill: str
) -> None:
    work.mkdir()
    url = make_url(work)
    app = tether.App(url)
    to_the_end(app, children, url, work, kill)
    killed = (work / "killed").exists()
    context = f"seed={SEED} kill={kill} killed={killed}"
    got = observed(app, url, work)
    assert got["messages"] == reference["messages"], context
    assert got["output"] == reference["output"], context
    runs, expected = got["runs"], reference["runs"]
    assert set(runs) == set(expected), context  # the same calls under the same keys
    again = {key: runs[key] - expected[key] for key in runs if runs[key] != expected[key]}
    assert all(n > 0 for n in again.values()), context
    assert sum(again.values()) <= (1 if killed else 0), f"{context}: ran again {again}"
    assert not any(tool == "book" for tool, _ in again), f"{context}: booked twice"
    assert killed or got["interrupted"] == 0, context
    check_told(app, url, children[1])
    check_replay(children, url, work)
