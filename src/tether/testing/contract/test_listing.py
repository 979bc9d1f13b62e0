"""Listing: filters, pages, counts, prefixes of ids, forks of a task, and the narrow read of stream positions."""

from __future__ import annotations

import time
from dataclasses import replace

from tether.store import IndexUpdate, Store, StreamAppend, TaskFilter
from tether.testing.contract._records import TENANT, _create, _event, _row


def test_stream_positions_are_the_rows_versions(store: Store) -> None:
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


def test_listing_filters_and_pages(store: Store) -> None:
    for i in range(5):
        _create(store, f"t{i}", type="odd" if i % 2 else "even")
        time.sleep(0.002)
    _create(store, "internal", type="tether.session")
    assert [r.task_id for r in store.list_tasks(TENANT, TaskFilter())] == ["t4", "t3", "t2", "t1", "t0"]  # not internal
    assert [r.task_id for r in store.list_tasks(TENANT, TaskFilter(type="odd"))] == ["t3", "t1"]
    assert [r.task_id for r in store.list_tasks(TENANT, TaskFilter(), limit=2, offset=1)] == ["t3", "t2"]
    assert "internal" in [r.task_id for r in store.list_tasks(TENANT, TaskFilter(internal=True))]


def test_a_count_is_the_listings_length_up_to_its_cap(store: Store) -> None:
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


def test_a_listing_by_id_prefix_or_by_parent_is_exact(store: Store) -> None:
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


def test_an_append_names_a_session_on_a_row_that_names_none(store: Store) -> None:
    """An append whose index change carries ``session_id`` (a task's first use of the conversation made
    for it) names it on a row that names none: a listing by it finds the task (and a count counts it)
    from then on, by a lone append or a multi-stream one; a row that names one keeps it; another
    tenant's task of the same id is left as it is."""
    _create(store, "quiet")
    _create(store, "grouped")
    store.create_task(TENANT, replace(_row("named"), session_id="s1"), _event(1))
    store.create_task("another-tenant", _row("quiet"), _event(1))
    by_session = TaskFilter(session_id="quiet")
    assert store.list_tasks(TENANT, by_session) == []
    store.append(TENANT, "quiet", [_event(2)], 1, index=IndexUpdate(None, moves=False, session_id="quiet"))
    store.append(TENANT, "named", [_event(2)], 1, index=IndexUpdate(None, moves=False, session_id="quiet"))
    assert [r.task_id for r in store.list_tasks(TENANT, by_session)] == ["quiet"]
    store.append_streams(
        TENANT,
        [
            StreamAppend("grouped", [_event(2)], 1, index=IndexUpdate("running", session_id="quiet")),
            StreamAppend("quiet", [_event(3)], 2, index=IndexUpdate(None, moves=False, session_id="later")),
        ],
    )
    assert sorted(r.task_id for r in store.list_tasks(TENANT, by_session)) == ["grouped", "quiet"]
    assert store.count_tasks(TENANT, by_session, cap=10) == 2
    grouped = store.get_task(TENANT, "grouped")
    assert grouped is not None and grouped.status == "running" and grouped.version == 2
    assert store.get_task(TENANT, "named").session_id == "s1"  # type: ignore[union-attr]
    assert store.get_task("another-tenant", "quiet").session_id is None  # type: ignore[union-attr]
    store.append(TENANT, "quiet", [_event(4)], 3, index=IndexUpdate("running"))
    assert store.get_task(TENANT, "quiet").session_id == "quiet"  # type: ignore[union-attr]
