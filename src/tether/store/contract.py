"""The store contract: checks any :class:`~tether.store.Store` must pass, shipped with tether.

A new backend proves itself by running them (tether runs them for memory, SQLite and PostgreSQL).
Each check takes a fresh, empty store and raises ``AssertionError`` (or lets a wrong exception through)
when the backend breaks the contract. Checks are grouped by capability: ``required`` ones every backend
passes; ``push`` (``wait_for_change`` wakes when the same store object commits, as memory and PostgreSQL's
LISTEN/NOTIFY do; SQLite's wakes on other connections' commits, tested with processes) is optional.

Example, with pytest::

    import pytest
    from tether.store.contract import CHECKS

    @pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
    def test_my_backend(check, tmp_path):
        store = MyStore(tmp_path)
        try:
            check(store)
        finally:
            store.close()

Or ``run_contract(factory)`` returns each check's outcome without pytest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from tether.errors import ConflictError, InvalidInputError, LeaseLostError, TaskNotFoundError
from tether.store.base import (
    COMPLETES,
    EventRow,
    IndexUpdate,
    SnapshotRow,
    Store,
    StreamAppend,
    TaskFilter,
    TaskHead,
    TaskRow,
)

__all__ = ["CHECKS", "Check", "ContractResult", "run_contract"]

TENANT = "contract"


@dataclass(frozen=True)
class Check:
    """One clause of the contract: ``fn(store)`` passes or raises."""

    name: str
    capability: str
    fn: Callable[[Store], None] = field(repr=False)

    def __call__(self, store: Store) -> None:
        self.fn(store)


CHECKS: list[Check] = []


def _check(capability: str = "required") -> Callable[[Callable[[Store], None]], Callable[[Store], None]]:
    def register(fn: Callable[[Store], None]) -> Callable[[Store], None]:
        CHECKS.append(Check(fn.__name__, capability, fn))
        return fn

    return register


def _row(task_id: str, *, type: str = "t", status: str = "pending", version: int = 1) -> TaskRow:
    now = time.time()
    return TaskRow(task_id, TENANT, type, status, "u1", None, now, now, version)


def _event(seq: int, payload: str = '{"n": 1}') -> EventRow:
    return EventRow(seq, "DecisionMade", 1, time.time(), payload)


def _create(store: Store, task_id: str, events: int = 1, *, type: str = "t") -> None:
    store.create_task(TENANT, _row(task_id, type=type), _event(1))
    if events > 1:
        store.append(TENANT, task_id, [_event(seq) for seq in range(2, events + 1)], 1)


def _seqs(store: Store, task_id: str, **bounds: int) -> list[int]:
    return [e.seq for e in store.read_events(TENANT, task_id, **bounds)]


def _expect(error: type[BaseException] | tuple[type[BaseException], ...], action: Callable[[], object]) -> None:
    try:
        action()
    except error:
        return
    raise AssertionError(f"expected {error} from {action}")


def _expect_conflict_on(task_id: str, action: Callable[[], object]) -> None:
    """``action`` raises a ConflictError that names ``task_id`` (the part refused, not another)."""
    try:
        action()
    except ConflictError as exc:
        assert exc.task_id == task_id, f"the conflict names {exc.task_id!r}, not the refused {task_id!r}"
        return
    raise AssertionError(f"expected a ConflictError on {task_id!r} from {action}")


# ------------------------------------------------------------------ streams


@_check()
def create_then_read_back(store: Store) -> None:
    _create(store, "a", events=3)
    row = store.get_task(TENANT, "a")
    assert row is not None and row.version == 3 and row.type == "t" and row.user_id == "u1"
    assert _seqs(store, "a") == [1, 2, 3]
    first = store.read_events(TENANT, "a")[0].data
    assert first in ('{"n": 1}', '{"n":1}', b'{"n": 1}', b'{"n":1}')
    assert store.get_task(TENANT, "missing") is None


@_check()
def the_row_moves_with_every_append(store: Store) -> None:
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


@_check()
def the_row_reads_right_at_any_length(store: Store) -> None:
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


@_check()
def stream_positions_are_the_rows_versions(store: Store) -> None:
    """The narrow read gives, for the streams of a type whose id has the prefix (and of a user, if
    named), the id, creation time and version a full row read gives, including past the events at
    which a SQL backend brings its rows up to date."""
    for task_id, user, events in (("app:a", "u1", 3), ("app:b", "u2", 70), ("app;", "u1", 1), ("other", "u1", 2)):
        store.create_task(TENANT, replace(_row(task_id), user_id=user), _event(1))
        if events > 1:
            store.append(TENANT, task_id, [_event(seq) for seq in range(2, events + 1)], 1)
    store.create_task(TENANT, replace(_row("app:c"), type="other type"), _event(1))

    def rows(prefix: str, user: str | None) -> list[tuple[str, float, int]]:
        listed = store.list_tasks(TENANT, TaskFilter(type="t", user_id=user), limit=100)
        return sorted((r.task_id, r.created_at, r.version) for r in listed if r.task_id.startswith(prefix))

    for prefix, of_user in (("app:", None), ("app:", "u1"), ("app", None), ("app;", None), ("zzz", None)):
        found = sorted(store.stream_positions(TENANT, "t", prefix, user_id=of_user))
        assert found == rows(prefix, of_user), (prefix, of_user, found)
    assert [p[2] for p in sorted(store.stream_positions(TENANT, "t", "app:"))] == [3, 70]


@_check()
def create_twice_is_a_conflict(store: Store) -> None:
    _create(store, "a")
    _expect(ConflictError, lambda: store.create_task(TENANT, _row("a"), _event(1)))
    assert _seqs(store, "a") == [1]


@_check()
def append_at_a_stale_version_writes_nothing(store: Store) -> None:
    _create(store, "a", events=2)
    for stale in (0, 1, 3, 9):  # behind and ahead
        _expect(ConflictError, partial(store.append, TENANT, "a", [_event(stale + 1)], stale))
    assert _seqs(store, "a") == [1, 2] and store.get_task(TENANT, "a").version == 2  # type: ignore[union-attr]


@_check()
def append_with_a_gap_writes_nothing(store: Store) -> None:
    _create(store, "a")
    _expect((ConflictError, InvalidInputError), lambda: store.append(TENANT, "a", [_event(3)], 1))
    _expect((ConflictError, InvalidInputError), lambda: store.append(TENANT, "a", [_event(2), _event(4)], 1))
    assert _seqs(store, "a") == [1]


@_check()
def append_to_a_missing_stream_is_not_found(store: Store) -> None:
    _expect(TaskNotFoundError, lambda: store.append(TENANT, "missing", [_event(2)], 1))


@_check()
def reads_are_ranged(store: Store) -> None:
    _create(store, "a", events=6)
    assert _seqs(store, "a", after=2) == [3, 4, 5, 6]
    assert _seqs(store, "a", after=2, upto=4) == [3, 4]
    assert _seqs(store, "a", upto=1) == [1]
    assert _seqs(store, "a", after=6) == []


@_check()
def a_fork_reads_its_parents_events_by_reference(store: Store) -> None:
    _create(store, "p", events=5)
    now = time.time()
    fork = TaskRow("f", TENANT, "t", "pending", None, None, now, now, 4, parent_id="p", parent_seq=3)
    store.create_task(TENANT, fork, _event(4, '{"fork": true}'))
    store.append(TENANT, "f", [_event(5)], 4)
    assert _seqs(store, "f") == [1, 2, 3, 4, 5]
    assert _seqs(store, "f", after=2, upto=4) == [3, 4]
    assert _seqs(store, "p") == [1, 2, 3, 4, 5]  # the parent is untouched
    _expect(ConflictError, lambda: store.delete_task(TENANT, "p"))  # a parent with forks stays


@_check()
def tenants_never_see_each_other(store: Store) -> None:
    _create(store, "a")
    assert store.get_task("someone-else", "a") is None
    assert store.list_tasks("someone-else", TaskFilter()) == []
    _expect(TaskNotFoundError, lambda: store.read_events("someone-else", "a"))


@_check()
def listing_filters_and_pages(store: Store) -> None:
    for i in range(5):
        _create(store, f"t{i}", type="odd" if i % 2 else "even")
        time.sleep(0.002)
    _create(store, "internal", type="tether.session")
    assert [r.task_id for r in store.list_tasks(TENANT, TaskFilter())] == ["t4", "t3", "t2", "t1", "t0"]  # not internal
    assert [r.task_id for r in store.list_tasks(TENANT, TaskFilter(type="odd"))] == ["t3", "t1"]
    assert [r.task_id for r in store.list_tasks(TENANT, TaskFilter(), limit=2, offset=1)] == ["t3", "t2"]
    assert "internal" in [r.task_id for r in store.list_tasks(TENANT, TaskFilter(internal=True))]


@_check()
def a_count_is_the_listings_length_up_to_its_cap(store: Store) -> None:
    now = time.time()
    for i in range(7):
        row = _row(f"c{i}", type="odd" if i % 2 else "even", status=("pending", "failed")[i % 3 == 0])
        store.create_task(TENANT, replace(row, user_id=f"u{i % 2}", created_at=now - 100 + i), _event(1))
    _create(store, "internal", type="tether.session")
    store.create_task("another-tenant", _row("theirs"), _event(1))
    kinds = [TaskFilter(), TaskFilter(internal=True), TaskFilter(type="odd"), TaskFilter(type="tether.session")]
    narrow = [TaskFilter(status=("failed",)), TaskFilter(status=("pending", "failed"), user_id="u0")]
    filters = [*kinds, *narrow, TaskFilter(created_after=now - 97, created_before=now - 95), TaskFilter(type="x")]
    listed = [len(store.list_tasks(TENANT, flt, limit=100)) for flt in filters]
    assert listed == [7, 8, 3, 1, 3, 4, 2, 0]
    assert [store.count_tasks(TENANT, flt, cap=100) for flt in filters] == listed
    assert [store.count_tasks(TENANT, flt, cap=2) for flt in filters] == [min(n, 2) for n in listed]
    mixed = store.list_tasks(TENANT, TaskFilter(status=("failed", "pending", "failed")), limit=3, offset=2)
    assert [r.task_id for r in mixed] == ["c4", "c3", "c2"]  # several statuses: one page of them all, in order


@_check()
def a_listing_by_id_prefix_or_by_parent_is_exact(store: Store) -> None:
    ids = ("trip-a1", "trip-a2", "trip_b", "tri%", "trip-b", "trip-a\U0010ffff", "é\U0010ffff", "fork-1", "fork-2")
    for i, task_id in enumerate(ids):
        fork = task_id.startswith("fork")  # forks of trip-a1, from its first event
        row = replace(_row(task_id), created_at=1000.0 + i, parent_id="trip-a1" if fork else None)
        store.create_task(TENANT, replace(row, parent_seq=1 if fork else None), _event(2 if fork else 1))

    def starting(prefix: str) -> list[str]:
        found = [r.task_id for r in store.list_tasks(TENANT, TaskFilter(id_prefix=prefix))]
        assert store.count_tasks(TENANT, TaskFilter(id_prefix=prefix), cap=100) == len(found)
        return found

    assert starting("trip-a") == ["trip-a\U0010ffff", "trip-a2", "trip-a1"] and starting("tri%") == ["tri%"]
    assert starting("trip_") == ["trip_b"] and starting("trip-b") == ["trip-b"] and starting("trip-a1x") == []
    assert starting("é") == starting("é\U0010ffff") == ["é\U0010ffff"] and starting("\U0010ffff") == []
    assert len(starting("")) == 9  # _ and % are characters, not a pattern; ids are ordered by code point
    forks = [r.task_id for r in store.list_tasks(TENANT, TaskFilter(forks_of="trip-a1"))]  # and by parent
    assert forks == ["fork-2", "fork-1"] and store.count_tasks(TENANT, TaskFilter(forks_of="trip-a1"), cap=9) == 2
    assert store.list_tasks(TENANT, TaskFilter(forks_of="fork-1")) == []


@_check()
def delete_removes_a_stream(store: Store) -> None:
    _create(store, "a", events=3)
    assert store.delete_task(TENANT, "a") == 3
    assert store.get_task(TENANT, "a") is None


# ------------------------------------------------------------------ appends across streams


def _versions(store: Store, *task_ids: str) -> list[int | None]:
    return [None if (row := store.get_task(TENANT, t)) is None else row.version for t in task_ids]


@_check()
def append_streams_writes_every_stream(store: Store) -> None:
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


@_check()
def append_streams_at_a_stale_version_on_one_stream_writes_nothing(store: Store) -> None:
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


@_check()
def append_streams_with_a_gap_or_a_missing_stream_writes_nothing(store: Store) -> None:
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


@_check()
def append_streams_honours_the_fence(store: Store) -> None:
    _create(store, "a")
    _create(store, "b")
    token = store.acquire_lease(TENANT, "a", "w1", 30, time.time())
    assert token is not None
    stale = [StreamAppend("b", [_event(2)], 1), StreamAppend("a", [_event(2)], 1, fence=token - 1)]
    _expect(LeaseLostError, partial(store.append_streams, TENANT, stale))
    assert _seqs(store, "a") == [1] and _seqs(store, "b") == [1]
    store.append_streams(TENANT, [StreamAppend("a", [_event(2)], 1, fence=token), StreamAppend("b", [_event(2)], 1)])
    assert [e.fence for e in store.read_events(TENANT, "a")][1:] == [token]
    assert _versions(store, "a", "b") == [2, 2]


# ------------------------------------------------------------------ compaction


@_check()
def compact_replaces_a_streams_history(store: Store) -> None:
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


@_check()
def compact_at_a_stale_version_or_under_forks_writes_nothing(store: Store) -> None:
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


# ------------------------------------------------------------------ snapshots


@_check()
def snapshots_are_found_at_most_a_seq_and_replaced(store: Store) -> None:
    _create(store, "a", events=9)
    for seq in (3, 6):
        store.put_snapshot(TENANT, "a", SnapshotRow(seq, 1, f"sum{seq}", f'{{"at": {seq}}}'))
    got = store.get_snapshot(TENANT, "a", at_most=5)
    assert got is not None and got.seq == 3 and got.checksum == "sum3"
    assert store.get_snapshot(TENANT, "a", at_most=2) is None
    store.put_snapshot(TENANT, "a", SnapshotRow(9, 1, "sum9", '{"at": 9}'), replaces=6)
    assert store.get_snapshot(TENANT, "a", at_most=8).seq == 3  # type: ignore[union-attr]
    assert store.get_snapshot(TENANT, "a", at_most=100).seq == 9  # type: ignore[union-attr]


@_check()
def read_latest_is_the_newest_snapshot_and_the_events_after_it(store: Store) -> None:
    _create(store, "a", events=7)
    snapshot, events = store.read_latest(TENANT, "a")
    assert snapshot is None and [e.seq for e in events] == [1, 2, 3, 4, 5, 6, 7]
    store.put_snapshot(TENANT, "a", SnapshotRow(3, 1, "s3", '{"at": 3}'))
    store.put_snapshot(TENANT, "a", SnapshotRow(5, 1, "s5", '{"at": 5}'))
    snapshot, events = store.read_latest(TENANT, "a")
    assert snapshot is not None and snapshot.seq == 5 and [e.seq for e in events] == [6, 7]
    _expect(TaskNotFoundError, lambda: store.read_latest(TENANT, "missing"))


# ------------------------------------------------------------------ ledger


@_check()
def the_ledger_runs_a_key_once(store: Store) -> None:
    now = time.time()
    assert store.ledger_begin(TENANT, "k", now).status == "new"
    again = store.ledger_begin(TENANT, "k", now)
    assert again.status == "started"
    done = store.ledger_finish(TENANT, "k", '"paid"', now)
    assert done.status == "done"
    assert store.ledger_finish(TENANT, "k", '"paid twice"', now).result in ('"paid"', b'"paid"')  # the first stands
    assert store.ledger_begin(TENANT, "k", now).status == "done"
    store.ledger_forget(TENANT, "k")
    assert store.ledger_get(TENANT, "k") is None


# ------------------------------------------------------------------ leases


@_check()
def a_live_lease_is_exclusive_and_fences_writes(store: Store) -> None:
    _create(store, "a")
    now = time.time()
    token = store.acquire_lease(TENANT, "a", "w1", 30, now)
    assert token is not None
    assert store.acquire_lease(TENANT, "a", "w2", 30, now) is None  # held and alive
    store.append(TENANT, "a", [_event(2)], 1, fence=token)
    _expect(LeaseLostError, lambda: store.append(TENANT, "a", [_event(3)], 2, fence=token - 1))
    assert store.renew_lease(TENANT, "a", token, 30, now)
    stolen = store.acquire_lease(TENANT, "a", "w2", 30, now, steal_from="w1")  # w1 known dead
    assert stolen is not None and stolen > token
    assert not store.renew_lease(TENANT, "a", token, 30, now)
    _expect(LeaseLostError, lambda: store.append(TENANT, "a", [_event(3)], 2, fence=token))
    store.release_lease(TENANT, "a", stolen)
    row = store.get_task(TENANT, "a")
    assert row is not None and row.lease_owner is None


@_check()
def an_expired_lease_can_be_taken(store: Store) -> None:
    _create(store, "a")
    now = time.time()
    first = store.acquire_lease(TENANT, "a", "w1", 0.01, now)
    second = store.acquire_lease(TENANT, "a", "w2", 30, now + 1)
    assert first is not None and second is not None and second > first


@_check()
def a_task_created_leased_is_held_from_its_first_moment(store: Store) -> None:
    _create(store, "b")
    now = time.time()  # b is due: it was made before now
    held = replace(_row("a"), lease_owner="w1", lease_expires=now + 30, lease_token=1, created_at=now)
    store.create_task(TENANT, held, _event(1))
    row = store.get_task(TENANT, "a")
    assert row is not None and (row.lease_owner, row.lease_expires, row.lease_token) == ("w1", now + 30, 1)
    assert store.acquire_lease(TENANT, "a", "w2", 30, now) is None  # held and alive
    claimed = store.claim(TENANT, "w2", 30, now)
    assert claimed is not None and claimed[0] == "b"  # the held one is not runnable for others
    assert store.claim(TENANT, "w2", 30, now) is None
    store.append(TENANT, "a", [_event(2)], 1, fence=1)
    _expect(LeaseLostError, lambda: store.append(TENANT, "a", [_event(3)], 2, fence=0))
    assert store.renew_lease(TENANT, "a", 1, 30, now)
    store.release_lease(TENANT, "a", 1)
    again = store.claim(TENANT, "w2", 30, now)
    assert again is not None and again[0] == "a" and again[1] > 1


@_check()
def claim_takes_the_task_due_first(store: Store) -> None:
    now = time.time()

    def task(task_id: str, status: str, created: float, wake: float | None = None, lease: float | None = 0) -> None:
        row = replace(_row(task_id, status=status), created_at=created, wake_at=wake)
        held = {} if lease == 0 else {"lease_owner": "w0", "lease_expires": lease, "lease_token": 1}
        store.create_task(TENANT, replace(row, **held), _event(1))  # type: ignore[arg-type]

    task("done", "completed", created=now - 5000)
    task("held", "running", created=now - 1000, lease=now + 30)  # its worker is alive
    task("no-expiry", "running", created=now - 2000, lease=None)  # an owner and no expiry: held, whatever the time
    task("waiting", "awaiting_input", created=now - 900)  # no timeout: only an answer wakes it
    task("later", "sleeping", created=now - 800, wake=now + 100)
    task("pending", "pending", created=now - 100)
    task("early", "pending", created=now + 50)  # made by a host whose clock runs ahead: due at its time
    task("orphan", "running", created=now - 50, lease=now - 1)  # its worker's lease ran out
    task("woken", "sleeping", created=now - 700, wake=now - 200)
    task("answered", "awaiting_input", created=now - 600, wake=now - 10)
    store.create_task("another-tenant", replace(_row("theirs"), created_at=now - 9000), _event(1))
    taken = [store.claim(TENANT, f"w{i}", 3600, now) for i in range(1, 6)]  # each claimer takes one, once
    # Oldest due first: a sleeper or an answered wait by its wake-up, a pending or orphaned task by its creation.
    assert [c and c[0] for c in taken] == ["woken", "pending", "orphan", "answered", None]
    assert taken[2] is not None and taken[2][1] == 2  # a lease taken over is fenced anew
    late = [store.claim(TENANT, "w9", 3600, now + 101) for _ in range(4)]
    assert [c and c[0] for c in late] == ["held", "early", "later", None]  # held's lease ran out meanwhile


@_check("push")
def another_writer_wakes_a_waiting_reader(store: Store) -> None:
    _create(store, "a")
    woke: list[bool] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        woke.append(store.wait_for_change(5.0))

    reader = threading.Thread(target=wait)
    reader.start()
    started.wait()
    time.sleep(0.05)
    store.append(TENANT, "a", [_event(2)], 1)
    reader.join(6)
    assert woke == [True]


@dataclass(frozen=True)
class ContractResult:
    check: Check
    error: BaseException | None

    @property
    def passed(self) -> bool:
        return self.error is None


def run_contract(
    factory: Callable[[], Store], *, capabilities: tuple[str, ...] = ("required",)
) -> list[ContractResult]:
    """Run every check of the given capabilities, each on a fresh store from ``factory``."""
    results = []
    for check in CHECKS:
        if check.capability not in capabilities:
            continue
        store = factory()
        try:
            check(store)
        except Exception as exc:  # an AssertionError or a wrong exception: the clause is broken
            results.append(ContractResult(check, exc))
        else:
            results.append(ContractResult(check, None))
        finally:
            store.close()
    return results
