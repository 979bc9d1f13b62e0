"""Worker processes that die (SIGKILL) or stall (SIGSTOP) in the middle of tasks."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkedProcess, ForkServer, ForkServers

HERE = Path(__file__).parent
# A fresh interpreter, for the tests that need a worker to be their own child (to leave it a zombie).
TETHER = [sys.executable, "-m", "tether.cli"]
# `python -m tether.cli worker _workapp:app`, each worker a process of its own forked from a server that
# has imported tether, its CLI and the stores (tests/_forkserver.py), in this folder and the test's env.
CLI = HERE.parent.parent / "src" / "tether" / "cli" / "__main__.py"
PRELOAD = ("tether", "tether.cli", "tether.runtime.worker", "tether.store.sqlite", "tether.store.postgres")
SERVER_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)])}


def _env(tmp: Path, url: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "src"), str(HERE)]),
        "TETHER_TEST_URL": url,
        "TETHER_TEST_SINK": str(tmp / "sink.db"),
        **extra,
    }


@pytest.fixture
def servers(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    return fork_servers(PRELOAD, SERVER_ENV)


def _worker(servers: tuple[ForkServer, ForkServer], n: int, env: dict[str, str]) -> ForkedProcess:
    """Worker ``n``, forked from one server or the other (their hash seeds differ, as two fresh processes' would)."""
    args = ("worker", "_workapp:app", "--poll", "0.05", "--grace", "5")
    return servers[n % 2].start(CLI, *args, cwd=HERE, env=env, timeout=600)


def _query(tmp: Path, sql: str) -> list[tuple[object, ...]]:
    if not (tmp / "sink.db").exists():
        return []
    conn = sqlite3.connect(tmp / "sink.db", timeout=30)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _kill_inside_an_effect(tmp: Path, victim: ForkedProcess, timeout: float = 60.0) -> None:
    """SIGKILL ``victim`` while it is inside an effect (started, not yet done), so that it dies holding
    the lease of a task it has not finished. Stopped (SIGSTOP) while the sink is read, so what is read
    is where it stays: a kill timed by a sleep after seeing an effect start landed, on a loaded
    machine, after the victim had finished its task and held none."""
    deadline = time.monotonic() + timeout
    busy = (
        "SELECT 1 FROM started s WHERE s.pid = ?"
        " AND NOT EXISTS (SELECT 1 FROM raw r WHERE r.key = s.key AND r.pid = ?)"
    )
    while True:
        assert time.monotonic() < deadline, "the first worker never was inside an effect"
        victim.send_signal(signal.SIGSTOP)
        try:
            conn = sqlite3.connect(tmp / "sink.db", timeout=0.2)  # the stopped victim may hold its write lock
            inside = conn.execute(busy, (victim.pid, victim.pid)).fetchone() is not None
            conn.close()
        except sqlite3.OperationalError:  # no sink yet, or locked by the stopped victim
            inside = False
        if inside:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            return
        victim.send_signal(signal.SIGCONT)
        time.sleep(0.01)


def _stop(procs: list[ForkedProcess]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_jobs(app: tether.App, jobs: int, timeout: float, what: str) -> None:
    _wait_for(lambda: all(app.get(f"job-{n}").status is tether.Status.COMPLETED for n in range(jobs)), timeout, what)


def _call_keys(app: tether.App, jobs: int) -> set[str]:
    """The idempotency key of every call the jobs recorded."""
    return {call.key for n in range(jobs) for call in app.state(f"job-{n}").calls}


def _fences_never_go_back(app: tether.App, task_id: str) -> set[int]:
    """Once a newer lease wrote to the task, no older lease writes again."""
    rows = app.store.read_events(app.tenant, task_id)
    fences = [r.fence for r in rows if r.fence is not None]
    assert fences == sorted(fences), f"an older lease wrote after a newer one in {task_id}: {fences}"
    return set(fences)


@pytest.mark.crash
@pytest.mark.timeout(360)
def test_sigkill_a_worker_mid_task_and_the_others_take_over(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer]
) -> None:
    url = make_url(tmp_path)
    # A 3 s lease renewed every 1 s: a live worker's renewal would have to be 2 s late for another to
    # take its task (with 1 s, a third of a second on a loaded machine did, and the effect ran twice).
    env = _env(tmp_path, url, TETHER_TEST_TTL="3.0", TETHER_TEST_SLOW="0.05")
    app = tether.App(url)
    app.task(name="job")(lambda ctx, n, steps=5: n)  # the type, so start() can record it
    jobs = 12
    for n in range(jobs):
        app.start("job", n, task_id=f"job-{n}")
    workers = [_worker(servers, n, env) for n in range(3)]
    try:
        victim = workers[0]
        _kill_inside_an_effect(tmp_path, victim)
        _wait_for_jobs(app, jobs, 90, "every job to complete")
    finally:
        _stop(workers)
    effects = _query(tmp_path, "SELECT key FROM effects")
    raw = _query(tmp_path, "SELECT key, pid FROM raw")
    assert len(effects) == jobs * 5  # one effect per logical call
    expected = _call_keys(app, jobs)
    assert {k for (k,) in effects} == expected
    assert {k for k, _ in raw} == expected  # every delivery used its call's one key
    assert len(raw) - len(effects) <= 1  # a repeat only for the effect the kill landed in
    taken_over = [n for n in range(jobs) if len(_fences_never_go_back(app, f"job-{n}")) > 1]
    victims_jobs = {k.split(":")[0] for k, pid in raw if pid == victim.pid} | {
        k.split(":")[0] for k, pid in _query(tmp_path, "SELECT key, pid FROM started") if pid == victim.pid
    }
    assert victims_jobs, "the killed worker never ran anything"
    assert taken_over, "no task moved from the killed worker to another"


@pytest.mark.crash
@pytest.mark.timeout(360)
def test_a_stalled_worker_cannot_write_after_its_task_was_taken_over(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer]
) -> None:
    url = make_url(tmp_path)
    # The first worker's effects take 2 s: room to SIGSTOP it inside its first one, however late this
    # process sees it start. The second worker's are quick: what is checked is what the first one
    # writes once it wakes, not how long the second one takes.
    env = _env(tmp_path, url, TETHER_TEST_TTL="1.0", TETHER_TEST_SLOW="2.0")
    app = tether.App(url)
    app.task(name="job")(lambda ctx, n, steps=5: n)
    app.start("job", 1, steps=4, task_id="job-1")
    first = _worker(servers, 0, env)
    second: ForkedProcess | None = None
    try:
        _wait_for(
            lambda: (
                _query(tmp_path, "SELECT count(*) FROM started")[0][0] >= 1  # type: ignore[index]
                if _query(tmp_path, "SELECT count(*) FROM started")
                else False
            ),
            60,
            "the first effect to start",
        )
        first.send_signal(signal.SIGSTOP)  # paused mid-effect, past its lease
        second = _worker(servers, 1, {**env, "TETHER_TEST_SLOW": "0.05"})
        _wait_for(lambda: app.get("job-1").status is tether.Status.COMPLETED, 60, "the second worker to finish")
        first.send_signal(signal.SIGCONT)  # it wakes up and tries to record its stale result
        _wait_for(
            lambda: any(pid == first.pid for (pid,) in _query(tmp_path, "SELECT pid FROM raw")),
            30,
            "the stalled worker to finish its effect",
        )
        time.sleep(0.5)
    finally:
        _stop([first, *([second] if second else [])])
    fences = _fences_never_go_back(app, "job-1")
    assert len(fences) >= 2
    state = app.state("job-1")
    assert state.status is tether.Status.COMPLETED and [c.status for c in state.calls] == ["completed"] * 4
    assert len(_query(tmp_path, "SELECT key FROM effects")) == 4
    first_call = state.calls[0]
    assert [a.error_type for a in first_call.attempts] == ["Interrupted", None]  # taken over in doubt, same key


@pytest.mark.crash
@pytest.mark.timeout(360)
def test_cancel_a_task_another_process_is_running(
    tmp_path: Path, make_url: Any, servers: tuple[ForkServer, ForkServer]
) -> None:
    url = make_url(tmp_path)
    env = _env(tmp_path, url, TETHER_TEST_TTL="5.0", TETHER_TEST_SLOW="0.3")
    app = tether.App(url)

    @app.tool
    def effect(job: int, step: int) -> dict[str, Any]:  # the same tool name as in the workers' app
        raise AssertionError("the canceller never runs a tool: it only replays and compensates")

    @app.task(name="job")
    def job(ctx: tether.TaskContext, n: int, steps: int = 5) -> int:
        for step in range(steps):
            ctx.call(effect, n, step)
        return n

    app.start(job, 1, steps=6, task_id="job-1")
    runner = _worker(servers, 0, env)
    try:
        _wait_for(lambda: len(_query(tmp_path, "SELECT key FROM raw")) >= 2, 60, "two effects")
        cancelled = app.cancel("job-1", reason="user cancelled")
        assert cancelled.status is tether.Status.CANCELLED
        time.sleep(1.0)  # the running worker's next append is refused; it stops
    finally:
        _stop([runner])
    state = app.state("job-1")
    assert state.status is tether.Status.CANCELLED
    assert len([c for c in state.calls if c.kind == "call" and c.status == "completed"]) < 6
    _fences_never_go_back(app, "job-1")


@pytest.mark.crash
@pytest.mark.timeout(360)
def test_sleep_across_a_crash_keeps_its_wake_up_time(tmp_path: Path, make_url: Any) -> None:
    url = make_url(tmp_path)
    script = f"""
import tether
app = tether.App({url!r}, inline_wait=30)
@app.task
def nap(ctx):
    ctx.sleep(1.5)
    return "rested"
app.run(nap, task_id="nap-1")
"""
    child = subprocess.Popen(
        [sys.executable, "-c", script], env=_env(tmp_path, url), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    app = tether.App(url, inline_wait=30)
    _wait_for(
        lambda: any(r.event.event_type == "SleepScheduled" for r in _events_or_none(app, "nap-1")),
        30,
        "the sleep to start",
    )
    child.send_signal(signal.SIGKILL)  # killed in the middle of the sleep
    child.wait()

    @app.task
    def nap(ctx: tether.TaskContext) -> str:
        ctx.sleep(1.5)
        return "rested"

    run = app.resume("nap-1")
    events = app.log.events("nap-1")
    sleeps = [r for r in events if r.event.event_type == "SleepScheduled"]
    assert run.output == "rested" and len(sleeps) == 1  # the same sleep went on, not a new one
    assert events[-1].at >= sleeps[0].event.until  # type: ignore[attr-defined]


def _events_or_none(app: tether.App, task_id: str) -> list[tether.events.Recorded]:
    try:
        return app.log.events(task_id)
    except tether.TaskNotFoundError:
        return []


@pytest.mark.crash
@pytest.mark.timeout(360)
def test_postgres_connections_cut_while_workers_run(tmp_path: Path, servers: tuple[ForkServer, ForkServer]) -> None:
    """pg_terminate_backend on every connection of this test's schema, three times, while two workers run jobs."""
    from tests.conftest import PG_PROBLEM, PG_URL, pg_url

    if PG_PROBLEM:
        pytest.skip(PG_PROBLEM)
    import psycopg

    urls = pg_url("f")
    url = next(urls)
    try:
        env = _env(tmp_path, url, TETHER_TEST_TTL="2.0", TETHER_TEST_SLOW="0.05")
        app = tether.App(url)
        app.task(name="job")(lambda ctx, n, steps=5: n)
        jobs = 10
        for n in range(jobs):
            app.start("job", n, task_id=f"job-{n}")
        workers = [_worker(servers, n, env) for n in range(2)]
        cuts = 0
        try:
            with psycopg.connect(PG_URL, autocommit=True) as admin:
                for _ in range(3):
                    _wait_for(lambda done=cuts: len(_query(tmp_path, "SELECT key FROM raw")) > done * 8, 60, "progress")
                    killed = admin.execute(  # only this test's connections: tagged with its schema
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND application_name = %s",
                        (app.store.application_name,),  # type: ignore[attr-defined]
                    ).fetchone()
                    assert killed is not None and killed[0] > 0
                    cuts += 1
            done = tether.App(url)
            _wait_for_jobs(done, jobs, 120, "every job to complete after the cuts")
        finally:
            _stop(workers)
        effects = _query(tmp_path, "SELECT key FROM effects")
        expected = _call_keys(done, jobs)
        assert {k for (k,) in effects} == expected and len(effects) == jobs * 5  # none lost, none twice
        for n in range(jobs):
            _fences_never_go_back(done, f"job-{n}")
    finally:
        next(urls, None)
