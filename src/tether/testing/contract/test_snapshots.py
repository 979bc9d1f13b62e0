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


def test_a_snapshot_comes_back_as_text_or_bytes_as_it_was_stored(store: Store) -> None:
    _create(store, "a", events=4)
    # Every byte value, NUL and separators among them, none of it UTF-8 as a whole; and bytes that
    # happen to be UTF-8 text are bytes still.
    binary = bytes(range(256)) * 3 + b"\x1f\x1e"
    store.put_snapshot(TENANT, "a", SnapshotRow(1, 3, "b1", binary))
    store.put_snapshot(TENANT, "a", SnapshotRow(2, 3, "b2", b'{"as": "utf-8"}'))
    store.put_snapshot(TENANT, "a", SnapshotRow(3, 1, "t3", '{"at": 3, "text": "\x1e\x1f\u00e9"}'))
    got = [store.get_snapshot(TENANT, "a", at_most=seq) for seq in (1, 2, 3)]
    assert [(s.seq, s.checksum, s.data) for s in got if s is not None] == [
        (1, "b1", binary), (2, "b2", b'{"as": "utf-8"}'), (3, "t3", '{"at": 3, "text": "\x1e\x1f\u00e9"}')
    ]  # fmt: skip
    assert all(type(s.data) is bytes for s in got[:2] if s is not None)
    store.put_snapshot(TENANT, "a", SnapshotRow(4, 3, "b4", binary), replaces=3)
    snapshot, events = store.read_latest(TENANT, "a")
    assert snapshot is not None and (snapshot.seq, snapshot.checksum, snapshot.data) == (4, "b4", binary)
    assert events == []
    store.put_snapshot(TENANT, "a", SnapshotRow(4, 1, "t4", '{"at": 4}'))  # over it, text again
    snapshot, _ = store.read_latest(TENANT, "a")
    assert snapshot is not None and snapshot.data == '{"at": 4}'


def test_read_latest_is_the_newest_snapshot_and_the_events_after_it(store: Store) -> None:
    _create(store, "a", events=7)
    snapshot, events = store.read_latest(TENANT, "a")
    assert snapshot is None and [e.seq for e in events] == [1, 2, 3, 4, 5, 6, 7]
    store.put_snapshot(TENANT, "a", SnapshotRow(3, 1, "s3", '{"at": 3}'))
    store.put_snapshot(TENANT, "a", SnapshotRow(5, 1, "s5", '{"at": 5}'))
    snapshot, events = store.read_latest(TENANT, "a")
    assert snapshot is not None and snapshot.seq == 5 and [e.seq for e in events] == [6, 7]
    _expect(TaskNotFoundError, lambda: store.read_latest(TENANT, "missing"))
