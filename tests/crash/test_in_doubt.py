"""A payment whose process is SIGKILLed inside its tool (``on_unknown="raise"``): the task waits for a
person, the workers go on with the others (before, each one took the task up again and again, and
the queue behind it starved), and the command ``tether show`` prints settles it."""

from __future__ import annotations

import os
import shlex
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkServer, ForkServers
from tests.crash.test_workers import CLI, PRELOAD, SERVER_ENV

HERE = Path(__file__).parent


@pytest.fixture
def servers(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    """``tether`` commands, each a process of its own forked from a server that has imported tether
    and its CLI (the ones tests/crash/test_workers.py uses); the killed worker from the first, the
    commands after it from the second, so they hash as fresh processes would."""
    return fork_servers(PRELOAD, SERVER_ENV)


def _run(server: ForkServer, tmp: Path, url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)]),
        "TETHER_TEST_URL": url,
        "TETHER_TEST_SINK": str(tmp / "sink.db"),
        "COLUMNS": "250",
    }
    return server.run(CLI, *args, cwd=HERE, env=env, timeout=timeout)


def _charges(tmp: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(tmp / "sink.db")
    try:
        return conn.execute("SELECT key, pid FROM charges").fetchall()
    finally:
        conn.close()


def _lapsed(app: tether.App, task_id: str) -> None:
    """Wait until no process holds ``task_id`` (the killed worker's lease lapses)."""
    deadline = time.monotonic() + 30
    while (row := app.store.get_task(app.tenant, task_id)) is not None and row.held_by(time.time()) is not None:
        assert time.monotonic() < deadline, "the killed worker's lease never lapsed"
        time.sleep(0.05)


@pytest.mark.crash
@pytest.mark.timeout(240)
def test_a_payment_killed_inside_its_tool_waits_for_a_person(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer]
) -> None:
    url = make_url(tmp_path)
    first_life, next_lives = servers
    app = tether.App(url)
    app.task(name="pay")(lambda ctx, amount: amount)  # the types, so start() can record them
    app.task(name="note")(lambda ctx, n: n)
    app.start("pay", 30, task_id="pay-1")
    killed = _run(first_life, tmp_path, url, "worker", "_payapp:app", "--poll", "0.05")
    assert killed.returncode == -9, killed.stderr  # SIGKILLed inside the tool, after the charge
    assert len(_charges(tmp_path)) == 1
    for n in range(3):
        app.start("note", n, task_id=f"note-{n}")
    _lapsed(app, "pay-1")

    worker = _run(next_lives, tmp_path, url, "worker", "_payapp:app", "--poll", "0.05", "--idle-exit")
    assert worker.returncode == 0, worker.stderr
    assert all(app.get(f"note-{n}").status is tether.Status.COMPLETED for n in range(3))
    assert worker.stderr.count("pay-1 stopped") == 1, worker.stderr  # once, not a run per claim
    parked = app.state("pay-1")
    assert parked.status is tether.Status.AWAITING_INPUT and parked.waiting is not None
    assert parked.waiting.key == "tether.call-1" and len(_charges(tmp_path)) == 1

    listed = _run(next_lives, tmp_path, url, "tasks", "--db", url)
    assert "call #1 in doubt" in listed.stdout, listed.stdout + listed.stderr
    shown = _run(next_lives, tmp_path, url, "show", "pay-1", "--db", url)
    assert shown.returncode == 0 and "in doubt" in shown.stdout, shown.stdout + shown.stderr
    printed = [
        line.split("  if it did not")[0].strip() for line in shown.stdout.splitlines() if "--not-happened" in line
    ]
    assert len(printed) == 1 and printed[0].startswith("tether resolve pay-1 1 "), shown.stdout
    settled = _run(next_lives, tmp_path, url, *shlex.split(printed[0])[1:])  # as printed, run as a person would
    assert settled.returncode == 0, settled.stderr

    again = _run(next_lives, tmp_path, url, "worker", "_payapp:app", "--poll", "0.05", "--idle-exit")
    assert again.returncode == 0, again.stderr
    done = app.state("pay-1")
    assert done.status is tether.Status.COMPLETED and done.output == "charged 30"
    charges = _charges(tmp_path)
    assert len(charges) == 2 and charges[0][0] == charges[1][0] == done.calls[0].key  # again, same key
    assert [a.error_type for a in done.calls[0].attempts] == ["Interrupted", None]
