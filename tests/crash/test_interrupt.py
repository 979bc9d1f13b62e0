"""Ctrl-C and SIGTERM stop `app.run` cleanly: the lease is released, the task is left resumable,
and one line says how to resume it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkServer, ForkServers
from tests.crash.test_workers import PRELOAD, SERVER_ENV

HERE = Path(__file__).parent
AGENT = HERE / "_interrupted_agent.py"
ENV = {**os.environ, "PYTHONPATH": str(HERE.parent.parent / "src")}


@pytest.fixture
def servers(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    """The runs that need no terminal's signal dispositions, each a process of its own forked from a
    server that has imported tether (the one the worker tests use); the resumes from the second."""
    return fork_servers(PRELOAD, SERVER_ENV)


def _as_from_a_terminal() -> None:
    """The child starts with Ctrl-C's default action, as a program run from a terminal does: a shell
    without job control starts what it runs in the background (``cmd &``) with SIGINT ignored, and
    a test suite run that way would pass that on, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.crash
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_releases_its_lease_and_resumes(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer], signum: int
) -> None:
    url = make_url(tmp_path)
    ready = tmp_path / "ready"
    args = [sys.executable, str(AGENT), url, str(ready)]
    child = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=_as_from_a_terminal
    )
    deadline = time.time() + 30
    while not ready.exists():
        assert time.time() < deadline and child.poll() is None, "the task never reached its slow call"
        time.sleep(0.02)
    child.send_signal(signum)
    _, err = child.communicate(timeout=30)
    assert child.returncode != 0
    assert "task 'int-1' stopped by" in err and "tether resume int-1" in err, err
    assert len(err.strip().splitlines()) <= 12, err  # a short report, not a 30-line traceback
    app = tether.App(url)
    row = app.store.get_task(app.tenant, "int-1")
    assert row is not None and row.lease_owner is None  # released: no waiting for it to expire
    state = app.state("int-1")
    assert state.status is tether.Status.RUNNING and state.call(2) is not None
    done = servers[1].run(AGENT, url, str(ready), env=ENV)
    assert done.returncode == 0, done.stderr
    assert tether.App(url).state("int-1").output == 21


@pytest.mark.crash
def test_a_task_held_by_a_dead_process_is_reported_and_taken_over(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer]
) -> None:
    url = make_url(tmp_path)
    ready = tmp_path / "ready"
    first_life, next_lives = servers
    child = first_life.start(AGENT, url, str(ready), env=ENV)
    deadline = time.time() + 30
    while not ready.exists():
        assert time.time() < deadline and child.poll() is None
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    app = tether.App(url)
    [line] = [t for t in app.list_tasks() if t.task_id == "int-1"]
    assert line.held_by is not None and "process gone" in line.held_by
    started = time.time()
    done = next_lives.run(AGENT, url, str(ready), env=ENV)  # no waiting out the 30 s lease
    assert done.returncode == 0, done.stderr
    assert time.time() - started < 20 and tether.App(url).state("int-1").output == 21
