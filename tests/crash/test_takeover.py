"""A worker killed mid-task (SIGKILL) on this host: another worker on the host takes its task over
at once, not when its lease runs out; the task completes well before the lease would have expired."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from tests.crash.test_workers import HERE, TETHER, _env, _fences_never_go_back, _query, _stop, _wait_for

TTL = 60.0


def _worker(tmp: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A child of this test process, not of a fork server: the "zombie" case needs the killed worker
    # to stay unreaped until the test waits for it, which only its own parent can arrange.
    with open(tmp / f"worker-{time.time_ns()}.log", "wb") as log:
        return subprocess.Popen(
            [*TETHER, "worker", "_workapp:app", "--poll", "0.05", "--grace", "5"],
            cwd=HERE,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


@pytest.mark.crash
@pytest.mark.timeout(240)
@pytest.mark.parametrize("reaped", [True, False], ids=["pid-gone", "zombie"])
def test_a_task_held_by_a_killed_worker_is_taken_over_at_once(tmp_path: Path, make_url: Any, reaped: bool) -> None:
    url = make_url(tmp_path)
    # A long lease: waiting it out would take a minute. Each effect takes 0.3 s, room to kill the
    # worker in the middle of the task.
    env = _env(tmp_path, url, TETHER_TEST_TTL=str(TTL), TETHER_TEST_SLOW="0.3")
    app = tether.App(url)
    app.task(name="job")(lambda ctx, n, steps=5: n)  # the type, so start() can record it
    app.start("job", 1, steps=6, task_id="job-1")
    workers = [_worker(tmp_path, env) for _ in range(2)]
    by_pid = {w.pid: w for w in workers}
    try:
        _wait_for(lambda: bool(_query(tmp_path, "SELECT pid FROM raw")), 60, "the first effect to be recorded")
        [(pid,)] = _query(tmp_path, "SELECT DISTINCT pid FROM started")
        victim = by_pid[pid]
        survivor = next(w for w in workers if w is not victim)
        row = app.store.get_task(app.tenant, "job-1")
        assert row is not None and row.lease_owner is not None and row.lease_owner.split(":")[1] == str(pid)
        assert row.lease_expires is not None and row.lease_expires > time.time() + TTL / 2  # far from running out
        victim.send_signal(signal.SIGKILL)
        killed, killed_at = time.monotonic(), time.time()
        if reaped:
            victim.wait()  # its pid is gone; unreaped, it is a zombie, which is as dead
        _wait_for(
            lambda: app.get("job-1").status is tether.Status.COMPLETED, TTL / 3, "the other worker to finish the task"
        )
        took = time.monotonic() - killed
    finally:
        _stop(workers)
        victim.wait() if victim.poll() is None else None
    [(resumed,)] = _query(tmp_path, f"SELECT min(at) FROM started WHERE pid = {survivor.pid}")
    print(f"taken over {resumed - killed_at:.2f}s, completed {took:.2f}s after the kill (lease_ttl {TTL:.0f}s)")
    assert took < TTL / 3
    fences = _fences_never_go_back(app, "job-1")
    assert len(fences) == 2  # the killed worker's lease, then the survivor's: taken once, fenced anew
    after = {p for (p,) in _query(tmp_path, "SELECT pid FROM started")}
    assert after == {victim.pid, survivor.pid}
    state = app.state("job-1")
    assert state.output == 1 and [c.status for c in state.calls] == ["completed"] * 6
    assert len(_query(tmp_path, "SELECT key FROM effects")) == 6  # one effect per call, whoever ran it


def _holder_of(app: tether.App, task_id: str) -> str | None:
    [summary] = [s for s in app.list_tasks() if s.task_id == task_id]
    return summary.held_by


@pytest.mark.crash
@pytest.mark.timeout(240)
def test_without_a_worker_the_listing_says_the_process_is_gone(tmp_path: Path, make_url: Any) -> None:
    # A worker killed with nobody left to take its task: the listing names the dead holder, and the
    # next worker started on this host takes the task at once.
    url = make_url(tmp_path)
    env = _env(tmp_path, url, TETHER_TEST_TTL=str(TTL), TETHER_TEST_SLOW="0.3")
    app = tether.App(url)
    app.task(name="job")(lambda ctx, n, steps=5: n)
    app.start("job", 2, steps=4, task_id="job-2")
    victim = _worker(tmp_path, env)
    workers: list[subprocess.Popen[bytes]] = [victim]
    try:
        _wait_for(lambda: bool(_query(tmp_path, "SELECT pid FROM raw")), 60, "the first effect to be recorded")
        held = _holder_of(app, "job-2")
        assert held is not None and held.startswith(f"{app.worker_id.split(':')[0]}:{victim.pid}:")
        assert held.endswith(", renewed while it runs") and " until " in held
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        held = _holder_of(app, "job-2")
        assert held is not None and held.endswith("(process gone: a worker running on this host takes it over at once)")
        started = time.monotonic()
        workers.append(_worker(tmp_path, env))
        _wait_for(lambda: app.get("job-2").status is tether.Status.COMPLETED, TTL / 3, "the new worker to finish")
        print(f"a worker started after the kill completed the task in {time.monotonic() - started:.2f}s")
    finally:
        _stop(workers)
    assert _holder_of(app, "job-2") is None
