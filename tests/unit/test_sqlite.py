"""SQLite specifics: connection policy, foreign files, newer schemas, corruption on disk."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

import tether
from tether.events import ObservationRecorded
from tether.store.sqlite import SCHEMA_VERSION, SQLiteStore


def test_default_url_is_tether_db_in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = tether.open_store()
    assert isinstance(store, SQLiteStore) and store.path == "tether.db"
    assert (tmp_path / "tether.db").exists()
    store.close()


@pytest.mark.parametrize(("durability", "level"), [("normal", 1), ("full", 2)])
def test_durability_maps_to_synchronous(tmp_path: Path, durability: str, level: int) -> None:
    store = tether.open_store(f"sqlite:///{tmp_path}/t.db?durability={durability}")
    assert isinstance(store, SQLiteStore)
    assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == level
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0


def test_bad_options(tmp_path: Path) -> None:
    with pytest.raises(tether.ConfigurationError, match="durability"):
        tether.open_store(f"sqlite:///{tmp_path}/t.db", durability="fast")
    with pytest.raises(tether.ConfigurationError, match="unknown SQLite option"):
        tether.open_store(f"sqlite:///{tmp_path}/t.db?journal=off")
    with pytest.raises(tether.ConfigurationError, match="no tether backend"):
        tether.open_store("mongodb://localhost")
    assert tether.open_store(str(tmp_path / "bare.db")).url == f"sqlite:///{tmp_path}/bare.db"  # a bare path is SQLite
    with pytest.raises(tether.ConfigurationError, match="needs a path"):
        tether.open_store("sqlite://")


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database" * 200)
    with pytest.raises(tether.ConfigurationError, match="not a tether database"):
        tether.open_store(f"sqlite:///{path}")
    assert path.read_bytes().startswith(b"these are my notes")


def test_another_applications_database(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    with pytest.raises(tether.ConfigurationError, match=r"not a tether database.*users"):
        tether.open_store(f"sqlite:///{path}")


def test_a_newer_schema_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    tether.open_store(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    conn.commit()
    conn.close()
    with pytest.raises(tether.SchemaVersionError) as info:
        tether.open_store(f"sqlite:///{path}")
    assert (info.value.found, info.value.supported) == (SCHEMA_VERSION + 3, SCHEMA_VERSION)
    assert "upgrade tether" in str(info.value)


def test_reopening_keeps_everything(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    log = tether.TaskLog(url)
    state = log.create(type="chat")
    log.append(state.task_id, [ObservationRecorded(key="k", value="v")], 1)
    state = log.load(state.task_id)
    log.store.close()
    assert tether.TaskLog(url).load(state.task_id) == state


def test_snapshot_corrupted_on_disk_is_detected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    log = tether.TaskLog(url, snapshots=tether.SnapshotPolicy(every=5, size_ratio=0))
    state = log.create(type="chat")
    for i in range(12):
        log.append(state.task_id, [ObservationRecorded(key="k", value=i)], state.version)
        state = log.load(state.task_id)
    log.store.close()
    conn = sqlite3.connect(tmp_path / "t.db")
    (count,) = conn.execute("SELECT count(*) FROM snapshots").fetchone()
    assert count == 2
    # Flip the recorded value inside the newest snapshot, as a bad disk or a stray edit would.
    conn.execute(
        "UPDATE snapshots SET data = replace(data, '\"value\":8', '\"value\":999') "
        "WHERE seq = (SELECT max(seq) FROM snapshots)"
    )
    assert conn.total_changes == 1
    conn.commit()
    conn.close()
    with caplog.at_level("WARNING", logger="tether"):
        loaded = tether.TaskLog(url).load(state.task_id)
    assert loaded == state
    assert "fails its checksum" in caplog.text


WAL_FRAME = 4096 + 24  # a page and its frame header


def _commit_turns(path: Path, commits: int) -> tuple[SQLiteStore, str, int]:
    """One event per commit on a new task; the store, the task id and the WAL's frames."""
    log = tether.TaskLog(f"sqlite:///{path}")
    state = log.create(type="chat")
    version = state.version
    for i in range(commits):
        version = log.append(state.task_id, [ObservationRecorded(key="turn", value=i)], version, snapshot=False)
    store = log.store
    assert isinstance(store, SQLiteStore) and store._checkpointer is not None
    wal_frames = (path.with_name(path.name + "-wal").stat().st_size - 32) // WAL_FRAME
    return store, state.task_id, wal_frames


def test_checkpoints_run_off_the_commit_path_and_keep_the_wal_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lower thresholds so a few thousand commits cross them many times over.
    from tether.store._sqlite_wal import Checkpointer as _Checkpointer

    monkeypatch.setattr(_Checkpointer, "EVERY", 20)
    monkeypatch.setattr(_Checkpointer, "GATED_FRAMES", 200)
    # Each poke waits until the thread has taken it up (it then checkpoints beside the writer, as
    # ever): on a loaded machine the thread may otherwise get no CPU for thousands of commits, and
    # the WAL, whose size is its high-water mark, would show the scheduler rather than the design.
    poke = _Checkpointer.poke

    def poke_and_see_it_taken(self: _Checkpointer) -> None:
        poke(self)
        deadline = time.monotonic() + 10
        while self._wake.is_set() and time.monotonic() < deadline:
            time.sleep(0.0005)

    monkeypatch.setattr(_Checkpointer, "poke", poke_and_see_it_taken)
    path = tmp_path / "t.db"
    commits = 6000
    store, task_id, wal_frames = _commit_turns(path, commits)
    checkpointer = store._checkpointer
    assert checkpointer is not None and checkpointer.passes > 0 and checkpointer.gated > 0
    # Without checkpoints the WAL would hold a frame per commit; restarted, it stays far smaller.
    assert wal_frames < commits / 2, wal_frames
    # The commit path itself checkpoints only past the net, far above where the thread acts.
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == _Checkpointer.NET_FRAMES
    store.close()
    assert checkpointer._thread is None
    reopened = tether.TaskLog(f"sqlite:///{path}")
    assert reopened.load(task_id).observations["turn"].value == commits - 1


def test_sqlites_own_checkpoint_is_the_net_when_no_checkpointer_is_poked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writers that each commit too little to poke their thread (many short processes) still
    # keep the WAL bounded: SQLite's automatic checkpoint fires at NET_FRAMES.
    from tether.store._sqlite_wal import Checkpointer as _Checkpointer

    monkeypatch.setattr(_Checkpointer, "EVERY", 10**9)
    monkeypatch.setattr(_Checkpointer, "NET_FRAMES", 300)
    commits = 4000
    store, _, wal_frames = _commit_turns(tmp_path / "t.db", commits)
    assert store._checkpointer is not None and store._checkpointer.passes == 0  # the thread never ran
    assert wal_frames < commits / 2, wal_frames
    store.close()


def test_at_full_durability_sqlite_checkpoints_inline_and_the_wal_stays_small(tmp_path: Path) -> None:
    # At "full" every commit fsyncs the WAL, and an fsync that also grows the file costs more:
    # no thread that lets the WAL grow while it catches up, SQLite's own checkpoint at its default.
    path = tmp_path / "t.db"
    log = tether.TaskLog(f"sqlite:///{path}?durability=full")
    store = log.store
    assert isinstance(store, SQLiteStore)
    assert store._checkpointer is None
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    state = log.create(type="chat")
    version = state.version
    commits = 2500  # well past 1,000 frames: without a checkpoint the WAL would hold them all
    for i in range(commits):
        version = log.append(state.task_id, [ObservationRecorded(key="turn", value=i)], version, snapshot=False)
    wal_frames = (path.with_name(path.name + "-wal").stat().st_size - 32) // WAL_FRAME
    assert wal_frames < 1100, wal_frames  # restarted at SQLite's threshold, never grown past it
    store.close()
    assert tether.TaskLog(f"sqlite:///{path}").load(state.task_id).observations["turn"].value == commits - 1


def _rows(first: int, count: int) -> list[tether.store.EventRow]:
    return [
        tether.store.EventRow(seq, "ObservationRecorded", 1, 0.0, f'{{"n": {seq}}}', None)
        for seq in range(first, first + count)
    ]


def test_a_batch_written_in_one_statement_still_refuses_a_stale_fence_or_version(tmp_path: Path) -> None:
    """A connection that wrote a stream last writes the next batch as one multi-row INSERT, trusting
    what it knows of the version and the lease token — only while no other connection has written:
    another's takeover (a new token) or append (a new version) is refused, and nothing is written."""
    path = tmp_path / "t.db"
    a, b = SQLiteStore(str(path)), SQLiteStore(str(path))
    row = tether.store.TaskRow("t", "default", "x", "running", None, None, 0.0, 0.0, 1)
    a.create_task("default", row, _rows(1, 1)[0])
    token = a.acquire_lease("default", "t", "a", 60.0, 0.0)
    assert token is not None
    a.append("default", "t", _rows(2, 3), 1, fence=token)
    a.append("default", "t", _rows(5, 3), 4, fence=token)  # the one-statement path
    assert [r.seq for r in b.read_events("default", "t")] == list(range(1, 8))
    # b takes the lease over (its holder died, say) and writes nothing yet
    new = b.acquire_lease("default", "t", "b", 60.0, 100.0)
    assert new is not None and new != token
    with pytest.raises(tether.LeaseLostError):
        a.append("default", "t", _rows(8, 3), 7, fence=token)
    b.append("default", "t", _rows(8, 2), 7, fence=new)
    with pytest.raises(tether.ConflictError):
        a.append("default", "t", _rows(8, 3), 7)
    events = b.read_events("default", "t")
    assert [r.seq for r in events] == list(range(1, 10)) and {r.fence for r in events[7:]} == {new}
    a.close()
    b.close()


def test_every_store_method_translates_sqlites_errors() -> None:
    """No sqlite3 error crosses the store boundary from any method of the Store protocol (a group
    commit's ``append_streams`` and ``compact`` among them), ``close`` aside."""
    from tether.store.base import Store
    from tether.store.sqlite import SQLiteStore

    methods = [name for name, member in vars(Store).items() if callable(member) and not name.startswith("_")]
    assert {"append_streams", "compact", "read_latest", "append"} <= set(methods)
    unguarded = [name for name in methods if name != "close" and not hasattr(getattr(SQLiteStore, name), "__wrapped__")]
    assert unguarded == []


def test_a_reader_never_keeps_the_id_a_rewind_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A rewind renames the task's row and puts a new one under its id. Another process's reader,
    # reading the id in the rewind's transaction (before its commit), sees the old row: it must not
    # keep it as the id's row once the rewind commits (it read the archived branch for good).
    url = f"sqlite:///{tmp_path}/t.db"
    writer, reader = tether.App(url), tether.App(url)
    version = writer.log.create(type="chat", task_id="t").version
    writer.log.append("t", [ObservationRecorded(key="k", value=i) for i in range(3)], version)
    assert len(reader.history("t")) == 4
    bump = writer.store._bump_mapping  # type: ignore[attr-defined]

    def read_midway() -> None:
        bump()
        assert len(reader.history("t")) == 4  # the last commit's: the old row, under its id still

    monkeypatch.setattr(writer.store, "_bump_mapping", read_midway)
    writer.log.rewind("t", 2, archive_id="t~1")
    assert [e.type for e in reader.history("t")] == ["TaskCreated", "ObservationRecorded", "TaskForked"]
    monkeypatch.undo()
    looking = tether.App(tether.open_store(url, readonly=True))  # as the CLI reads: nothing tells it of renames
    assert len(looking.history("t")) == 3
    writer.log.rewind("t", 1, archive_id="t~2")
    assert [e.type for e in looking.history("t")] == ["TaskCreated", "TaskForked"]
