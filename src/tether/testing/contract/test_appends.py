"""Appends and versions: a stream's events are written only at the version expected, whole or not at
all, across several streams too, and the task's row moves with them."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from tether.errors import ConflictError, InvalidInputError, TaskNotFoundError
from tether.store import EventRow, IndexUpdate, Store, StreamAppend, TaskFilter, TaskHead, TaskRow
from tether.store.base import COMPLETES
from tether.testing.contract._records import (
    TENANT,
    _create,
    _event,
    _expect,
    _expect_conflict_on,
    _row,
    _seqs,
    _versions,
)


def test_create_then_read_back(store: Store) -> None:
    _create(store, "a", events=3)
    row = store.get_task(TENANT, "a")
    assert row is not None and row.version == 3 and row.type == "t" and row.user_id == "u1"
    assert _seqs(store, "a") == [1, 2, 3]
    first = store.read_events(TENANT, "a")[0].data
    assert first in ('{"n": 1}', '{"n":1}', b'{"n": 1}', b'{"n":1}')
    assert store.get_task(TENANT, "missing") is None


def test_the_row_moves_with_every_append(store: Store) -> None:
    """Its version and last change are its newest event's, and each committing event it stores
    counts one committed call; a head is written whole, after the events, status left alone."""
    head = TaskHead(calls_done=0, summary='{"plan": null}', output=None)
    store.create_task(TENANT, replace(_row("a"), calls_done=0, summary=head.summary), _event(1))
    done = EventRow(2, COMPLETES, 1, time.time() + 1, '{"n": 1}')
    store.append(TENANT, "a", [done], 1)
    row = store.get_task(TENANT, "a")
    assert row is not None and (row.version, row.updated_at, row.calls_done) == (2, done.at, 1)
    assert row.head == replace(head, calls_done=1)
    batch = [EventRow(3, COMPLETES, 1, done.at + 1, '{"n": 2}'), EventRow(4, "DecisionMade", 1, done.at + 2, "{}")]
    store.append(TENANT, "a", batch, 2, index=IndexUpdate(status="running"))
    row = store.get_task(TENANT, "a")
    assert row is not None and (row.version, row.updated_at, row.calls_done, row.status) == (
        4,
        done.at + 2,
        2,
        "running",
    )
    written = TaskHead(calls_done=7, summary='{"plan": [2, 1]}', output='{"answer": 42}')
    store.append(
        TENANT,
        "a",
        [EventRow(5, COMPLETES, 1, done.at + 3, "{}")],
        4,
        index=IndexUpdate(None, head=written, moves=False),
    )
    row = store.get_task(TENANT, "a")
    assert row is not None and row.head == written and (row.version, row.status) == (5, "running")
    assert [r.head for r in store.list_tasks(TENANT, TaskFilter())] == [written]


def test_the_row_reads_right_at_any_length(store: Store) -> None:
    """However a backend keeps the row between appends (SQL ones bring it up to date every few
    dozen events), a read of it gives the newest event's version and time and every committing
    event counted: checked after each append of a 300-event stream written one by one and in
    batches that cross any boundary, with a head written part way (which resets the count)."""
    store.create_task(TENANT, replace(_row("a"), calls_done=0, summary='{"plan": null}'), _event(1))
    version, done, at = 1, 0, time.time()
    step = 0
    while version < 300:
        step += 1
        size = 1 if step % 3 else 5  # a batch of five every third append
        batch = []
        for seq in range(version + 1, version + size + 1):
            kind = COMPLETES if seq % 4 != 1 else "DecisionMade"  # multiples of 64 commit a call
            done += kind == COMPLETES
            batch.append(EventRow(seq, kind, 1, at + seq, "{}"))
        index = None
        if step == 40:
            done = 1000  # a head the log wrote: the count goes on from it
            index = IndexUpdate(None, head=TaskHead(done, '{"plan": null}', None), moves=False)
        store.append(TENANT, "a", batch, version, index=index)
        version += size
        row = store.get_task(TENANT, "a")
        assert row is not None and (row.version, row.updated_at, row.calls_done) == (version, at + version, done), (
            f"after {version} events the row reads {(row.version, row.updated_at, row.calls_done) if row else None}, "
            f"expected {(version, at + version, done)}"
        )
    [listed] = store.list_tasks(TENANT, TaskFilter())
    assert (listed.version, listed.updated_at, listed.calls_done) == (version, at + version, done)


def test_create_twice_is_a_conflict(store: Store) -> None:
    _create(store, "a")
    _expect(ConflictError, lambda: store.create_task(TENANT, _row("a"), _event(1)))
    assert _seqs(store, "a") == [1]


def test_append_at_a_stale_version_writes_nothing(store: Store) -> None:
    _create(store, "a", events=2)
    for stale in (0, 1, 3, 9):  # behind and ahead
        _expect(ConflictError, partial(store.append, TENANT, "a", [_event(stale + 1)], stale))
    assert _seqs(store, "a") == [1, 2] and store.get_task(TENANT, "a").version == 2  # type: ignore[union-attr]


def test_append_with_a_gap_writes_nothing(store: Store) -> None:
    _create(store, "a")
    _expect((ConflictError, InvalidInputError), lambda: store.append(TENANT, "a", [_event(3)], 1))
    _expect((ConflictError, InvalidInputError), lambda: store.append(TENANT, "a", [_event(2), _event(4)], 1))
    assert _seqs(store, "a") == [1]


def test_append_to_a_missing_stream_is_not_found(store: Store) -> None:
    _expect(TaskNotFoundError, lambda: store.append(TENANT, "missing", [_event(2)], 1))


def test_reads_are_ranged(store: Store) -> None:
    _create(store, "a", events=6)
    assert _seqs(store, "a", after=2) == [3, 4, 5, 6]
    assert _seqs(store, "a", after=2, upto=4) == [3, 4]
    assert _seqs(store, "a", upto=1) == [1]
    assert _seqs(store, "a", after=6) == []


def test_a_fork_reads_its_parents_events_by_reference(store: Store) -> None:
    _create(store, "p", events=5)
    now = time.time()
    fork = TaskRow("f", TENANT, "t", "pending", None, None, now, now, 4, parent_id="p", parent_seq=3)
    store.create_task(TENANT, fork, _event(4, '{"fork": true}'))
    store.append(TENANT, "f", [_event(5)], 4)
    assert _seqs(store, "f") == [1, 2, 3, 4, 5]
    assert _seqs(store, "f", after=2, upto=4) == [3, 4]
    assert _seqs(store, "p") == [1, 2, 3, 4, 5]  # the parent is untouched
    _expect(ConflictError, lambda: store.delete_task(TENANT, "p"))  # a parent with forks stays


def test_delete_removes_a_stream(store: Store) -> None:
    _create(store, "a", events=3)
    assert store.delete_task(TENANT, "a") == 3
    assert store.get_task(TENANT, "a") is None


def test_append_streams_writes_every_stream(store: Store) -> None:
    _create(store, "a")
    _create(store, "b", events=2)
    store.append_streams(
        TENANT,
        [
            StreamAppend("a", [_event(2), _event(3)], 1, index=IndexUpdate(status="running")),
            StreamAppend("b", [_event(3)], 2),
        ],
    )
    assert _seqs(store, "a") == [1, 2, 3] and _seqs(store, "b") == [1, 2, 3]
    assert _versions(store, "a", "b") == [3, 3]
    a, b = store.get_task(TENANT, "a"), store.get_task(TENANT, "b")
    assert a is not None and a.status == "running" and b is not None and b.status == "pending"
    store.append(TENANT, "a", [_event(4)], 3)  # a single append follows on from it


def test_append_streams_at_a_stale_version_on_one_stream_writes_nothing(store: Store) -> None:
    _create(store, "a")
    _create(store, "b", events=2)
    for stale in (1, 3):  # b behind and ahead; a is right both times
        parts = [StreamAppend("a", [_event(2)], 1), StreamAppend("b", [_event(stale + 1)], stale)]
        _expect_conflict_on("b", partial(store.append_streams, TENANT, parts))
        assert _seqs(store, "a") == [1] and _seqs(store, "b") == [1, 2]
    parts = [StreamAppend("b", [_event(3)], 2), StreamAppend("a", [_event(3)], 2)]  # the stale one last
    _expect_conflict_on("a", partial(store.append_streams, TENANT, parts))
    assert _seqs(store, "a") == [1] and _seqs(store, "b") == [1, 2]
    assert _versions(store, "a", "b") == [1, 2]


def test_append_streams_with_a_gap_or_a_missing_stream_writes_nothing(store: Store) -> None:
    _create(store, "a")
    _create(store, "b")
    gap = [StreamAppend("a", [_event(2)], 1), StreamAppend("b", [_event(2), _event(4)], 1)]
    _expect((ConflictError, InvalidInputError), partial(store.append_streams, TENANT, gap))
    missing = [StreamAppend("a", [_event(2)], 1), StreamAppend("missing", [_event(2)], 1)]
    _expect(TaskNotFoundError, partial(store.append_streams, TENANT, missing))
    twice = [StreamAppend("a", [_event(2)], 1), StreamAppend("a", [_event(3)], 2)]
    _expect(InvalidInputError, partial(store.append_streams, TENANT, twice))
    _expect(InvalidInputError, partial(store.append_streams, TENANT, []))
    assert _seqs(store, "a") == [1] and _seqs(store, "b") == [1]
