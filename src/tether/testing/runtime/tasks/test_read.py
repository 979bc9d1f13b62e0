"""Reading: latest state, state at any seq, event ranges, snapshots and their fallbacks."""

from __future__ import annotations

import pytest

import tether
from tether.events import DecisionMade, ObservationRecorded, fold
from tether.log import checksum
from tether.log.snapshots import state_data
from tether.model import STATE_SCHEMA_VERSION
from tether.store import SnapshotRow


def _grow(log: tether.TaskLog, n: int) -> tether.TaskState:
    state = log.create(type="chat")
    for i in range(n):
        log.append(state.task_id, [ObservationRecorded(key=f"k{i % 7}", value=i)], state.version)
        state = log.load(state.task_id)
    return state


def test_load_equals_fold_of_every_event(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = _grow(log, 55)
    fresh = tether.TaskLog(log.store)
    assert fresh.load(state.task_id) == state == fold(fresh.events(state.task_id))


def test_a_snapshot_written_by_hand_is_where_loads_start(store_url: str) -> None:
    # A policy that never snapshots: the only snapshot is the one written by hand.
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10**9))
    state = _grow(log, 12)
    assert log.store.get_snapshot(log.tenant, state.task_id, at_most=state.version) is None
    log.write_snapshot(state.task_id, state)
    snap = log.store.get_snapshot(log.tenant, state.task_id, at_most=state.version)
    assert snap is not None and snap.seq == state.version
    fresh = tether.TaskLog(log.store)
    assert fresh.load(state.task_id) == state
    snapshot, after = log.store.read_latest(log.tenant, state.task_id)
    assert snapshot is not None and snapshot.seq == state.version and after == []


def test_state_at_every_seq_matches_prefix_fold(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=5, size_ratio=0))
    state = _grow(log, 23)
    events = log.events(state.task_id)
    for seq in range(1, state.version + 1):
        assert log.state_at(state.task_id, seq) == fold(events[:seq])


@pytest.mark.parametrize("seq", [0, -1, 99])
def test_state_at_out_of_range(store_url: str, seq: int) -> None:
    log = tether.TaskLog(store_url)
    state = _grow(log, 3)
    with pytest.raises(tether.SequenceError) as info:
        log.state_at(state.task_id, seq)
    assert info.value.last == 4 and str(seq) in str(info.value)


def test_state_at_rejects_non_integer(store_url: str) -> None:
    log = tether.TaskLog(store_url)
    state = _grow(log, 1)
    with pytest.raises(tether.InvalidInputError):
        log.state_at(state.task_id, "2")  # type: ignore[arg-type]


def test_event_ranges(store_url: str) -> None:
    log = tether.TaskLog(store_url)
    state = _grow(log, 9)
    assert [r.seq for r in log.events(state.task_id, after=3, upto=6)] == [4, 5, 6]
    assert [r.seq for r in log.events(state.task_id, after=8)] == [9, 10]
    with pytest.raises(tether.SequenceError):
        log.events(state.task_id, after=-1)


def test_snapshots_follow_policy(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = _grow(log, 34)  # versions 1..35
    snap = log.store.get_snapshot(log.tenant, state.task_id, at_most=10**9)
    assert snap is not None and snap.seq == 30 and snap.schema == STATE_SCHEMA_VERSION
    assert snap.checksum == checksum(snap.data)
    assert log.store.get_snapshot(log.tenant, state.task_id, at_most=29).seq == 20  # type: ignore[union-attr]


def _snapshot_seqs(log: tether.TaskLog, task_id: str) -> list[int]:
    seqs, at = [], 10**9
    while (snap := log.store.get_snapshot(log.tenant, task_id, at_most=at)) is not None:
        seqs.append(snap.seq)
        at = snap.seq - 1
    return seqs


def _chat(log: tether.TaskLog, n: int) -> tether.TaskState:
    """A state that keeps every message: it grows by what each event carries."""
    state = log.create(type="chat")
    for i in range(n):
        event = DecisionMade(name=f"d{i}", choice=i, rationale="r" * 100)
        log.append(state.task_id, [event], state.version)
        state = log.load(state.task_id)
    return state


def test_size_ratio_keeps_snapshots_of_a_growing_state_rare(store_url: str) -> None:
    # growth_ratio above 1 keeps every snapshot written, so the writes can be counted.
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=1.0, growth_ratio=2.0))
    state = _chat(log, 200)
    # every=10 alone would give 20 snapshots; the size rule waits until the events outweigh the last one.
    assert 2 <= len(_snapshot_seqs(log, state.task_id)) < 10


def test_a_growing_state_keeps_its_latest_snapshot_only(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=1.0))
    state = _chat(log, 200)
    seqs = _snapshot_seqs(log, state.task_id)
    assert len(seqs) == 1 and seqs[0] > 100  # each new snapshot replaced the one before
    events = log.events(state.task_id)
    fresh = tether.TaskLog(log.store)
    assert fresh.load(state.task_id) == state == fold(events)
    for seq in (1, 57, seqs[0] - 1, seqs[0], state.version):  # time travel still lands anywhere
        assert fresh.state_at(state.task_id, seq) == fold(events[:seq])


def test_a_steady_state_keeps_every_snapshot_for_time_travel(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=1.0))
    state = log.create(type="chat")
    for i in range(60):
        log.append(state.task_id, [ObservationRecorded(key="latest", value="m" * 100 + str(i))], state.version)
        state = log.load(state.task_id)
    assert _snapshot_seqs(log, state.task_id) == [60, 50, 40, 30, 20, 10]


def test_put_snapshot_can_replace_an_earlier_one_in_the_same_write(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10**6))
    state = _grow(log, 12)
    store, tenant = log.store, log.tenant
    for seq in (5, 9):
        data = state_data(log.state_at(state.task_id, seq))
        store.put_snapshot(tenant, state.task_id, SnapshotRow(seq, STATE_SCHEMA_VERSION, checksum(data), data))
    data = state_data(state)
    row = SnapshotRow(state.version, STATE_SCHEMA_VERSION, checksum(data), data)
    store.put_snapshot(tenant, state.task_id, row, replaces=9)
    assert _snapshot_seqs(log, state.task_id) == [state.version, 5]
    store.put_snapshot(tenant, state.task_id, row, replaces=9)  # already gone: no error
    assert _snapshot_seqs(log, state.task_id) == [state.version, 5]


def test_corrupt_snapshot_falls_back_to_events(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = _grow(log, 25)
    good = log.store.get_snapshot(log.tenant, state.task_id, at_most=10**9)
    assert good is not None and good.seq == 20
    bad = SnapshotRow(good.seq, good.schema, good.checksum, str(good.data).replace('"k', '"K'))
    log.store.put_snapshot(log.tenant, state.task_id, bad)
    fresh = tether.TaskLog(log.store)
    assert fresh.load(state.task_id) == state
    assert fresh.state_at(state.task_id, 22) == fold(log.events(state.task_id, upto=22))


def test_snapshot_of_another_schema_is_ignored(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = _grow(log, 12)
    good = log.store.get_snapshot(log.tenant, state.task_id, at_most=10**9)
    assert good is not None
    data = '{"task_id": "wrong"}'
    log.store.put_snapshot(log.tenant, state.task_id, SnapshotRow(good.seq, 0, checksum(data), data))
    assert tether.TaskLog(log.store).load(state.task_id) == state


def test_load_sees_appends_from_another_log(store_url: str) -> None:
    log = tether.TaskLog(store_url)
    other = tether.TaskLog(log.store)
    state = _grow(log, 2)
    assert log.load(state.task_id).version == 3
    other.append(state.task_id, [ObservationRecorded(key="late", value=1)], 3)
    assert log.load(state.task_id).observations["late"].value == 1


def test_event_ranges_across_a_fork_of_a_fork(store_url: str) -> None:
    # A fork shares its parent's events up to the fork point: every range of a fork of a fork reads
    # what its chain holds, the ancestors' part (up to each fork point) first, then its own.
    log = tether.TaskLog(store_url)
    root = log.create(type="chat", task_id="root")
    version = root.version
    for i in range(9):
        version = log.append("root", [ObservationRecorded(key="k", value=i)], version)
    log.fork("root", at=6, new_id="mid")
    version = log.load("mid").version
    for i in range(4):
        version = log.append("mid", [ObservationRecorded(key="k", value=100 + i)], version)
    log.fork("mid", at=9, new_id="leaf")
    version = log.load("leaf").version
    for i in range(3):
        version = log.append("leaf", [ObservationRecorded(key="k", value=200 + i)], version)
    whole = log.store.read_events(log.tenant, "leaf")
    assert [r.seq for r in whole] == list(range(1, version + 1))
    values = [r.data for r in whole]
    assert values[:6] == [r.data for r in log.store.read_events(log.tenant, "root", upto=6)]
    assert values[6:9] == [r.data for r in log.store.read_events(log.tenant, "mid", after=6, upto=9)]
    for after in range(version + 1):
        for upto in (None, *range(after, version + 1)):
            got = log.store.read_events(log.tenant, "leaf", after=after, upto=upto)
            assert got == [r for r in whole if r.seq > after and (upto is None or r.seq <= upto)], (after, upto)
    with pytest.raises(tether.TaskNotFoundError):
        log.store.read_events(log.tenant, "nowhere")
