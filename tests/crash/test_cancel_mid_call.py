"""A cancel asked for while a worker in another process is inside a side-effecting call.

The canceller may take a live holder's lease when the holder wrote nothing since the request, but
not while the holder's record ends inside an attempt: the effect may be under way. Taken then, the
call's effect was done with no result recorded, and the canceller found the call in doubt: a
compensation ran twice under its key (it goes on past a cancel), and an ordinary call's effect was
left uncompensated. The holder carries the cancel out instead, and every effect happens once and is
undone once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkedProcess, ForkServer, ForkServers
from tests.crash import _cancelapp

HERE = Path(__file__).parent
CLI = HERE.parent.parent / "src" / "tether" / "cli" / "__main__.py"
PRELOAD = ("tether", "tether.cli", "tether.runtime.worker", "tether.store.sqlite", "tether.store.postgres")
SERVER_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)])}
TTL = 5.0


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _rows(sink: Path, table: str) -> list[tuple[Any, ...]]:
    conn = _cancelapp.sink(sink)
    try:
        return conn.execute(f"SELECT label, key, pid FROM {table} ORDER BY rowid").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _worker(servers: ForkServers, url: str, sink: Path) -> ForkedProcess:
    server: ForkServer = servers(PRELOAD, SERVER_ENV)[0]
    env = {**SERVER_ENV, "TETHER_TEST_URL": url, "TETHER_TEST_SINK": str(sink), "TETHER_TEST_TTL": str(TTL)}
    return server.start(CLI, "worker", "_cancelapp:app", "--poll", "0.05", cwd=HERE, env=env, timeout=300)


def _stop(proc: ForkedProcess) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.crash
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("fail", "held"), [(False, "b"), (True, "undo-b")], ids=["in-a-call", "in-a-compensation"])
def test_a_cancel_waits_for_the_holder_inside_a_call(
    tmp_path: Path, make_url: Any, fork_servers: ForkServers, fail: bool, held: str
) -> None:
    url = make_url(tmp_path)
    sink = tmp_path / "sink.db"
    (tmp_path / f"hold-{held}").touch()
    app = _cancelapp.build(url, sink, TTL)
    app.start("order", fail=fail, task_id="o-1")
    worker = _worker(fork_servers, url, sink)
    outcome: list[object] = []
    try:
        _wait_for(lambda: any(label == held for label, _, _ in _rows(sink, "started")), 60, f"{held} to start")
        canceller = threading.Thread(target=lambda: outcome.append(app.cancel("o-1", reason="changed my mind")))
        canceller.start()
        # The canceller must not have taken the task while the worker is inside the call: whatever
        # it did meanwhile, it ran no effect of its own (it has no way to know whether it is done).
        time.sleep(0.5)
        assert [pid for _, _, pid in _rows(sink, "started") if pid == os.getpid()] == []
        (tmp_path / f"go-{held}").touch()
        canceller.join(4 * TTL)
        assert not canceller.is_alive(), "the cancel never returned"
    finally:
        _stop(worker)
    assert len(outcome) == 1 and isinstance(outcome[0], tether.TaskHandle), outcome
    state = app.state("o-1")
    assert state.status is (tether.Status.FAILED if fail else tether.Status.CANCELLED)
    done = [label for label, _, _ in _rows(sink, "done")]
    # Each effect once, each undone once, latest first; "c" never began (cancelled before it).
    assert done == ["a", "b", "undo-b", "undo-a"], done
    started = _rows(sink, "started")
    assert len({key for _, key, _ in started}) == len(started) == 4, started
    assert {pid for _, _, pid in started} == {worker.pid}  # the holder carried the cancel out


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_tether_cancel_says_the_holder_carries_it_out(tmp_path: Path, make_url: Any, fork_servers: ForkServers) -> None:
    """``tether cancel`` of a task a worker holds inside a call: once its wait (twice the lease) runs
    out, the CLI says the request is recorded and who carries it out (exit 0), not a lease error;
    the worker then does, once its call returns."""
    url = make_url(tmp_path)
    sink = tmp_path / "sink.db"
    (tmp_path / "hold-b").touch()
    ttl = 3.0
    app = _cancelapp.build(url, sink, ttl)
    app.start("order", task_id="o-1")
    env = {**SERVER_ENV, "TETHER_TEST_URL": url, "TETHER_TEST_SINK": str(sink), "TETHER_TEST_TTL": str(ttl)}
    server: ForkServer = fork_servers(PRELOAD, SERVER_ENV)[0]
    worker = server.start(CLI, "worker", "_cancelapp:app", "--poll", "0.05", cwd=HERE, env=env, timeout=300)
    try:
        _wait_for(lambda: any(label == "b" for label, _, _ in _rows(sink, "started")), 60, "b to start")
        cli = [sys.executable, "-m", "tether.cli", "cancel", "o-1", "--app", "_cancelapp:app", "--reason", "nope"]
        said = subprocess.run(cli, cwd=HERE, env=env, capture_output=True, text=True, timeout=120)
        assert said.returncode == 0, said.stdout + said.stderr
        text = " ".join(said.stdout.split())
        assert text.startswith("cancel of o-1 requested: ") and "carries the cancel out itself" in text, text
        assert app.state("o-1").cancel_reason == "nope"
        (tmp_path / "go-b").touch()
        _wait_for(lambda: app.get("o-1").status is tether.Status.CANCELLED, 60, "the worker to cancel it")
    finally:
        _stop(worker)
    assert [label for label, _, _ in _rows(sink, "done")] == ["a", "b", "undo-b", "undo-a"]
