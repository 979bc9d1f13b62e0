"""A snapshot's calls are summarised, and their index (ordinals, statuses, the events of each) is
read only when something needs it, on every backend: forking or reading a task at any point, and
appending new calls to it, cost the same for 20 calls as for 2,000; whatever reads the index
later sees the calls the fold makes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import orjson
import pytest

import tether
import tether.log.snapshots as snapshot_format
from tether.events import CallCompleted, CallFailed, Event, fold
from tether.log.snapshots import snapshot_row
from tether.model import STATE_SCHEMA_VERSION
from tether.store import SnapshotRow
from tether.testing.runtime.calls.test_lazy_calls import _readonly, _started
from tether.testing.runtime.timetravel.test_partial_snapshots import PAD, _is_partial, _snapshots


@pytest.fixture
def index_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times a calls' index was parsed (one entry each)."""
    parsed: list[int] = []
    real = snapshot_format._calls_line

    def counting(meta: object) -> snapshot_format.Calls:
        found = real(meta)
        parsed.append(len(found[0]))
        return found

    monkeypatch.setattr(snapshot_format, "_calls_line", counting)
    yield parsed


def _effect(n: int) -> list[Event]:
    return [_started(n), CallCompleted(n=n, result=[PAD, n], attempt=1, duration=0.1)]


def _task(log: tether.TaskLog, calls: int) -> str:
    """A task of side-effecting calls (two events each), as a run appends them, then its snapshot."""
    state = log.create(type="t")
    version = state.version
    for n in range(1, calls + 1):
        version = log.append(state.task_id, _effect(n)[:1], version, snapshot=False)
        version = log.append(state.task_id, _effect(n)[1:], version, snapshot=False)
    log.snapshot_if_due(state.task_id)
    return state.task_id


def _fetched(log: tether.TaskLog) -> list[int]:
    """The seqs of the snapshots ``log``'s store hands out from now on."""
    seen: list[int] = []
    real = log.store.get_snapshot

    def get_snapshot(tenant: str, task_id: str, *, at_most: int) -> SnapshotRow | None:
        snap = real(tenant, task_id, at_most=at_most)
        if snap is not None:
            seen.append(snap.seq)
        return snap

    log.store.get_snapshot = get_snapshot  # type: ignore[method-assign]
    return seen


def test_forking_between_partial_snapshots_reads_only_the_one_before_it(store_url: str, index_reads: list[int]) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    task_id = _task(log, 60)  # 121 events: a partial snapshot every ten, the full one at 121
    assert [s.seq for s in _snapshots(log, task_id) if not _is_partial(s)] == [121]
    cold = tether.TaskLog(log.store)
    seen = _fetched(cold)
    fork = cold.fork(task_id, 76, new_id="f")  # the partial snapshot at 70 (call 35 open), then 76: call 38 opened
    assert seen == [70] and index_reads == []
    assert (len(fork.calls), fork.calls.completed(), fork.calls.open_ordinals()) == (38, 37, {38})
    at = cold.state_at(task_id, 99)
    assert seen == [70, 90] and index_reads == []
    events = log.events(task_id)
    assert at.calls[-1] == fold(events[:99]).calls[-1]  # the call after the partial snapshot's prefix: its own events
    assert index_reads == []
    assert list(at.calls) == list(fold(events[:99]).calls)  # the others: the full snapshot's index, now
    assert seen[-1] == 121 and index_reads == [60]
    assert list(fork.calls) == list(fold([*events[:76], *log.events("f")[-1:]]).calls)


def test_new_calls_go_on_from_a_loaded_state_without_its_index(store_url: str, index_reads: list[int]) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    task_id = _task(log, 60)
    cold = tether.TaskLog(log.store, snapshots=tether.SnapshotPolicy(every=10_000))
    version = cold.load(task_id).version
    for n in range(61, 71):  # more calls, and a readonly one opened and finished by one event
        version = cold.append(task_id, _effect(n), version)
        version = cold.append(task_id, [_readonly(n + 100, "r")], version)
    state = cold.load(task_id)
    assert (len(state.calls), state.calls.completed(), state.calls[-1].n) == (80, 80, 170)
    assert index_reads == []
    with pytest.raises(tether.InvalidInputError, match="already open"):  # call 5 is known opened
        cold.append(task_id, [_readonly(5, "again")], version)
    assert index_reads == [60]  # an earlier call's ordinal needs the index
    assert list(state.calls) == list(fold(log.events(task_id)).calls)


def test_a_full_snapshot_with_an_unreadable_index_reads_its_calls_from_events(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    task_id = _task(log, 30)
    full = _snapshots(log, task_id)[-1]
    state_line, summary, _ = str(full.data).split("\n")
    broken = f'{state_line}\n{summary}\n{{"n": [1]}}'  # intact (its checksum matches), and wrong
    log.store.put_snapshot(log.tenant, task_id, snapshot_row(full.seq, full.schema, broken))
    with caplog.at_level(logging.WARNING, logger="tether"):
        state = tether.TaskLog(log.store).load(task_id)
        assert not caplog.records
        assert list(state.calls) == list(fold(log.events(task_id)).calls)
    assert [r.getMessage() for r in caplog.records if "reading its calls from events" in r.getMessage()]


def test_snapshots_of_the_earlier_format_still_load(store_url: str) -> None:
    """A full snapshot of two lines (state, calls' index) and a partial snapshot of a count only, as written
    before calls were summarised, load as the fold."""
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10_000))
    task_id = _task(log, 30)
    events = log.events(task_id)
    state = log.load(task_id)
    ns, codes, seqs = state.calls.ordinals(), state.calls.status_codes().decode(), state.calls.event_seqs()
    line = state.model_dump_json(exclude={"position", "calls"})
    old_full = f"{line}\n{orjson.dumps({'n': ns, 's': codes, 'e': seqs, 'o': 1}).decode()}"
    log.store.put_snapshot(log.tenant, task_id, snapshot_row(state.version, STATE_SCHEMA_VERSION, old_full))
    at = fold(events[:40])
    old_partial = f'{at.model_dump_json(exclude={"position", "calls"})}\n{{"k": {len(at.calls)}}}'
    log.store.put_snapshot(log.tenant, task_id, snapshot_row(40, STATE_SCHEMA_VERSION, old_partial))
    fresh = tether.TaskLog(log.store)
    assert fresh.load(task_id) == fold(events)
    assert fresh.state_at(task_id, 40) == at and fresh.state_at(task_id, 45) == fold(events[:45])


def test_threads_reading_one_loaded_state_see_the_same_calls(store_url: str) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    task_id = _task(log, 200)
    want = list(fold(log.events(task_id)).calls)
    for _ in range(3):
        state = tether.TaskLog(log.store).load(task_id)
        seen: list[object] = []
        threads = [threading.Thread(target=lambda s=state, out=seen: out.append(list(s.calls))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert seen == [want] * 4


def test_a_snapshot_of_a_loaded_state_keeps_the_summary_it_did_not_read(store_url: str) -> None:
    """A state loaded with its index unread, given more calls and snapshotted again: the new summary
    still knows the earlier calls that did not complete."""
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = log.create(type="t")
    version = log.append(state.task_id, [_started(1), CallFailed(n=1, reason="given up")], state.version)
    for n in range(2, 20):
        version = log.append(state.task_id, _effect(n), version)
    cold = tether.TaskLog(log.store, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    version = cold.load(state.task_id).version
    for n in range(20, 40):
        version = cold.append(state.task_id, _effect(n), version)
    events = log.events(state.task_id)
    for seq in (version - 5, version):
        at, want = tether.TaskLog(log.store).state_at(state.task_id, seq), fold(events[:seq])
        assert (at.calls.completed(), at.calls.open_ordinals()) == (want.calls.completed(), want.calls.open_ordinals())
        assert 1 in at.calls.open_ordinals(), seq
        assert at == want


def test_a_full_snapshots_index_is_checked_when_read_and_its_state_at_load(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The state and summary lines carry their own checksum (checked at load); the row's checksum,
    over the index too, is checked when the index is read."""
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    task_id = _task(log, 30)
    full = _snapshots(log, task_id)[-1]
    events = log.events(task_id)
    data = str(full.data)
    assert '"2,3"' in data.split("\n")[2]
    scribbled = SnapshotRow(full.seq, full.schema, full.checksum, data.replace('"2,3"', '"2,5"'))
    log.store.put_snapshot(log.tenant, task_id, scribbled)  # call 1's events, wrong: the row's checksum fails
    with caplog.at_level(logging.WARNING, logger="tether"):
        state = tether.TaskLog(log.store).load(task_id)
        assert not caplog.records and state.version == full.seq
        assert list(state.calls) == list(fold(events).calls)
    assert ["fails its checksum" in r.getMessage() for r in caplog.records] == [True]
    caplog.clear()
    assert data.count('"type":"t"') == 1
    first = data.replace('"type":"t"', '"type":"u"')  # the state line, still valid: its own checksum fails
    log.store.put_snapshot(log.tenant, task_id, SnapshotRow(full.seq, full.schema, full.checksum, first))
    with caplog.at_level(logging.WARNING, logger="tether"):
        assert tether.TaskLog(log.store).load(task_id) == fold(events)
        assert "fails its checksum" in caplog.text


def test_finishing_a_call_left_open_among_finished_ones_reads_no_index(store_url: str, index_reads: list[int]) -> None:
    log = tether.TaskLog(store_url, snapshots=tether.SnapshotPolicy(every=10, size_ratio=0))
    state = log.create(type="t")
    version = log.append(state.task_id, [_started(1)], state.version)  # a parallel call, still open
    for n in range(2, 40):
        version = log.append(state.task_id, [_readonly(n, "r")], version)
    log.write_snapshot(state.task_id, log.load(state.task_id))
    cold = tether.TaskLog(log.store)
    loaded = cold.load(state.task_id)
    assert loaded.calls.open_ordinals() == {1} and index_reads == []
    version = cold.append(state.task_id, [CallCompleted(n=1, result="late", attempt=1, duration=0.1)], version)
    assert index_reads == []  # call 1 is known open from the summary
    assert list(cold.load(state.task_id).calls) == list(fold(log.events(state.task_id)).calls)
