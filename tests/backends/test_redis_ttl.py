"""Retention on Redis (``?ttl=``): a finished stream goes away whole, ttl seconds after it finished —
every key of it and its entries in the tenant's indexes — and never while a fork still reads it.

Each test runs under a key prefix of its own on the session's own redis-server and checks, with
SCAN on that prefix, what is left. Waits for expiry poll with a bound, never a fixed sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import tether
from tests._redis_server import RedisServer
from tether.store import EventRow, IndexUpdate, TaskFilter, TaskRow, open_store

TENANT = "t"
_BOUND = 30.0  # seconds a wait for the server to expire a key may take at most


@pytest.fixture
def client(server: RedisServer) -> Iterator[Any]:
    import redis

    raw = redis.Redis(port=server.port)
    yield raw
    raw.close()


def _keys(client: Any, prefix: str) -> set[str]:
    return {k.decode() for k in client.scan_iter(match=f"{prefix}:*", count=1000)}


def _members(client: Any, prefix: str) -> set[str]:
    """Every member of every index (sorted set or set) under the prefix."""
    found: set[str] = set()
    for key in _keys(client, prefix):
        kind = client.type(key).decode()
        if kind == "zset":
            found |= {m.decode() for m in client.zrange(key, 0, -1)}
        elif kind == "set":
            found |= {m.decode() for m in client.smembers(key)}
    return found


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + _BOUND
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {_BOUND} s: {what}")
        time.sleep(0.05)


def _create(store: Any, task_id: str, *, parent: str | None = None, parent_seq: int | None = None) -> None:
    now = time.time()
    row = TaskRow(task_id, TENANT, "job", "pending", None, None, now, now, 1, parent_id=parent, parent_seq=parent_seq)
    first = (parent_seq or 0) + 1
    store.create_task(TENANT, row, EventRow(first, "TaskCreated", 1, now, '{"n": 1}'))


def _finish(store: Any, task_id: str, status: str = "completed") -> None:
    row = store.get_task(TENANT, task_id)
    event = EventRow(row.version + 1, "TaskCompleted", 1, time.time(), "{}")
    store.append(TENANT, task_id, [event], row.version, index=IndexUpdate(status))


def _open(server: RedisServer, prefix: str, query: str = "&ttl=1") -> Any:
    return open_store(f"{server.url}?prefix={prefix}{query}")


def _gone(store: Any, client: Any, prefix: str, task_id: str) -> Callable[[], bool]:
    def check() -> bool:
        store.list_tasks(TENANT, TaskFilter())  # a listing prunes the indexes first
        return not any(f"{TENANT}:{task_id}" in key for key in _keys(client, prefix)) and task_id not in _members(
            client, prefix
        )

    return check


def test_a_finished_task_goes_away_whole(server: RedisServer, client: Any) -> None:
    store = _open(server, "ttl-whole")
    try:
        _create(store, "done")
        store.put_snapshot(TENANT, "done", tether.store.SnapshotRow(1, 1, "c", "{}"))
        store.acquire_lease(TENANT, "done", "w", 60.0, time.time())  # held: in the tenant's held set
        _finish(store, "done")
        own = {k for k in _keys(client, "ttl-whole") if "{t:done}" in k}
        assert own == {f"ttl-whole:{{t:done}}:{part}" for part in "res"}
        assert all(0 < client.pttl(k) <= 1000 for k in own)  # set by the finishing append itself
        assert "done" in _members(client, "ttl-whole")

        _until(_gone(store, client, "ttl-whole", "done"), "the finished task's keys and index entries gone")
        assert store.get_task(TENANT, "done") is None
        assert store.list_tasks(TENANT, TaskFilter()) == []
        assert store.count_tasks(TENANT, TaskFilter(), cap=10) == 0
        assert _keys(client, "ttl-whole") == set()  # nothing of it left, not even an empty index
    finally:
        store.close()


def test_an_unfinished_task_never_expires(server: RedisServer, client: Any) -> None:
    store = _open(server, "ttl-open")
    try:
        _create(store, "open")
        row = store.get_task(TENANT, "open")
        store.append(
            TENANT, "open", [EventRow(2, "E", 1, time.time(), "{}")], row.version, index=IndexUpdate("running")
        )
        assert [client.pttl(k) for k in sorted(_keys(client, "ttl-open"))] == [-1] * len(_keys(client, "ttl-open"))
        assert store.get_task(TENANT, "open") is not None
    finally:
        store.delete_task(TENANT, "open")
        store.close()


def test_a_store_without_ttl_expires_nothing(server: RedisServer, client: Any) -> None:
    store = _open(server, "ttl-none", "")
    try:
        _create(store, "done")
        _finish(store, "done")
        assert {client.pttl(k) for k in _keys(client, "ttl-none")} == {-1}
    finally:
        store.delete_task(TENANT, "done")
        store.close()


def test_a_parent_outlives_its_ttl_while_a_fork_is_unfinished(server: RedisServer, client: Any) -> None:
    store = _open(server, "ttl-fork")
    try:
        _create(store, "parent")
        _finish(store, "parent")
        assert client.pttl("ttl-fork:{t:parent}:r") > 0
        _create(store, "fork", parent="parent", parent_seq=2)
        assert client.pttl("ttl-fork:{t:parent}:r") == -1  # persisted while the fork reads its prefix
        _create(store, "doomed")
        _finish(store, "doomed")
        _until(_gone(store, client, "ttl-fork", "doomed"), "a sibling finished at the same ttl expired")
        assert store.get_task(TENANT, "parent") is not None  # past its own ttl: kept for the fork
        assert [e.seq for e in store.read_events(TENANT, "fork")] == [1, 2, 3]

        before = time.time() * 1000
        _finish(store, "fork")
        # When each expires, as instants (two PTTLs, read one after the other, would differ by the time between)
        fork_at, parent_at = client.pexpiretime("ttl-fork:{t:fork}:r"), client.pexpiretime("ttl-fork:{t:parent}:r")
        assert before < fork_at <= parent_at <= time.time() * 1000 + 1000  # the parent's at least the fork's
        _until(_gone(store, client, "ttl-fork", "fork"), "the finished fork expired")
        _until(_gone(store, client, "ttl-fork", "parent"), "the parent expired after its fork")
        assert _keys(client, "ttl-fork") == set()
    finally:
        store.close()


def test_a_parent_whose_fork_has_no_expiry_is_kept(server: RedisServer, client: Any) -> None:
    """A fork finished by a store without ttl never expires: the parent it reads stays too."""
    store, plain = _open(server, "ttl-keep"), _open(server, "ttl-keep", "")
    try:
        _create(store, "parent")
        _finish(store, "parent")
        _create(store, "fork", parent="parent", parent_seq=2)
        _finish(plain, "fork")
        assert client.pttl("ttl-keep:{t:parent}:r") == -1
    finally:
        store.delete_task(TENANT, "fork")
        store.delete_task(TENANT, "parent")
        store.close()
        plain.close()


def test_a_task_made_again_under_an_expired_id_works(server: RedisServer, client: Any) -> None:
    store = _open(server, "ttl-again")
    try:
        _create(store, "same")
        _finish(store, "same")
        _until(lambda: client.exists("ttl-again:{t:same}:r") == 0, "the first task expired")
        _create(store, "same")  # before any listing pruned the old index entries
        assert {client.pttl(k) for k in _keys(client, "ttl-again") if "{t:same}" in k} == {-1}
        assert [r.task_id for r in store.list_tasks(TENANT, TaskFilter())] == ["same"]
        assert store.claim(TENANT, "w", 5.0, time.time() + 1) == ("same", 1)
        assert [e.seq for e in store.read_events(TENANT, "same")] == [1]
        _finish(store, "same")
        _until(_gone(store, client, "ttl-again", "same"), "the second task expired too")
    finally:
        store.close()


def test_sessions_open_or_closed_never_expire(server: RedisServer, client: Any) -> None:
    """A task that has not finished may still read its conversation (a resumed run reads the messages
    its record names), and nothing holds a session for its tasks: under ``ttl`` no session expires,
    so a task waiting on a closed conversation resumes with it whole."""
    app = tether.App(f"{server.url}?prefix=ttl-sess&ttl=1")
    try:

        @app.task
        def chat(ctx: tether.TaskContext) -> str:
            ctx.session.add("user", "hello")
            day = ctx.wait_for_input("day")  # resumed, the run replays the add: it reads the session again
            return str(day)

        @app.task
        def quick(ctx: tether.TaskContext) -> str:
            return "done"

        app.run(chat, task_id="t1", session_id="conv")
        app.session("kept").add("user", "hi")
        app.session("conv").close()
        app.run(quick, task_id="finished")  # a task that finishes meanwhile does expire
        _until(lambda: not any("finished" in k for k in _keys(client, "ttl-sess")), "the finished task expired")
        assert {client.pttl(k) for k in _keys(client, "ttl-sess") if "kept" in k or "conv" in k} == {-1}
        app.send_input("t1", "day", "Friday")
        assert app.resume("t1").output == "Friday"
        assert [m.content for m in app.session("conv").messages()] == ["hello"]
    finally:
        app.close()
        for key in _keys(client, "ttl-sess"):
            client.delete(key)


@pytest.mark.parametrize(
    "query", ["ttl=soon", "ttl=0", "ttl=-5", "ttl=inf"], ids=["text", "zero", "negative", "infinite"]
)
def test_a_bad_ttl_is_named(server: RedisServer, query: str) -> None:
    with pytest.raises(
        tether.ConfigurationError, match=r"Redis option ttl=.* is not a number of seconds above 0; expected .* ttl=3600"
    ):
        open_store(f"{server.url}?{query}")


def test_ttl_as_a_keyword(server: RedisServer) -> None:
    store = open_store(server.url, ttl=2.5)
    assert store.ttl == 2.5  # type: ignore[attr-defined]
    store.close()
    with pytest.raises(tether.ConfigurationError, match="Redis option ttl="):
        open_store(server.url, ttl="never")


def test_a_read_that_meets_the_expiry_midway_finds_no_task(
    server: RedisServer, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream expires after its row was read and before its events are: the read names the task
    as gone instead of returning part of it."""
    store = _open(server, "ttl-mid")
    try:
        _create(store, "done")
        _finish(store, "done")
        pipeline = store._client.pipeline  # the events are read in a transaction, after the row

        def expire_first(*args: Any, **kwargs: Any) -> Any:
            client.pexpire("ttl-mid:{t:done}:r", 1)
            client.pexpire("ttl-mid:{t:done}:e", 1)
            _until(lambda: client.exists("ttl-mid:{t:done}:r", "ttl-mid:{t:done}:e") == 0, "the stream expired")
            return pipeline(*args, **kwargs)

        monkeypatch.setattr(store._client, "pipeline", expire_first)
        with pytest.raises(tether.TaskNotFoundError):
            store.read_events(TENANT, "done")
    finally:
        store.close()


def test_tasks_run_by_an_app_expire_after_their_forks_and_rewinds(server: RedisServer, client: Any) -> None:
    """Through the engine: a run task, a fork of it, and a rewound task with its archived branch."""
    app = tether.App(f"{server.url}?prefix=ttl-app&ttl=1")

    @app.tool
    def double(n: int) -> int:
        return 2 * n

    @app.task
    def job(ctx: tether.TaskContext, n: int) -> int:
        return ctx.call(double, n)

    def left() -> set[str]:
        app.list_tasks()  # prunes
        return _keys(client, "ttl-app")

    try:
        assert app.run(job, 2, task_id="forked").output == 4
        assert app.run(job, 3, task_id="rewound").output == 6
        app.fork("forked", at=1, new_id="fork")
        app.rewind("rewound", to=1)
        row = f"ttl-app:{{{app.tenant}:%s}}:r"
        assert client.pttl(row % "forked") == -1  # its fork is pending
        assert client.pttl(row % "rewound~1") == -1  # the archived branch: the new run reads it
        assert app.resume("fork").output == 4
        assert app.resume("rewound").output == 6
        _until(lambda: left() == set(), "every task, fork and archived branch gone, indexes too")
        assert app.list_tasks() == []
        with pytest.raises(tether.TaskNotFoundError):
            app.get("forked")
    finally:
        app.close()
        for key in _keys(client, "ttl-app"):
            client.delete(key)
