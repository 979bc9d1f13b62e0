"""`app.replay` writes nothing, byte for byte, for a finished task whose conversation (``ctx.session``)
was compacted: the compaction answered from the record does not cache the session's view again (it
was cached when the compaction was written), and no snapshot is ever written over an identical one.

The dump of a PostgreSQL schema compares rows as a set, and a memory store's rows compare by value,
so a snapshot deleted and written again with the same content would pass it: the test also counts
the store's snapshot writes, and reads the snapshot rows' physical identity (SQLite's rowid,
PostgreSQL's ``xmin``)."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tests.conftest import PG_URL, dump_database


def _snapshot_rows(store_url: str) -> list[tuple[Any, ...]] | None:
    """The snapshot rows with what changes when a row is rewritten, where the backend has one."""
    if store_url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        try:
            return conn.execute("SELECT rowid, task, seq FROM snapshots ORDER BY rowid").fetchall()
        finally:
            conn.close()
    if store_url.startswith(("memory://", "redis://")):  # no row versions to compare
        return None
    import psycopg
    from psycopg import sql

    schema = store_url.rpartition("schema=")[2].partition("&")[0]
    with psycopg.connect(PG_URL, autocommit=True) as pg:
        query = sql.SQL("SELECT xmin::text, ctid::text, task, seq FROM {}.snapshots ORDER BY task, seq").format(
            sql.Identifier(schema)
        )
        return [tuple(r) for r in pg.execute(query)]


def _count_snapshot_writes(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[tuple[str, int]]:
    writes: list[tuple[str, int]] = []
    put = store.put_snapshot

    def counting(tenant: str, task_id: str, snapshot: Any, **kw: Any) -> None:
        writes.append((task_id, snapshot.seq))
        put(tenant, task_id, snapshot, **kw)

    monkeypatch.setattr(store, "put_snapshot", counting)
    return writes


@pytest.mark.parametrize("reads_after", [False, True])
def test_replay_of_a_compacted_conversation_writes_nothing(
    store_url: str, monkeypatch: pytest.MonkeyPatch, reads_after: bool
) -> None:
    app = tether.App(store_url)

    @app.task
    def chat(ctx: tether.TaskContext) -> int:
        for i in range(5):
            ctx.session.add("user", f"q{i}")
        ctx.session.compact(keep_last=1)
        if reads_after:
            return len(ctx.session.window(max_tokens=1000).messages)
        return 0

    app.run(chat, task_id="c1")
    before, rows_before = dump_database(store_url, app.store), _snapshot_rows(store_url)
    writes = _count_snapshot_writes(monkeypatch, app.store)

    report = app.replay("c1")

    assert report.clean, report
    assert writes == [], f"a replay wrote snapshots {writes}"
    assert _snapshot_rows(store_url) == rows_before
    assert dump_database(store_url, app.store) == before


def test_a_snapshot_identical_to_the_stored_one_is_not_written_again(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tether.App(store_url)
    chat = app.session("s1")
    for i in range(5):
        chat.add("user", f"q{i}")
    chat.compact(keep_last=1)

    @app.task
    def job(ctx: tether.TaskContext) -> int:
        return 1

    app.run(job, task_id="j1")
    state = app.log.load("j1")
    app.log.write_snapshot("j1", state)
    stored = app.store.get_snapshot(app.log.tenant, "session:s1", at_most=2**31 - 1)
    assert stored is not None
    data = stored.data.decode() if isinstance(stored.data, bytes) else stored.data
    rows_before = _snapshot_rows(store_url)
    writes = _count_snapshot_writes(monkeypatch, app.store)

    app.log.put_stream_snapshot("session:s1", stored.seq, stored.schema, data)  # the one stored there
    app.log.put_stream_snapshot("session:s1", stored.seq, stored.schema, data, replaces=stored.seq)
    app.log.write_snapshot("j1", state)  # a task's state as stored at its version

    assert writes == []
    assert _snapshot_rows(store_url) == rows_before

    app.log.put_stream_snapshot("session:s1", stored.seq, stored.schema, data.replace("q0", "Q0"))
    assert writes == [("session:s1", stored.seq)]  # a different one is written


def test_a_resumed_run_past_its_recorded_compaction_does_not_rewrite_the_snapshot(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tether.App(store_url)
    stop = {"on": True}

    class Stop(BaseException):
        """Stands for a crash."""

    @app.task
    def chat(ctx: tether.TaskContext) -> str:
        for i in range(5):
            ctx.session.add("user", f"q{i}")
        ctx.session.compact(keep_last=1)
        if stop["on"]:
            raise Stop
        return "done"

    with pytest.raises(Stop):
        app.run(chat, task_id="c1")
    stop["on"] = False
    stream = "session:c1"  # a task's conversation is named after it
    writes = _count_snapshot_writes(monkeypatch, app.store)

    assert app.resume("c1").output == "done"

    assert [w for w in writes if w[0] == stream] == []
