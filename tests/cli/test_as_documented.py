"""Verbs run as the docs write them, by a newcomer: ``cancel`` (docs/workers.md), ``fork --inputs``
(docs/timetravel.md) and every verb's lines in a pipe ("the events as lines", "plain text in a pipe")."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli._console import python, run_tether
from tests.cli.test_cli import pythonpath
from tests.conftest import dump_database

AGENT = textwrap.dedent(
    """
    import tether

    app = tether.App("sqlite:///tether.db")
    undone = []

    @app.tool(compensate=lambda hold: undone.append(hold))
    def hold_seat(dest: str) -> str:
        return "seat to " + dest

    @app.task
    def trip(ctx: tether.TaskContext, dest: str) -> str:
        ctx.plan(["hold", "approve"])
        with ctx.step("hold"):
            seat = ctx.call(hold_seat, dest)
        with ctx.step("approve"):
            ok = ctx.wait_for_input("approve", prompt="Book " + seat + "?")
        return ("booked " + seat + " ") * 20 if ok else "no"
    """
)


def tether_cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The console script with stdout a pipe and no COLUMNS: as `tether … | cat` runs it."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TETHER_URL="", PYTHONPATH=pythonpath(folder))
    return run_tether(*args, cwd=folder, env=env)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """``agent.py`` and ./tether.db with t1 and t2, each holding a seat and waiting for approval."""
    (tmp_path / "agent.py").write_text(AGENT)
    code = "from agent import app, trip\nfor t in ('t1', 't2'):\n    app.run(trip, 'NYC', task_id=t)"
    env = {**os.environ, "PYTHONPATH": pythonpath(tmp_path)}
    made = python(code, cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    return tmp_path


def test_cancel_says_it_cancelled_and_exits_zero(folder: Path) -> None:
    done = tether_cli(folder, "cancel", "t2", "--app", "agent:app", "--reason", "changed mind", "--actor", "me")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "cancelled t2: changed mind (1 call compensated)" and done.stderr == ""
    again = tether_cli(folder, "cancel", "t2", "--app", "agent:app", "--reason", "twice")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.strip() == "t2 was already cancelled: changed mind; nothing changed"
    history = tether_cli(folder, "history", "t2", "--json").stdout
    assert history.count("CancelRequested") == 1 and "twice" not in history  # the repeat wrote nothing


def test_cancel_with_json_agrees(folder: Path) -> None:
    first = tether_cli(folder, "cancel", "t1", "--app", "agent:app", "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads(first.stdout) == {
        "task_id": "t1", "status": "cancelled", "output": None, "failure": None, "already_cancelled": False
    }  # fmt: skip
    again = tether_cli(folder, "cancel", "t1", "--app", "agent:app", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["already_cancelled"] is True


def test_fork_with_new_inputs_through_the_app(folder: Path) -> None:
    forked = tether_cli(folder, "fork", "t1", "--at", "2", "--id", "t1-lon", "--inputs", '{"dest": "LON"}',
                        "--app", "agent:app", "--json")  # fmt: skip
    assert forked.returncode == 0, forked.stdout + forked.stderr
    assert json.loads(forked.stdout) == {"task_id": "t1-lon", "parent": "t1", "at": 2, "status": "pending"}
    assert json.loads(tether_cli(folder, "show", "t1-lon", "--json").stdout)["inputs"] == {"dest": "LON"}
    resumed = tether_cli(folder, "resume", "t1-lon", "--app", "agent:app", "--json")
    assert json.loads(resumed.stdout)["status"] == "awaiting_input", resumed.stdout + resumed.stderr
    plain = tether_cli(folder, "fork", "t1", "--at", "2", "--id", "t1-b", "--app", "agent:app")
    assert plain.returncode == 0 and "tether resume t1-b --app agent:app" in " ".join(plain.stdout.split())


def test_fork_with_new_inputs_but_no_app_says_to_pass_it_and_writes_nothing(folder: Path) -> None:
    url = f"sqlite:///{folder / 'tether.db'}"
    before = dump_database(url)
    for extra in ((), ("--json",)):
        refused = tether_cli(folder, "fork", "t1", "--at", "2", "--inputs", '{"dest": "LON"}', *extra)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "pass --app MODULE:APP" in refused.stdout + refused.stderr
        assert "is not a task of this app" not in refused.stdout + refused.stderr
    both = tether_cli(folder, "fork", "t1", "--at", "2", "--app", "agent:app", "--db", "tether.db")
    assert both.returncode == 2 and "not both" in both.stderr
    other = tether_cli(folder, "fork", "t1", "--at", "2", "--app", "agent:app", "--tenant", "acme")
    assert other.returncode == 2 and "is not the tenant of agent:app" in other.stderr
    assert dump_database(url) == before


def test_in_a_pipe_a_line_is_never_wrapped(folder: Path) -> None:
    tether_cli(folder, "send", "t1", "approve", "true")
    tether_cli(folder, "resume", "t1", "--app", "agent:app")
    long_output = ("booked seat to NYC " * 20).rstrip()
    logs = tether_cli(folder, "logs", "t1").stdout.splitlines()
    assert all(re.match(r"\d\d:\d\d:\d\d\.\d{3} #\d", line) for line in logs), logs  # each line an event
    assert len(logs) == 15 and max(len(line) for line in logs) > 80  # beyond rich's 80 columns in a pipe
    after = tether_cli(folder, "logs", "t1", "--after", "13").stdout.splitlines()
    assert len(after) == 2 and re.search(r"#14 +output booked seat to NYC booked", after[0]), after
    shown = tether_cli(folder, "show", "t1").stdout.splitlines()
    assert any(line.startswith("output: ") and long_output[:90] in line for line in shown), shown
    full = tether_cli(folder, "state", "t1", "--full").stdout
    assert json.loads(full)["output"].rstrip() == long_output
    sent = tether_cli(folder, "send", "t2", "approve", "false").stdout
    assert len(sent.splitlines()) == 1 and sent.startswith("answered 'approve' for t2") and len(sent) > 80
    listed = tether_cli(folder, "tasks").stdout.splitlines()
    [row] = [line for line in listed if line.startswith("t2 ")]  # plain text: no box, no margin
    assert "awaiting_input" in row and "step 2 of 2; 1 committed" in row  # the table's row stays one line


def test_a_terminal_keeps_wrapping(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.cli._render import console

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "40")
    for is_terminal, stream in ((True, Terminal()), (False, io.StringIO())):
        monkeypatch.setattr(sys, "stdout", stream)
        console().print("word " * 20)
        assert (len(stream.getvalue().splitlines()) > 1) is is_terminal
