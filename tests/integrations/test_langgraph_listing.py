"""Listing checkpoints across every thread (``list(None)``): newest first, reading only the threads
the checkpoints handed out come from, and the same answer as folding them all."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.base import empty_checkpoint

from tether import TaskLog
from tether.integrations._langgraph_log import THREAD_TYPE, CheckpointSaved, stream_id
from tether.integrations.langgraph import TetherSaver
from tether.log.streams import Stream

THREADS = [f"t{i}" for i in range(6)]


def put(saver: TetherSaver, thread: str, parent: str | None, k: int, ns: str = "") -> str:
    cp = empty_checkpoint()
    cp["channel_values"] = {"n": k}
    cp["channel_versions"] = {"n": k + 1}
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if parent:
        conf["checkpoint_id"] = parent
    metadata = {"source": "input" if k % 2 == 0 else "loop", "step": k, "owner": thread}
    stored = saver.put({"configurable": conf}, cp, metadata, {"n": k + 1})  # type: ignore[arg-type]
    return str(stored["configurable"]["checkpoint_id"])


def populate(saver: TetherSaver, rounds: int = 3) -> None:
    """Every thread gets a checkpoint per round, round after round: the newest ids are spread over threads."""
    parents: dict[str, str | None] = dict.fromkeys(THREADS)
    for k in range(rounds):
        for thread in THREADS:
            parents[thread] = put(saver, thread, parents[thread], k)


def reading(saver: TetherSaver) -> Counter[str]:
    """Which streams the saver reads events of from now on, and how often."""
    reads: Counter[str] = Counter()
    store = saver.log.store
    original = store.read_events

    def read_events(tenant: str, task_id: str, **kw: Any) -> Any:
        reads[task_id] += 1
        return original(tenant, task_id, **kw)

    latest = store.read_latest

    def read_latest(tenant: str, task_id: str) -> Any:  # a thread's first read: its snapshot and what follows
        reads[task_id] += 1
        return latest(tenant, task_id)

    store.read_events = read_events  # type: ignore[method-assign]
    store.read_latest = read_latest  # type: ignore[method-assign]
    return reads


def keys(tuples: Any) -> list[tuple[str, str, str]]:
    return [
        (t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"])
        for t in tuples
    ]


def everything(saver: TetherSaver, filter: dict[str, Any] | None, before: str | None, limit: int | None) -> Any:
    """The listing as folding every thread gives it: each thread's own list, merged newest first."""
    found = [t for thread in (*THREADS, "old", "headless") for t in saver.list({"configurable": {"thread_id": thread}})]
    found.sort(key=lambda t: t.checkpoint["id"], reverse=True)
    if filter:
        found = [t for t in found if all(t.metadata.get(k) == v for k, v in filter.items())]
    if before:
        found = [t for t in found if t.checkpoint["id"] < before]
    return keys(found[:limit] if limit is not None else found)


def test_a_listing_across_threads_reads_only_the_threads_it_hands_out_from(store_url: str) -> None:
    log = TaskLog(store_url)
    populate(TetherSaver(log))
    fresh = TetherSaver(TaskLog(log.store))  # nothing cached: every thread it folds is read
    reads = reading(fresh)
    newest = keys(fresh.list(None, limit=1))
    assert [(thread, ns) for thread, ns, _ in newest] == [("t5", "")]
    assert set(reads) == {stream_id("t5")}

    # The four newest are each the last round's of a thread: those four threads are read, not the others.
    four = keys(fresh.list(None, limit=4))
    assert [thread for thread, _, _ in four] == ["t5", "t4", "t3", "t2"]
    assert set(reads) == {stream_id(t) for t in ("t5", "t4", "t3", "t2")}

    # Async the same, on another fresh saver.
    other = TetherSaver(TaskLog(log.store))
    other_reads = reading(other)

    async def first_two() -> list[Any]:
        return [t async for t in other.alist(None, limit=2)]

    assert keys(asyncio.run(first_two())) == four[:2]
    assert set(other_reads) == {stream_id("t5"), stream_id("t4")}


def test_a_listing_across_threads_equals_folding_them_all(store_url: str) -> None:
    log = TaskLog(store_url)
    saver = TetherSaver(log)
    populate(saver)
    put(saver, "t1", None, 7, ns="sub:1")  # a subgraph's namespace: listed with the rest
    # A thread another writer (an older tether) appended to without keeping the row's head, with the
    # newest checkpoint of all; and one whose row never had a head: both are read before anything.
    put(saver, "old", None, 0)
    stale = empty_checkpoint()
    body = {k: v for k, v in stale.items() if k not in ("id", "channel_values", "channel_versions")}
    newest = CheckpointSaved(ns="", id=stale["id"], parent=None, versions={}, checkpoint=body, metadata={"step": 9})
    Stream(log, stream_id("old"), THREAD_TYPE).append([newest], 1)
    Stream(log, stream_id("headless"), THREAD_TYPE).create(
        CheckpointSaved(ns="", id="0", parent=None, versions={}, checkpoint=body, metadata={"step": 0})
    )
    ids = [t.checkpoint["id"] for t in saver.list(None)]
    middle = ids[len(ids) // 2]
    for filter in (None, {"source": "input"}, {"owner": "t0"}, {"step": 9}, {"owner": "nobody"}):
        for before in (None, middle, ids[0]):
            for limit in (None, 1, 3, 10, 0):
                fresh = TetherSaver(TaskLog(log.store))
                got = keys(
                    fresh.list(
                        None,
                        filter=filter,
                        before={"configurable": {"checkpoint_id": before}} if before else None,
                        limit=limit,
                    )
                )
                assert got == everything(saver, filter, before, limit), (filter, before, limit)
    # The rows that say nothing are read first, and then nothing more: the stale one holds the newest.
    fresh = TetherSaver(TaskLog(log.store))
    reads = reading(fresh)
    assert keys(fresh.list(None, limit=1)) == [("old", "", stale["id"])]
    assert set(reads) == {stream_id("old"), stream_id("headless")}


def test_the_head_follows_deletions_copies_and_prunes(store_url: str) -> None:
    log = TaskLog(store_url)
    saver = TetherSaver(log)
    populate(saver)
    t0_newest = keys(saver.list({"configurable": {"thread_id": "t0"}}, limit=1))[0][2]
    # t0 gets the newest checkpoint of all, then loses it (delete_for_runs): t5's is the newest again,
    # and its row says so, so reading it reads t5 alone.
    doomed = empty_checkpoint()
    config = {"configurable": {"thread_id": "t0", "checkpoint_ns": "", "checkpoint_id": t0_newest}}
    saver.put(config, doomed, {"run_id": "doomed", "step": 3}, {})  # type: ignore[arg-type, typeddict-unknown-key]
    assert keys(TetherSaver(TaskLog(log.store)).list(None, limit=1)) == [("t0", "", doomed["id"])]
    saver.delete_for_runs(["doomed"])
    fresh = TetherSaver(TaskLog(log.store))
    reads = reading(fresh)
    assert [k[0] for k in keys(fresh.list(None, limit=1))] == ["t5"]
    assert set(reads) == {stream_id("t5")}
    # A copy holds its source's checkpoints: listed, in order, beside the source's.
    saver.copy_thread("t5", "copy")
    fresh = TetherSaver(TaskLog(log.store))
    assert Counter(k[0] for k in keys(fresh.list(None, limit=2))) == {"t5": 1, "copy": 1}
    # A pruned thread's row says nothing of it until its next write: still listed first.
    newest = put(saver, "t3", None, 5)
    saver.prune(["t3"])
    assert keys(TetherSaver(TaskLog(log.store)).list(None, limit=1)) == [("t3", "", newest)]


def test_a_listing_is_of_the_moment_it_began(store_url: str) -> None:
    """A checkpoint written while a listing across threads is read (between two of its batches) is not
    handed out: it could come from a thread not read yet, and be newer than those already handed out."""
    saver = TetherSaver(store_url)
    older = put(saver, "older", None, 0)
    parent = None
    for k in range(70):  # the newest 70: more than one batch
        parent = put(saver, "newer", parent, k)
    listing = saver.list(None)
    first = [next(listing) for _ in range(64)]
    late = put(saver, "older", older, 1)  # the newest of all, in the thread the listing has not read
    ids = [t.checkpoint["id"] for t in [*first, *listing]]
    assert ids == sorted(ids, reverse=True) and len(ids) == 71
    assert late not in ids
    assert keys(saver.list(None, limit=1)) == [("older", "", late)]  # the next listing has it


def test_an_app_asked_for_a_thread_as_a_task_says_it_is_not_one(store_url: str) -> None:
    """A thread's index row keeps its newest checkpoint's id where a task's keeps its head: an App
    that reads it as a task (``app.get``) says the stream is no task, never a KeyError."""
    import tether

    saver = TetherSaver(store_url)
    populate(saver, rounds=1)
    app = tether.App(saver.log.store)
    with pytest.raises(tether.TetherError, match="TaskCreated"):
        app.get(stream_id("t0"))
