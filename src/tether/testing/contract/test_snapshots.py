"""Snapshots and compaction: a snapshot found at most a seq and replaced, the newest one read with the
events after it, and a stream's history replaced whole."""

from __future__ import annotations

import time

from tether.errors import ConflictError, TaskNotFoundError
from tether.store import SnapshotRow, Store, TaskRow
from tether.testing.contract._records import TENANT, _create, _event, _expect, _seqs, _versions


def test_compact_replaces_a_streams_history(store: Store) -> None:
    _create(store, "a", events=5)
    store.put_snapshot(TENANT, "a", SnapshotRow(3, 1, "s3", '{"at": 3}'))
    assert store.compact(TENANT, "a", 5, [_event(6, '{"whole": 1}'), _event(7)]) == 5
    assert _seqs(store, "a") == [6, 7] and _versions(store, "a") == [7]  # versions only grow
    assert store.read_events(TENANT, "a")[0].data in ('{"whole": 1}', '{"whole":1}', b'{"whole": 1}', b'{"whole":1}')
    assert store.get_snapshot(TENANT, "a", at_most=100) is None  # the old snapshots went with the events
    snapshot, events = store.read_latest(TENANT, "a")
    assert snapshot is None and [e.seq for e in events] == [6, 7]
    store.append(TENANT, "a", [_event(8)], 7)  # appends follow on from the new history
    _expect(ConflictError, lambda: store.append(TENANT, "a", [_event(8)], 7))
    assert _seqs(store, "a", after=6) == [7, 8]


def test_compact_at_a_stale_version_or_under_forks_writes_nothing(store: Store) -> None:
    _create(store, "a", events=3)
    for stale in (2, 4):
        _expect(ConflictError, lambda stale=stale: store.compact(TENANT, "a", stale, [_event(stale + 1)]))  # type: ignore[misc]
    _expect(TaskNotFoundError, lambda: store.compact(TENANT, "missing", 1, [_event(2)]))
    now = time.time()
    fork = TaskRow("f", TENANT, "t", "pending", None, None, now, now, 3, parent_id="a", parent_seq=2)
    store.create_task(TENANT, fork, _event(3, '{"fork": true}'))
    _expect(ConflictError, lambda: store.compact(TENANT, "a", 3, [_event(4)]))  # the fork reads a's events
    assert _seqs(store, "a") == [1, 2, 3] and _seqs(store, "f") == [1, 2, 3]
    assert store.compact(TENANT, "f", 3, [_event(4, '{"whole": 1}')]) == 1  # a fork compacted stands alone
    assert _seqs(store, "f") == [4]
    assert store.compact(TENANT, "a", 3, [_event(4)]) == 3  # no fork points at it now


def test_snapshots_are_found_at_most_a_seq_and_replaced(store: Store) -> None:
    _create(store, "a", events=9)
    for seq in (3, 6):
        store.put_snapshot(TENANT, "a", SnapshotRow(seq, 1, f"sum{seq}", f'{{"at": {seq}}}'))
    got = store.get_snapshot(TENANT, "a", at_most=5)
    assert got is not None and got.seq == 3 and got.checksum == "sum3"
    assert store.get_snapshot(TENANT, "a", at_most=2) is None
    store.put_snapshot(TENANT, "a", SnapshotRow(9, 1, "sum9", '{"at": 9}'), replaces=6)
    assert store.get_snapshot(TENANT, "a", at_most=8).seq == 3  # type: ignore[union-attr]
    assert store.get_snapshot(TENANT, "a", at_most=100).seq == 9  # type: ignore[union-attr]


def test_read_latest_is_the_newest_snapshot_and_the_events_after_it(store: Store) -> None:
    _create(store, "a", events=7)
    snapshot, events = store.read_latest(TENANT, "a")
    assert snapshot is None and [e.seq for e in events] == [1, 2, 3, 4, 5, 6, 7]
    store.put_snapshot(TENANT, "a", SnapshotRow(3, 1, "s3", '{"at": 3}'))
    store.put_snapshot(TENANT, "a", SnapshotRow(5, 1, "s5", '{"at": 5}'))
    snapshot, events = store.read_latest(TENANT, "a")
    assert snapshot is not None and snapshot.seq == 5 and [e.seq for e in events] == [6, 7]
    _expect(TaskNotFoundError, lambda: store.read_latest(TENANT, "missing"))
