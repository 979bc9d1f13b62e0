"""Group commits of call events across streams land as written, across the rows' HEAD_EVERY moves of
the SQL backends (the kit's tether.testing.runtime.tasks.test_append_together checks appends across
tasks on every backend)."""

from __future__ import annotations

from tether.store import EventRow, StreamAppend, TaskRow, open_store


def test_many_streams_of_calls_land_as_written(store_url: str) -> None:
    """Group commits of call events across streams (on PostgreSQL, one statement for the parts that change
    no index column, beside the parts that do): every event reads back as written — its data (a NUL
    escape and non-ASCII text too), its exact time and its fence — and every row's version, last change
    and committed calls follow, across the row's HEAD_EVERY moves."""
    from tether.store import IndexUpdate
    from tether.store._sql import HEAD_EVERY

    store = open_store(store_url)
    names = [f"s{k}" for k in range(5)]
    for name in names:
        store.create_task(
            "t", TaskRow(name, "t", "x", "running", None, None, 0.0, 0.0, 1), EventRow(1, "E", 1, 0.0, "{}")
        )
    fences = {name: store.acquire_lease("t", name, "w", 60, 0.0) for name in names[:2]}
    written: dict[str, list[EventRow]] = {name: [] for name in names}
    at = 1_764_196_412.123_456_7
    for round in range(HEAD_EVERY + 4):
        parts = []
        for k, name in enumerate(names):
            first = 2 + len(written[name])
            rows = [
                EventRow(
                    seq,
                    "CallCompleted" if seq % 2 else "CallStarted",
                    1,
                    at + seq / 7,
                    '{"r": "\\u0000 é ' + str(seq) + '"}',
                    fences.get(name),
                )
                for seq in range(first, first + 1 + (k + round) % 2)
            ]
            index = IndexUpdate(status="running") if k == 4 and round % 5 == 0 else None
            parts.append(StreamAppend(name, rows, first - 1, fence=fences.get(name), index=index))
            written[name] += rows
        store.append_streams("t", parts)
    for name in names:
        events = written[name]
        assert store.read_events("t", name, after=1) == events
        row = store.get_task("t", name)
        assert row is not None
        assert (row.version, row.updated_at) == (events[-1].seq, events[-1].at)
        assert row.calls_done == sum(e.type == "CallCompleted" for e in events)
    if store_url.startswith("postgresql"):  # the stored rows themselves moved at each HEAD_EVERY-th event
        import psycopg

        schema = store_url.rpartition("schema=")[2]
        with psycopg.connect(store_url.partition("?")[0]) as conn:
            stored = dict(conn.execute(f"SELECT task_id, version FROM {schema}.tasks").fetchall())  # type: ignore[call-overload]
        assert [stored[name] for name in names[:4]] == [(1 + len(written[name])) // HEAD_EVERY * HEAD_EVERY] * 4
    store.close()
