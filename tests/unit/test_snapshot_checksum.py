"""A snapshot is read back only when it passes its checksum: CRC-32 and the length of its bytes,
or the BLAKE2b that snapshots written by earlier versions carry (those stay readable, so an
upgrade does not make every stored task fold its whole history once more)."""

from __future__ import annotations

import hashlib

import tether
from tether.events import ObservationRecorded, fold
from tether.log.snapshots import checksum, first_lines_intact, matches
from tether.store import SnapshotRow

FAR = 10**9


def _blake2b(data: str) -> str:
    return hashlib.blake2b(data.encode(), digest_size=16).hexdigest()


def test_a_checksum_fails_on_any_changed_or_missing_byte() -> None:
    data = '{"k": "value"}\n' * 100
    stored = checksum(data)
    assert matches(data, stored) and matches(data.encode(), stored)  # text is checked as its UTF-8 bytes
    assert not matches(data.replace("value", "valuf", 1), stored)
    assert not matches(data[:-1], stored)
    assert not matches(data + " ", stored)
    assert not matches(data, "")
    assert not matches(data, "0" * 32)


def test_the_earlier_blake2b_checksum_is_still_checked() -> None:
    data = '{"k": "value"}'
    assert matches(data, _blake2b(data))
    assert not matches(data, _blake2b(data + " "))
    assert not matches(data, _blake2b(data)[:-1])


def _task_with_a_snapshot() -> tuple[tether.TaskLog, str, SnapshotRow]:
    log = tether.TaskLog("memory://", snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = log.create(type="chat")
    for i in range(9):  # seqs 2-10: the snapshot at 10 is the newest state, no event after it
        log.append(state.task_id, [ObservationRecorded(key=f"k{i % 3}", value=i)], state.version)
        state = log.load(state.task_id)
    snap = log.store.get_snapshot(log.tenant, state.task_id, at_most=FAR)
    assert snap is not None and snap.seq == 10 == state.version
    return log, state.task_id, snap


def _as_written_before(snap: SnapshotRow, data: str) -> SnapshotRow:
    """``data`` as a task snapshot of an earlier version: its first lines' checksum (``"h"``) and the
    row's are BLAKE2b."""
    two = data.index("\n", data.index("\n") + 1)
    first, third = data[:two], data[two + 1 :]
    assert third.startswith('{"h":"')
    data = first + '\n{"h":"' + _blake2b(first) + third[third.index('"', 6) :]
    return SnapshotRow(snap.seq, snap.schema, _blake2b(data), data)


def test_a_task_snapshot_with_the_earlier_checksums_is_read() -> None:
    log, task_id, snap = _task_with_a_snapshot()
    data = str(snap.data)
    assert '"k1","value":7,' in data and first_lines_intact(snap)
    # What the snapshot says, not the events: k1's value changed in it (the checksums over the change).
    old = _as_written_before(snap, data.replace('"k1","value":7,', '"k1","value":70,'))
    assert first_lines_intact(old)
    log.store.put_snapshot(log.tenant, task_id, old)
    assert tether.TaskLog(log.store).load(task_id).observations["k1"].value == 70


def test_a_task_snapshot_changed_under_its_earlier_checksums_is_rebuilt_from_events() -> None:
    log, task_id, snap = _task_with_a_snapshot()
    good = _as_written_before(snap, str(snap.data))
    damaged = SnapshotRow(good.seq, good.schema, good.checksum, str(good.data).replace('"value":7,', '"value":70,'))
    assert not first_lines_intact(damaged)
    log.store.put_snapshot(log.tenant, task_id, damaged)
    loaded = tether.TaskLog(log.store).load(task_id)
    assert loaded.observations["k1"].value == 7 and loaded == fold(log.events(task_id))
