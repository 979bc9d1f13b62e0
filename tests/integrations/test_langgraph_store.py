"""``TetherStore`` beside LangGraph's ``InMemoryStore``: the same random operations (puts, deletes,
gets, searches with filters, queries and paging, namespace listings, batches, sync and async), with
the writes spread over two stores on one database, answer the same on memory, SQLite and PostgreSQL;
and what ``InMemoryStore`` cannot show: items kept across stores opened later, times, TTL."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

import tether
from tests.conftest import sql_url
from tether.integrations.langgraph import TetherStore

WORDS = ["apple", "berry", "cherry", "date", "elder", "fig", "grape", "honey"]
NAMESPACES = [("a",), ("a", "x"), ("a", "y"), ("a", "x", "deep"), ("b",), ("b", "x"), ("c", "y")]


def embed(texts: list[str]) -> list[list[float]]:
    """A bag of words over WORDS: texts sharing words are near."""
    return [[float(text.split().count(w)) + 0.01 * i for i, w in enumerate(WORDS)] for text in texts]


INDEX: Any = {"dims": len(WORDS), "embed": embed, "fields": ["text"]}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tether.App]:
    urls = iter(["memory://"]) if request.param == "memory" else sql_url(request.param, tmp_path, "lgstore")
    app = tether.App(next(urls))
    yield app
    app.close()
    for _ in urls:  # drops the PostgreSQL schema
        pass


def value(rng: random.Random) -> dict[str, Any]:
    return {
        "text": " ".join(rng.choices(WORDS, k=rng.randint(1, 3))),
        "n": rng.randint(0, 9),
        "tag": rng.choice(["red", "blue", None]),
        "nested": {"k": rng.choice(["p", "q"])},
    }


def random_op(rng: random.Random) -> Any:
    ns, key = rng.choice(NAMESPACES), rng.choice("klmn")
    roll = rng.random()
    if roll < 0.4:
        return PutOp(ns, key, value(rng))
    if roll < 0.5:
        return PutOp(ns, key, None)
    if roll < 0.6:
        return GetOp(ns, key)
    if roll < 0.85:
        prefix = rng.choice([(), ("a",), ("a", "x"), ("b",), ("c",)])
        filters = [None, {"tag": "red"}, {"n": {"$gte": 5}}, {"nested": {"k": "p"}}, {"n": {"$ne": 3}, "tag": "blue"}]
        query = rng.choice([None, None, rng.choice(WORDS), " ".join(rng.choices(WORDS, k=2))])
        return SearchOp(prefix, rng.choice(filters), rng.choice([1, 3, 10]), rng.choice([0, 0, 1, 4]), query)
    conditions = rng.choice([(), (MatchCondition("prefix", ("a",)),), (MatchCondition("suffix", ("x",)),),
                             (MatchCondition("prefix", ("a", "*")),)])  # fmt: skip
    return ListNamespacesOp(conditions, rng.choice([None, 1, 2]), rng.choice([2, 100]), rng.choice([0, 1]))


def seen(result: Any) -> Any:
    """What a user reads of a result (InMemoryStore stamps a new created_at on every put)."""
    if isinstance(result, list):
        return [seen(r) for r in result]
    if hasattr(result, "key"):
        score = getattr(result, "score", None)
        return (result.namespace, result.key, result.value, None if score is None else round(score, 9))
    return result


def reference(peer: InMemoryStore, op: Any) -> Any:
    """InMemoryStore's answer, in TetherStore's order: namespaces sorted (InMemoryStore orders them by
    first use), items of one namespace in put order in both; only namespaces that hold items listed."""
    for ns in [ns for ns, items in peer._data.items() if not items]:
        del peer._data[ns]
    if isinstance(op, SearchOp):
        everything = peer.batch([op._replace(limit=10**6, offset=0)])[0]
        rank = {ns: i for i, ns in enumerate(sorted(peer._data))}
        everything.sort(key=lambda item: rank[item.namespace])
        if op.query:
            everything.sort(key=lambda item: -item.score)
        return seen(everything[op.offset : op.offset + op.limit])
    result = peer.batch([op])[0]
    for ns in [ns for ns, items in peer._data.items() if not items]:  # a get made it
        del peer._data[ns]
    return seen(result)


def test_random_operations_answer_as_in_memory_store_sync_and_async(app: tether.App) -> None:
    rng = random.Random(20261202)
    stores = [TetherStore(app, index=INDEX), TetherStore(app, index=INDEX)]  # two writers on one database
    peer = InMemoryStore(index=INDEX)

    async def drive() -> None:
        for step in range(160):
            ops = [random_op(rng) for _ in range(rng.choice([1, 1, 1, 3]))]
            store = rng.choice(stores)
            if len(ops) > 1:  # a batch: its reads see the store before its writes, in both
                got = await store.abatch(ops) if rng.random() < 0.5 else store.batch(ops)
                expected = [None if isinstance(op, PutOp) else reference(peer, op) for op in ops]
                for op in ops:
                    if isinstance(op, PutOp):
                        peer.batch([op])
                assert [None if isinstance(op, PutOp) else seen(r) for op, r in zip(ops, got, strict=True)] == expected
                continue
            op = ops[0]
            expected = reference(peer, op)
            got = (await store.abatch([op]) if rng.random() < 0.5 else store.batch([op]))[0]
            assert seen(got) == expected, (step, op)

    asyncio.run(drive())
    fresh = TetherStore(app, index=INDEX)  # a store opened now reads it all back from the database
    for ns in NAMESPACES:
        for key in "klmn":
            assert seen(fresh.get(ns, key)) == reference(peer, GetOp(ns, key))
    assert fresh.list_namespaces() == reference(peer, ListNamespacesOp((), None, 100, 0))


def test_times_index_false_and_namespaces(app: tether.App) -> None:
    store = TetherStore(app, index=INDEX)
    store.put(("docs",), "d1", {"text": "apple"})
    first = store.get(("docs",), "d1")
    store.put(("docs",), "d1", {"text": "berry"})
    second = TetherStore(app, index=INDEX).get(("docs",), "d1")
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    store.put(("docs",), "plain", {"text": "apple"}, index=False)  # kept, found, never ranked
    found = store.search(("docs",), query="apple")
    assert [(i.key, i.score is None) for i in found] == [("d1", False), ("plain", True)]
    store.delete(("docs",), "d1")
    assert store.get(("docs",), "d1") is None and store.get(("none",), "x") is None
    assert store.list_namespaces() == [("docs",)]  # a namespace read but never written is none
    with pytest.raises(InvalidNamespaceError):
        store.put(("bad.label",), "k", {})
    with pytest.raises(tether.InvalidInputError, match="must be JSON"):
        store.put(("docs",), "k", {"when": object()})
    with pytest.raises(tether.ConfigurationError, match="TetherStore takes a store URL"):
        TetherStore(3.5)
    with pytest.raises(tether.InvalidInputError, match="embed"):
        TetherStore(app, index={"dims": 3})


def test_ttl_expires_refreshes_and_sweeps(app: tether.App, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    store = TetherStore(app, ttl={"default_ttl": 1.0})  # minutes
    store.put(("s",), "kept", {"v": 1})
    store.put(("s",), "forever", {"v": 2}, ttl=None)
    now[0] += 50
    assert store.get(("s",), "kept") is not None  # read at 50 s: its minute starts again
    now[0] += 50
    assert {i.key for i in TetherStore(app).search(("s",))} == {"kept", "forever"}  # refreshed at 50 s
    now[0] += 61
    assert store.get(("s",), "kept") is None and store.get(("s",), "forever") is not None
    assert store.list_namespaces() == [("s",)]
    assert store.sweep_ttl() == 1
    assert TetherStore(app).get(("s",), "kept") is None


@pytest.mark.parametrize("module", ["_langgraph_store", "_langgraph_tools"])
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"tether.integrations.{module}"))
    assert result.attempted > 0 and result.failed == 0, result
