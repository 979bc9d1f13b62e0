"""Features that hold alone, tried together from outside, as a user meets them: a fork or rewind of a
task with a conversation under ``tether worker``, and a wait inside a parallel branch under
concurrent workers. Each runs real ``tether worker`` processes on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkedProcess, ForkServer, ForkServers
from tests.crash.test_workers import CLI, PRELOAD, SERVER_ENV

HERE = Path(__file__).parent


def _env(tmp: Path, url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)]),
        "TETHER_TEST_URL": url,
        "TETHER_TEST_SINK": str(tmp / "sink.db"),
    }


def _app(tmp: Path, url: str) -> tether.App:
    os.environ["TETHER_TEST_URL"], os.environ["TETHER_TEST_SINK"] = url, str(tmp / "sink.db")
    sys.path.insert(0, str(HERE))
    try:
        import _compose_app
    finally:
        sys.path.remove(str(HERE))
    app = tether.App(url)
    app.engine.registry = _compose_app.app.registry  # the workers' task code, under this process's own app
    return app


def _effects(tmp: Path) -> list[tuple[str, str, str]]:
    if not (tmp / "sink.db").exists():
        return []
    conn = sqlite3.connect(tmp / "sink.db", timeout=30)
    try:
        return conn.execute("SELECT task, name, key FROM effects ORDER BY rowid").fetchall()
    finally:
        conn.close()


@pytest.fixture
def servers(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    """Each ``tether worker`` a process of its own, forked from a server that has imported tether and
    its CLI (the one the worker tests use) instead of a fresh interpreter importing them again."""
    return fork_servers(PRELOAD, SERVER_ENV)


def _worker(server: ForkServer, tmp: Path, url: str, *args: str) -> ForkedProcess:
    log = tmp / f"worker-{time.time_ns()}.log"
    log.touch()  # the child opens it for writing: its stdout and stderr
    args = ("worker", "_compose_app:app", "--poll", "0.05", *args)
    return server.start(CLI, *args, cwd=HERE, env=_env(tmp, url), stdout=log, stderr_to_stdout=True, timeout=600)


def _logs(tmp: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(tmp.glob("worker-*.log")))


@pytest.mark.crash
@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["fork", "rewind"])
def test_a_branch_of_a_conversation_is_never_claimed_and_the_worker_runs_the_rest(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer], how: str
) -> None:
    url = make_url(tmp_path)
    app = _app(tmp_path, url)
    run = app.run("chat", "Where is my order?", task_id="c1")
    assert run.status is tether.Status.AWAITING_INPUT
    at = next(e.seq for e in app.history("c1") if e.event.event_type == "InputRequested")
    if how == "fork":
        branch = app.fork("c1", at=at, new_id="c1-fork").task_id
    else:
        branch = app.rewind("c1", to=at).task_id
    app.send_input(branch, "answer", "on its way")
    plain = [app.start("plain", n, task_id=f"p{n}").task_id for n in range(3)]

    worker = _worker(servers[0], tmp_path, url, "--idle-exit")
    try:
        code = worker.wait(timeout=90)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
        pytest.fail(f"tether worker --idle-exit did not exit:\n{_logs(tmp_path)[-3000:]}")
    assert code == 0, _logs(tmp_path)
    assert "first event must be TaskCreated" not in _logs(tmp_path)
    for task_id in [branch, *plain]:
        assert app.get(task_id).status is tether.Status.COMPLETED, (task_id, _logs(tmp_path)[-3000:])
    conversation = app.state(branch).session_id
    assert conversation is not None and "@" in conversation
    assert [m.content for m in app.session(conversation).messages()] == ["Where is my order?", "on its way"]
    rows = app.store.list_tasks(app.tenant, tether.store.TaskFilter(internal=True), limit=100)
    assert {r.status for r in rows if r.type == "tether.session"} == {"open"}


@pytest.mark.crash
@pytest.mark.timeout(240)
def test_a_wait_in_a_parallel_branch_replays_under_concurrent_workers(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer]
) -> None:
    url = make_url(tmp_path)
    app = _app(tmp_path, url)
    ids = [app.start("support", f"o{i}", task_id=f"s{i}").task_id for i in range(6)]
    # From the two servers: the workers hash strings differently, as two fresh processes would.
    workers = [_worker(servers[0], tmp_path, url, "-c", "4"), _worker(servers[1], tmp_path, url, "-c", "2")]
    try:
        deadline = time.monotonic() + 90
        while not all(app.get(t).status is tether.Status.AWAITING_INPUT for t in ids):
            assert time.monotonic() < deadline, ([app.get(t).status for t in ids], _logs(tmp_path)[-3000:])
            time.sleep(0.05)
        for task_id in ids:
            app.send_input(task_id, "approve", True)
        deadline = time.monotonic() + 90
        while not all(app.get(t).status is tether.Status.COMPLETED for t in ids):
            assert time.monotonic() < deadline, ([app.get(t).status for t in ids], _logs(tmp_path)[-3000:])
            time.sleep(0.05)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
    assert "NonDeterminismError" not in _logs(tmp_path) and "code now asks" not in _logs(tmp_path)
    effects = _effects(tmp_path)
    for task_id in ids:
        state = app.state(task_id)
        assert sorted(c.tool for c in state.calls) == sorted(
            ["model", "lookup", "lookup", "lookup", "model", "issue_refund", "send_email", "model"]
        )
        assert state.output[-2:] == [f"refunded o{task_id[1:]}", "sent customer"]
        mine = [(name, key) for task, name, key in effects if task == task_id]
        # One effect per logical call, each under the key its call recorded.
        assert sorted(name for name, _ in mine) == ["email", "refund"], mine
        assert {key for _, key in mine} == {c.key for c in state.calls if c.tool in ("issue_refund", "send_email")}
        assert app.replay(task_id).clean
        # No attempt was cut off: nothing ran a second time, nothing looped.
        assert all(len(c.attempts) == 1 for c in state.calls), [(c.n, c.tool, c.attempts) for c in state.calls]
