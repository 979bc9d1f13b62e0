"""A stream whose newest snapshot is corrupt is read from the newest intact one before it, with
every event after *that* one: the state (a task's, a session's view) equals a fold of every event.

A fallback that started from the older snapshot but folded only the events after the corrupt one
would lose everything recorded between the two, silently: both snapshots pass for the stream.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tether
from tether.conversation import stream_id
from tether.events import ObservationRecorded, fold
from tether.store import SnapshotRow

FAR = 10**9


def _scribbled(snap: SnapshotRow) -> SnapshotRow:
    """``snap`` with its data changed and its checksum not: what a bad disk or a stray write leaves."""
    data = str(snap.data)
    return SnapshotRow(snap.seq, snap.schema, snap.checksum, data[:-8] + "Xx" * 4)


def _snapshot_seqs(store: tether.store.Store, tenant: str, stream: str) -> list[int]:
    seqs: list[int] = []
    snap = store.get_snapshot(tenant, stream, at_most=FAR)
    while snap is not None:
        seqs.append(snap.seq)
        snap = store.get_snapshot(tenant, stream, at_most=snap.seq - 1)
    return sorted(seqs)


@pytest.fixture
def app(store_url: str) -> Iterator[tether.App]:
    app = tether.App(store_url)
    yield app
    app.close()


def test_a_session_whose_newest_snapshot_is_corrupt_folds_every_event_after_the_older_one(app: tether.App) -> None:
    chat = app.session("s")
    sid = stream_id("s")
    older: SnapshotRow | None = None
    i = 0
    # Add messages until the session has written two snapshots of its outline; it keeps only the
    # newest, so the older one is put back beside it (as a store that kept both would hold them).
    while True:
        chat.add("user" if i % 2 == 0 else "assistant", f"message {i}")
        i += 1
        snap = app.store.get_snapshot(app.tenant, sid, at_most=FAR)
        if snap is not None and older is None:
            older = snap
        elif snap is not None and older is not None and snap.seq > older.seq:
            newest = snap
            break
    for _ in range(3):  # and a few events after the newest
        chat.add("user", f"message {i}")
        i += 1
    assert older is not None
    app.store.put_snapshot(app.tenant, sid, older)
    app.store.put_snapshot(app.tenant, sid, _scribbled(newest))
    assert _snapshot_seqs(app.store, app.tenant, sid) == [older.seq, newest.seq]
    assert newest.seq - older.seq > 1  # events lie between the two

    expected = [f"message {k}" for k in range(i)]
    fresh = tether.App(app.store)  # a new process: nothing but the store
    view = fresh.session("s")
    assert [m.content for m in view.messages()] == expected
    window = view.window(max_tokens=10**6, keep_last=i).to_openai()
    assert [m["content"] for m in window] == expected
    view.add("user", "one more")  # appends go on from the true end
    assert [m.content for m in tether.App(app.store).session("s").messages()] == [*expected, "one more"]


def test_a_task_whose_newest_snapshots_are_corrupt_loads_as_a_full_fold(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = log.create(type="chat")
    for i in range(35):
        # Seven keys overwritten in turn: the state does not grow, so each snapshot is kept beside
        # the ones before (a growing state's new snapshot replaces the last).
        log.append(state.task_id, [ObservationRecorded(key=f"k{i % 7}", value=i)], state.version)
        state = log.load(state.task_id)
    task_id = state.task_id
    assert _snapshot_seqs(log.store, log.tenant, task_id) == [10, 20, 30]
    whole = fold(log.events(task_id))
    assert state == whole

    newest = log.store.get_snapshot(log.tenant, task_id, at_most=FAR)
    assert newest is not None and newest.seq == 30
    log.store.put_snapshot(log.tenant, task_id, _scribbled(newest))
    assert tether.TaskLog(log.store).load(task_id) == whole  # from the snapshot at 20, events 21-36
    assert tether.TaskLog(log.store).state_at(task_id, 33) == fold(log.events(task_id, upto=33))

    middle = log.store.get_snapshot(log.tenant, task_id, at_most=29)
    assert middle is not None and middle.seq == 20
    log.store.put_snapshot(log.tenant, task_id, _scribbled(middle))
    assert tether.TaskLog(log.store).load(task_id) == whole  # from the snapshot at 10, events 11-36
    assert tether.TaskLog(log.store).load(task_id).observations["k6"].value == 34
