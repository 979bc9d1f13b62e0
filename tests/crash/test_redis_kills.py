"""Redis under SIGKILL: the redis-server itself killed mid-run and started again on its AOF, and worker
processes killed mid-task while they run on Redis.

At appendfsync always (what ``durability="full"`` demands) Redis replies to a write only once it is
in the AOF on disk: after a SIGKILL and a restart on the same files, every append the store
acknowledged is there, and the workers' calls each have their one effect.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from tests._forkserver import ForkServer, ForkServers
from tests._redis_server import RedisServer, problem
from tests.crash.conftest import scenarios
from tests.crash.test_workers import (
    PRELOAD,
    SERVER_ENV,
    _call_keys,
    _env,
    _fences_never_go_back,
    _query,
    _stop,
    _wait_for,
    _wait_for_jobs,
    _worker,
)
from tests.crash.test_workers import (
    test_sigkill_a_worker_mid_task_and_the_others_take_over as test_sigkill_a_worker_on_redis,
)
from tether.store import EventRow, TaskRow, open_store

__all__ = ["test_sigkill_a_worker_on_redis"]

PROBLEM = problem()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if PROBLEM:
        pytest.skip(PROBLEM)
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.kill()


@pytest.fixture
def make_url(redis_server: RedisServer) -> Any:
    """The crash tests' URL factory (tests/crash/conftest.py), on this test's own redis-server."""
    return lambda folder: f"{redis_server.url}?prefix=c&durability=full"


@pytest.fixture
def servers(fork_servers: ForkServers) -> tuple[ForkServer, ForkServer]:
    return fork_servers((*PRELOAD, "tether.store.redis"), SERVER_ENV)


def _row(task_id: str) -> TaskRow:
    now = time.time()
    return TaskRow(task_id, "t", "appender", "running", None, None, now, now, 1)


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_acknowledged_appends_survive_sigkills_of_the_server(redis_server: RedisServer) -> None:
    """Two threads append to streams of their own while the server is SIGKILLed and restarted on its
    AOF: after each restart every append that returned is there, in order, byte for byte."""
    url = f"{redis_server.url}?prefix=a&durability=full"
    store = open_store(url)
    acked: dict[str, list[str]] = {"a": [], "b": []}
    stop = threading.Event()
    errors: list[BaseException] = []

    def append(task_id: str) -> None:
        store.create_task("t", _row(task_id), EventRow(1, "E", 1, time.time(), '"1"'))
        acked[task_id].append('"1"')
        while not stop.is_set():
            payload = f'"{len(acked[task_id]) + 1}-{"x" * 400}"'
            try:
                store.append(
                    "t", task_id, [EventRow(len(acked[task_id]) + 1, "E", 1, time.time(), payload)], len(acked[task_id])
                )
            except tether.StoreUnavailableError:
                continue  # not acknowledged: it may or may not have landed, and is written again
            except tether.ConflictError as exc:
                errors.append(exc)  # a write the store answered for twice, or one it lost
                return
            acked[task_id].append(payload)

    threads = [threading.Thread(target=append, args=(name,)) for name in acked]
    for thread in threads:
        thread.start()
    try:
        for kill in range(scenarios(3)):
            before = sum(map(len, acked.values()))
            _wait_for(lambda b=before: sum(map(len, acked.values())) > b + random.randint(5, 60), 60, "appends")
            redis_server.kill()
            time.sleep(random.uniform(0.0, 0.3))  # the clients see refused connections meanwhile
            redis_server.start()
            known = {task_id: list(payloads) for task_id, payloads in acked.items()}  # acknowledged before the read
            check = open_store(url)
            try:
                for task_id, payloads in known.items():
                    stored = [e.data for e in check.read_events("t", task_id)]
                    assert stored[: len(payloads)] == payloads, f"kill {kill}: acknowledged appends lost"
            finally:
                check.close()
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        store.close()
    assert not errors, errors
    final = open_store(url)
    try:
        for task_id, payloads in acked.items():
            assert [e.data for e in final.read_events("t", task_id)] == payloads
    finally:
        final.close()


@pytest.mark.crash
@pytest.mark.timeout(360)
def test_redis_server_sigkilled_while_workers_run(
    tmp_path: Path, redis_server: RedisServer, servers: tuple[ForkServer, ForkServer]
) -> None:
    """Two worker processes run jobs while the redis-server is SIGKILLed and restarted on its AOF:
    every job completes, each call has its one effect, no stale lease writes after a newer one."""
    url = f"{redis_server.url}?prefix=w&durability=full"
    env = _env(tmp_path, url, TETHER_TEST_TTL="5.0", TETHER_TEST_SLOW="0.05")
    app = tether.App(url)
    app.task(name="job")(lambda ctx, n, steps=5: n)
    kills = scenarios(2)
    jobs = max(8, kills)  # five calls each: enough for three calls between kills
    for n in range(jobs):
        app.start("job", n, task_id=f"job-{n}")
    app.close()
    workers = [_worker(servers, n, env) for n in range(2)]
    try:
        for done in range(kills):
            _wait_for(lambda d=done: len(_query(tmp_path, "SELECT key FROM raw")) > 2 + d * 3, 90, "progress")
            redis_server.kill()
            time.sleep(random.uniform(0.0, 0.3))
            redis_server.start()
        after = tether.App(url)
        _wait_for_jobs(after, jobs, 120, "every job to complete after the kills")
    finally:
        _stop(workers)
    effects = _query(tmp_path, "SELECT key FROM effects")
    raw = _query(tmp_path, "SELECT key FROM raw")
    assert {k for (k,) in effects} == _call_keys(after, jobs) and len(effects) == jobs * 5  # none lost
    assert len(raw) - len(effects) <= kills, "a call ran again with no kill to explain it"
    for n in range(jobs):
        _fences_never_go_back(after, f"job-{n}")
    after.close()


@pytest.mark.crash
@pytest.mark.timeout(120)
def test_expiries_survive_sigkills_of_the_server(redis_server: RedisServer) -> None:
    """What ``?ttl=`` set is in the AOF: after each SIGKILL and restart, a finished task's keys still
    share one expiry, and a parent held for its unfinished fork still has none."""
    import redis

    url = f"{redis_server.url}?prefix=x&durability=full&ttl=3600"
    store = open_store(url)
    now = time.time()
    store.create_task(
        "t", TaskRow("done", "t", "job", "pending", None, None, now, now, 1), EventRow(1, "E", 1, now, "1")
    )
    store.append("t", "done", [EventRow(2, "E", 1, now, "2")], 1, index=tether.store.IndexUpdate("completed"))
    store.create_task(
        "t", TaskRow("kept", "t", "job", "pending", None, None, now, now, 1), EventRow(1, "E", 1, now, "1")
    )
    store.append("t", "kept", [EventRow(2, "E", 1, now, "2")], 1, index=tether.store.IndexUpdate("completed"))
    fork = TaskRow("fork", "t", "job", "pending", None, None, now, now, 1, parent_id="kept", parent_seq=2)
    store.create_task("t", fork, EventRow(3, "E", 1, now, "3"))
    store.close()

    def expiries() -> dict[str, set[int]]:
        client = redis.Redis(port=redis_server.port)
        try:
            found: dict[str, set[int]] = {}
            for key in client.scan_iter(match="x:*"):
                name = key.decode()
                if "{t:" in name:
                    found.setdefault(name.partition("{t:")[2].partition("}")[0], set()).add(client.pexpiretime(key))
            return found
        finally:
            client.close()

    before = expiries()
    assert len(before["done"]) == 1 and before["done"] != {-1} and before["kept"] == {-1} == before["fork"]
    for _ in range(scenarios(3)):
        redis_server.kill()
        redis_server.start()
        assert expiries() == before
