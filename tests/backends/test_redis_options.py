"""The Redis backend's URL options: durability checked against the server's own persistence settings,
the opt-in that accepts less, read-only opens, key prefixes, and several stores on one database."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

import tether
from tests._redis_server import RedisServer, problem
from tether.store import EventRow, TaskRow, open_store

PROBLEM = problem()


def _config(server: RedisServer, **settings: str) -> None:
    import redis

    client = redis.Redis(port=server.port)
    for name, value in settings.items():
        client.config_set(name, value)
    client.close()


def _task(task_id: str) -> tuple[TaskRow, EventRow]:
    now = time.time()
    return TaskRow(task_id, "t", "x", "pending", None, None, now, now, 1), EventRow(1, "E", 1, now, "{}")


def test_full_durability_is_refused_on_a_server_that_does_not_fsync_every_write(server: RedisServer) -> None:
    _config(server, appendfsync="everysec")
    try:
        with pytest.raises(tether.ConfigurationError, match=r"appendfsync always.*accept_durability=everysec"):
            open_store(f"{server.url}?durability=full")
        open_store(f"{server.url}?durability=full&accept_durability=everysec").close()  # said so: accepted
        open_store(f"{server.url}?durability=full&accept_durability=no").close()  # less than it has: accepted
        with pytest.raises(tether.ConfigurationError, match="persistence 'everysec'"):
            open_store(f"{server.url}?durability=full&accept_durability=always")
        store = open_store(server.url)  # normal durability asks nothing of the server
        assert store.persistence == "everysec"  # type: ignore[attr-defined]
        store.close()
    finally:
        _config(server, appendfsync="always")
    open_store(f"{server.url}?durability=full").close()


def test_a_server_without_an_aof_is_named_as_such(server: RedisServer) -> None:
    _config(server, appendonly="no")
    try:
        with pytest.raises(tether.ConfigurationError, match=r"appendonly yes.*'off'"):
            open_store(f"{server.url}?durability=full")
    finally:
        _config(server, appendonly="yes")


def test_a_server_that_refuses_config_needs_an_explicit_opt_in(tmp_path: Path) -> None:
    if PROBLEM:
        pytest.skip(PROBLEM)
    locked = RedisServer(tmp_path)
    locked.extra = ["--rename-command", "CONFIG", ""]
    locked.start()
    try:
        with pytest.raises(tether.ConfigurationError, match=r"refuses CONFIG GET.*accept_durability=unknown"):
            open_store(f"{locked.url}?durability=full")
        store = open_store(f"{locked.url}?durability=full&accept_durability=unknown")
        assert store.persistence == "unknown"  # type: ignore[attr-defined]
        store.close()
    finally:
        locked.kill()


@pytest.mark.parametrize(
    ("query", "match"),
    [
        ("durability=sometimes", "durability must be 'normal' or 'full'"),
        ("accept_durability=maybe", "accept_durability='maybe' is not one of"),
        ("prefix=a:b", "prefix='a:b' is not a valid key prefix"),
    ],
)
def test_bad_options_are_named(server: RedisServer, query: str, match: str) -> None:
    with pytest.raises(tether.ConfigurationError, match=match):
        open_store(f"{server.url}?{query}")


def test_an_unknown_keyword_option_is_refused(server: RedisServer) -> None:
    with pytest.raises(tether.ConfigurationError, match=r"unknown Redis option.*known: accept_durability"):
        open_store(server.url, pool=3)


def test_readonly_reads_and_refuses_every_write(server: RedisServer) -> None:
    writer = open_store(f"{server.url}?prefix=ro")
    writer.create_task("t", *_task("a"))
    reader = open_store(f"{server.url}?prefix=ro", readonly=True)
    try:
        assert reader.get_task("t", "a") is not None
        with pytest.raises(tether.ConfigurationError, match="read-only"):
            reader.create_task("t", *_task("b"))
        with pytest.raises(tether.ConfigurationError, match="read-only"):
            reader.ledger_begin("t", "k", time.time())
        assert reader.get_task("t", "b") is None
    finally:
        writer.delete_task("t", "a")
        writer.close()
        reader.close()


def test_stores_under_other_prefixes_share_nothing(server: RedisServer) -> None:
    one, two = open_store(f"{server.url}?prefix=one"), open_store(f"{server.url}?prefix=two")
    try:
        one.create_task("t", *_task("a"))
        assert two.get_task("t", "a") is None and two.claim("t", "w", 5.0, time.time() + 1) is None
        two.create_task("t", *_task("a"))  # the same id under the other prefix: no conflict
        assert one.claim("t", "w", 5.0, time.time() + 1) == ("a", 1)
    finally:
        one.delete_task("t", "a")
        two.delete_task("t", "a")
        one.close()
        two.close()


def test_ids_with_key_punctuation_stay_apart(server: RedisServer) -> None:
    """Tenants and task ids holding ':', '{', '}' or '%' cannot run into each other's keys."""
    store = open_store(f"{server.url}?prefix=esc")
    try:
        store.create_task("a:b", *_task("c"))
        store.create_task("a", *_task("b:c"))
        store.create_task("a", *_task("}{%3A"))
        assert store.get_task("a:b", "b:c") is None and store.get_task("a", "c") is None
        assert {r.task_id for r in store.list_tasks("a", tether.store.TaskFilter())} == {"b:c", "}{%3A"}
        assert [r.task_id for r in store.list_tasks("a:b", tether.store.TaskFilter())] == ["c"]
    finally:
        for tenant, task_id in (("a:b", "c"), ("a", "b:c"), ("a", "}{%3A")):
            store.delete_task(tenant, task_id)
        store.close()


def test_a_listing_read_page_by_page_gives_no_task_twice(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task created between two pages of a listing pushes the rest down a place: the one that
    moves across the page boundary is not given again."""
    import tether.store.redis as backend

    monkeypatch.setattr(backend, "_PAGE", 2)
    store = open_store(f"{server.url}?prefix=pages")
    try:
        for n in range(5):
            row, first = _task(f"t{n}")
            store.create_task("t", replace(row, created_at=float(n)), first)
        rows = store._rows("t", tether.store.TaskFilter())  # type: ignore[attr-defined]
        got = [next(rows).task_id, next(rows).task_id]
        row, first = _task("newest")
        store.create_task("t", replace(row, created_at=99.0), first)
        got += [r.task_id for r in rows]
        assert got == ["t4", "t3", "t2", "t1", "t0"]
    finally:
        for task_id in ("t0", "t1", "t2", "t3", "t4", "newest"):
            if store.get_task("t", task_id) is not None:
                store.delete_task("t", task_id)
        store.close()
