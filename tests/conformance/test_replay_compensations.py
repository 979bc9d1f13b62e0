"""`tether check` and `tether replay` report a task that compensated as clean (the kit's
tether.testing.runtime.calls.test_replay_compensations walks the compensations on every backend)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tether.cli import main

AGENT = """
import tether

app = tether.App({url!r})
undone = []

@app.tool
def hold_seat(seat: str) -> str:
    return "held " + seat

@app.tool
def release_seat(held: str) -> None:
    undone.append(held)

@app.tool(retry=tether.Retry(max_attempts=2, backoff=0))
def charge(amount: int) -> str:
    raise ValueError("card declined")

@app.task
def book(ctx, seat: str) -> str:
    held = ctx.call(hold_seat, seat, compensate=release_seat)
    return held + ", " + ctx.call(charge, 420)

@app.task
def trip(ctx) -> str:
    ctx.call(hold_seat, "BA117", compensate=release_seat)
    ctx.wait_for_input("approve")
    return "done"
"""


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``agent_comp.py`` in a folder on the path, its app over ./tether.db."""
    monkeypatch.delenv("TETHER_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent_comp.py").write_text(AGENT.format(url=f"sqlite:///{tmp_path / 'tether.db'}"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import agent_comp  # type: ignore[import-not-found]

    yield agent_comp
    agent_comp.app.close()
    sys.modules.pop("agent_comp", None)


def test_tether_check_and_replay_report_compensated_tasks_clean(agent: Any) -> None:
    agent.app.run(agent.book, "12A", task_id="booking-1")
    agent.app.run(agent.trip, task_id="trip-8")
    agent.app.cancel("trip-8", reason="not needed")
    assert agent.undone == ["held 12A", "held BA117"]
    runner = CliRunner()
    checked = runner.invoke(main, ["check", "--app", "agent_comp:app", "--finished", "5"], catch_exceptions=False)
    assert checked.exit_code == 0, checked.stdout
    assert "2 task(s) checked: 2 replay cleanly, 0 diverge" in checked.stdout
    for task_id in ("booking-1", "trip-8"):
        replayed = runner.invoke(main, ["replay", task_id, "--app", "agent_comp:app"], catch_exceptions=False)
        assert replayed.exit_code == 0 and "replays cleanly" in replayed.stdout, replayed.stdout
